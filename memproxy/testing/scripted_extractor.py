"""A tiny deterministic stand-in for the extraction model (tests, demo, bench only).

It reads the prompt built by ``memproxy.outbox.extractor`` (a JSON payload in the user message)
and turns a few first-person sentence shapes of the *new* user messages into operations:

- "My name is Ana" → ADD "User's name is Ana" (UPDATE if a name memory exists)
- "I live in Paris" / "I moved to Berlin" → ADD "User lives in Paris", or UPDATE the
  existing "User lives in …" memory
- "I like / love X" → ADD "User likes X";  "I don't like X anymore" / "I no longer like X"
  → DELETE the matching "User likes X"
- "I work at X" → ADD or UPDATE "User works at X";  "Remember that X" → ADD "X"

Anything else yields no operations. Never used in the request path of a real deployment.
"""

from __future__ import annotations

import json
import re
from typing import Any

_SENTENCES = re.compile(r"[^.!?\n]+")
# (pattern, memory prefix that marks "the same fact", template for the new text)
_SINGLE_VALUED = [
    (re.compile(r"\bmy name is (?P<v>[\w' -]+)", re.I), "User's name is", "User's name is {v}"),
    (re.compile(r"\bi (?:live|am living) in (?P<v>[\w' -]+)", re.I), "User lives in", "User lives in {v}"),
    (re.compile(r"\bi(?:'ve| have)? moved to (?P<v>[\w' -]+)", re.I), "User lives in", "User lives in {v}"),
    (re.compile(r"\bi work (?:at|for) (?P<v>[\w' -]+)", re.I), "User works at", "User works at {v}"),
]
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
            for op in _sentence_ops(sentence.strip(), memories, used):
                if "id" in op:
                    used.add(op["id"])
                operations.append(op)
    return json.dumps({"operations": operations or [{"op": "NONE"}]})
