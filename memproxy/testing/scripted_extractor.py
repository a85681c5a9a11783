"""A tiny deterministic stand-in for the extraction model (tests, demo, bench only).

It reads the prompt built by ``memproxy.outbox.extractor`` (a JSON payload in the user message)
and turns a few first-person sentence shapes of the *new* user messages into operations:

- "My name is Ana" → ADD "User's name is Ana" (UPDATE if a name memory exists)
- "I live in Paris" / "I moved to Berlin" → ADD "User lives in Paris", or UPDATE the
  existing "User lives in …" memory
- "I like / love X" → ADD "User likes X";  "I don't like X anymore" / "I no longer like X"
  → DELETE the matching "User likes X"
- "I work at X" / "I work as X" → ADD or UPDATE "User works at/as X";  "Remember that X" → ADD "X"
- "I'm Ana Lima" → the name; "I'm allergic to X", "I'm vegetarian", "I have a X", "I prefer X",
  "I play/drink/eat X", "I'm learning/flying … X" (a leading "Next Friday" kept), "My X is Y"
  → ADD;  "I'm not X anymore" → DELETE the matching "User is X"
- clauses joined by "and I …", ", I …" or ";" are read one by one

Anything else yields no operations. Never used in the request path of a real deployment.
"""

from __future__ import annotations

import json
import re
from typing import Any

_SENTENCES = re.compile(r"[^.!?\n]+")
_CLAUSES = re.compile(r",?\s+and\s+(?=I\b)|;\s+|,\s+(?=I\b)")
# (pattern, memory prefix that marks "the same fact", template for the new text)
_SINGLE_VALUED = [
    (re.compile(r"\bmy name is (?P<v>[\w' -]+)", re.I), "User's name is", "User's name is {v}"),
    (re.compile(r"\bi (?:live|am living) in (?P<v>[\w' -]+)", re.I), "User lives in", "User lives in {v}"),
    (
        re.compile(r"\bi(?:'ve| have)? moved (?:from [\w' -]+? )?to (?P<v>[\w' -]+)", re.I),
        "User lives in",
        "User lives in {v}",
    ),
    (re.compile(r"\bi (?:now )?work (?:at|for) (?P<v>[\w' -]+)", re.I), "User works", "User works at {v}"),
    (re.compile(r"\bi (?:now )?work as (?P<v>[\w' -]+)", re.I), "User works", "User works as {v}"),
    (re.compile(r"^I'?m (?P<v>[A-Z]\w+(?: [A-Z]\w+)+)$"), "User's name is", "User's name is {v}"),
]
# (pattern, template) for facts that are simply added.
_FACTS = [
    (re.compile(r"\bi'?m (?:\w+ly )?allergic to (?P<v>.+)", re.I), "User is allergic to {v}"),
    (re.compile(r"\bi'?m (?P<v>vegetarian|vegan)$", re.I), "User is {v}"),
    (re.compile(r"\bi have (?P<v>an? .+)", re.I), "User has {v}"),
    (re.compile(r"\bi prefer (?P<v>.+)", re.I), "User prefers {v}"),
    (re.compile(r"\bi (?P<verb>play|drink|eat|speak) (?P<v>.+)", re.I), "User {verb}s {v}"),
    (
        re.compile(
            r"^(?P<when>(?:next|this) \w+ |tomorrow )?i'?m (?P<v>(?:learning|flying|going|travelling|moving) .+)",
            re.I,
        ),
        "User is {v}{when}",
    ),
    (re.compile(r"^my (?P<k>\w+(?: \w+){0,4}?) is (?P<v>.+)", re.I), "User's {k} is {v}"),
]
_NOT_ANYMORE = re.compile(r"\bi'?m (?:not (?P<v>\w+) any ?more|no longer (?P<w>\w+))", re.I)
_UNLIKE = re.compile(
    r"\bi (?:don't|do not|no longer) (?:like|love) (?P<v>[\w' -]+?)(?: anymore| any more)?$", re.I
)
_LIKE = re.compile(r"\bi (?:really )?(?:like|love) (?P<v>[\w' -]+)", re.I)
_REMEMBER = re.compile(r"\bremember that (?P<v>.+)", re.I)


def _payload(body: dict[str, Any]) -> dict[str, Any]:
    for message in body.get("messages", []):
        if isinstance(message, dict) and message.get("role") == "user":
            try:
                data = json.loads(str(message.get("content")))
            except ValueError:
                return {}
            return data if isinstance(data, dict) else {}
    return {}


def _find(memories: list[dict[str, Any]], prefix: str) -> str | None:
    for memory in memories:
        if str(memory.get("text", "")).lower().startswith(prefix.lower()):
            return str(memory["id"])
    return None


def _sentence_ops(sentence: str, memories: list[dict[str, Any]], used: set[str]) -> list[dict[str, Any]]:
    if (m := _UNLIKE.search(sentence)) is not None:
        target = _find(memories, f"User likes {m['v'].strip()}")
        return [{"op": "DELETE", "id": target}] if target and target not in used else []
    if (m := _NOT_ANYMORE.search(sentence)) is not None:
        target = _find(memories, f"User is {m['v'] or m['w']}")
        return [{"op": "DELETE", "id": target}] if target and target not in used else []
    for pattern, prefix, template in _SINGLE_VALUED:
        if (m := pattern.search(sentence)) is not None:
            text = template.format(v=m["v"].strip())
            target = _find(memories, prefix)
            if target and target not in used:
                return [{"op": "UPDATE", "id": target, "text": text}]
            return [{"op": "ADD", "text": text}]
    if (m := _LIKE.search(sentence)) is not None:
        return [{"op": "ADD", "text": f"User likes {m['v'].strip()}"}]
    if (m := _REMEMBER.search(sentence)) is not None:
        return [{"op": "ADD", "text": m["v"].strip()}]
    for pattern, template in _FACTS:
        if (m := pattern.search(sentence)) is not None:
            fields = {k: (v or "").strip() for k, v in m.groupdict().items()}
            if fields.get("when"):
                fields["when"] = " " + fields["when"].lower()
            return [{"op": "ADD", "text": template.format(**fields)}]
    return []


def rule_extractor(body: dict[str, Any]) -> str:
    """The extraction answer (a JSON string) for a recorded extraction request body."""
    data = _payload(body)
    memories = [m for m in data.get("existing_memories", []) if isinstance(m, dict)]
    operations: list[dict[str, Any]] = []
    used: set[str] = set()
    for message in data.get("new_messages", []):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        for sentence in _SENTENCES.findall(str(message.get("content") or "")):
            for clause in _CLAUSES.split(sentence.strip()):
                for op in _sentence_ops(clause.strip(), memories, used):
                    if "id" in op:
                        used.add(op["id"])
                    operations.append(op)
    return json.dumps({"operations": operations or [{"op": "NONE"}]})
