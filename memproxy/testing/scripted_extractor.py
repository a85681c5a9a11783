"""A tiny deterministic stand-in for the extraction model (tests, demo, bench only).

It reads the prompt built by ``memproxy.outbox.extractor`` (a JSON payload in the user message)
and turns a few first-person sentence shapes of the *new* user messages into operations:

- "My name is Ana" → ADD "User's name is Ana" (UPDATE if a name memory exists)
- "I live in Paris" / "I moved to Berlin" → ADD "User lives in Paris", or UPDATE the
  existing "User lives in …" memory
- "I like / love X" → ADD "User likes X";  "I don't like X anymore" / "I no longer like X"
  → DELETE the matching "User likes X"
- "I work at X" / "I work as X" → ADD or UPDATE "User works at/as X"
- "Remember that X": X read as a sentence of its own ("Remember that my cat is called Miso" →
  "User's cat is called Miso"); one no other shape matches is added in the third person
  ("my" → "User's", "I'm" → "User is", "I <verb>" → "User <verb>s"), or as it is when it
  says nothing about the user ("Remember that the codeword is blue")
- "I'm Ana Lima" → the name; "I'm allergic to X", "I'm vegetarian", "I have a X", "I prefer X",
  "I play/drink/eat X", "I'm learning/flying … X" (a leading "Next Friday" kept), "My X is Y"
  → ADD;  "I'm not X anymore" → DELETE the matching "User is X"
- clauses joined by "and I …", ", I …" or ";" are read one by one

Questions yield nothing ("What do I like doing?" states no fact; a sentence ending in "?"
or opening with a question word is one), nor does anything else. Never used in the request
path of a real deployment.
"""

from __future__ import annotations

import json
import re
from typing import Any

# A sentence keeps its closing punctuation: "?" is what marks a question.
_SENTENCES = re.compile(r"[^.!?\n]+[.!?]*")
# A question without its "?": a question word and an auxiliary ("what do I like doing"), or an
# auxiliary and a subject ("do you know I like jazz"). "When I was young …" is not one.
_AUX = r"(?:do|does|did|am|is|are|was|were|can|could|would|will|should|shall|have|has)"
_QUESTION_START = re.compile(
    rf"^\W*(?:(?:what|who|whom|whose|where|when|why|which|how)\s+{_AUX}|{_AUX}\s+(?:i|you|we|they|he|she|it|my|your))\b",
    re.I,
)
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


def is_question(sentence: str) -> bool:
    """A question states no fact about the user, whatever first-person words it holds."""
    return sentence.rstrip().endswith("?") or _QUESTION_START.search(sentence) is not None


# First person → the "User …" form memories are written in, for a remembered sentence that no
# other shape matched. Order matters: "I'm" and "I have" before the bare "I <verb>".
_THIRD_PERSON = [
    (re.compile(r"\b(?:i'm|i am)\b", re.I), "User is"),
    (re.compile(r"\b(?:i've|i have)\b", re.I), "User has"),
    (re.compile(r"\bi was\b", re.I), "User was"),
    (re.compile(r"\bi'll\b", re.I), "User will"),
    (re.compile(r"\bi'd\b", re.I), "User would"),
    (re.compile(r"\bmy\b", re.I), "User's"),
    (re.compile(r"\bmine\b", re.I), "User's"),
    (re.compile(r"\b(?:me|myself)\b", re.I), "User"),
]
_I_VERB = re.compile(r"\bi (?P<verb>[a-z]+)\b", re.I)
_MODALS = frozenset("can could will would shall should may might must do did don't can't won't".split())


def _third_person_verb(verb: str) -> str:
    if verb.lower() in _MODALS:
        return verb
    if re.search(r"(?:s|sh|ch|x|z|o)$", verb):
        return verb + "es"
    if re.search(r"[^aeiou]y$", verb):
        return verb[:-1] + "ies"
    return verb + "s"


def third_person(text: str) -> str:
    """``text`` with its first-person words as "User …" ("my cat" → "User's cat")."""
    for pattern, replacement in _THIRD_PERSON:
        text = pattern.sub(replacement, text)
    return _I_VERB.sub(lambda m: "User " + _third_person_verb(m["verb"]), text)


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
        remembered = m["v"].strip().rstrip(".!")
        return _sentence_ops(remembered, memories, used) or [{"op": "ADD", "text": third_person(remembered)}]
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
            if is_question(sentence):
                continue
            for clause in _CLAUSES.split(sentence.strip().rstrip(".!")):
                for op in _sentence_ops(clause.strip(), memories, used):
                    if "id" in op:
                        used.add(op["id"])
                    operations.append(op)
    return json.dumps({"operations": operations or [{"op": "NONE"}]})
