"""The extraction prompt: system instructions, the JSON payload, retry feedback, the answer schema.

Invariants:
- Raw memory UUIDs never reach the model: existing memories are listed under local ids
  (``m1``, ``m2`` … in relevance order) and ``operations`` maps them back.
- Every example in the prompt is a ``<placeholder>``, never a plausible fact: a small model
  copied the old example "User lives in Paris" into a stored memory. ``PROMPT_EXAMPLES``
  lists example facts any prompt version has shown, and the worker refuses a memory that
  carries one the conversation never mentioned (``guards.leaked_example``).
- Each new message carries the date it was captured, and ``today`` is the latest of them
  (not the day the worker runs): relative dates are relative to when they were said.
- A retry carries what was wrong with the previous answer (``previous_answer_rejected`` in
  the payload), so the model is not asked the identical question that produced the
  identical bad answer. The prompt is always exactly two messages: system, then the payload.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memproxy.memory.rows import Memory

# Names the extraction call in its system prompt, so a log line or a scripted upstream
# (memproxy.testing) can tell memory's own calls from a caller's.
EXTRACTOR_MARKER = "memproxy-extractor"

# Example facts shown by this or an earlier prompt version (see the module doc).
PROMPT_EXAMPLES = ("User lives in Paris",)

SYSTEM_PROMPT = f"""You are {EXTRACTOR_MARKER}, the memory keeper of an assistant.
From the NEW messages of a conversation, decide which long-term memories about the user to \
add, update or delete, and answer with one JSON object: {{{{"operations": [...]}}}}.
Below, <angle brackets> mark placeholders; never copy them into an answer.

Operations:
- {{{{"op": "ADD", "text": "<fact>"}}}}: a new durable fact about the user (identity, \
preferences, plans, relationships, circumstances). One short sentence in the third person \
that starts with "User" and holds ONE fact, at most {{max_chars}} characters. Two facts are two ADDs.
- {{{{"op": "UPDATE", "id": "<id from existing_memories>", "text": "<fact>"}}}}: an existing \
memory whose fact changed; its complete new text, still one fact.
- {{{{"op": "DELETE", "id": "<id from existing_memories>"}}}}: an existing memory the user \
contradicted or retracted.
- {{{{"op": "NONE"}}}}: nothing worth remembering.

Rules:
- Only use ids listed in existing_memories; when it is empty, only ADD or NONE are possible.
- Never repeat or copy an existing memory: no ADD of a fact it already states, no UPDATE \
that leaves it unchanged or turns it into another memory's text.
- When a fact changed (the user moved, changed jobs, stopped doing something), UPDATE the \
memory that states the old fact, or DELETE it when the user retracted it.
- Remember what the user says about themselves. Not the assistant's words or suggestions, \
not small talk, not questions, not general knowledge.
- Never store secrets: passwords, PINs, API keys, tokens, card or bank account numbers.
- Each new message has the date it was sent. Write absolute dates ("on <YYYY-MM-DD>"), \
never relative ones such as "tomorrow" or "next Friday".
- earlier_messages are context only (to resolve "it", "there"); extract from new_messages.
- If previous_answer_rejected is present, your last answer was unusable: fix what it says.
- Answer with the JSON object only."""

# The prompt's own placeholders; a memory that carries one copied the template.
PLACEHOLDERS = tuple(sorted(set(re.findall(r"<[^<>\n]+>", SYSTEM_PROMPT)) - {"<angle brackets>"}))

# ``response_format`` for providers that support structured outputs (strict mode needs
# every property required and nullable instead of optional).
RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "memory_operations",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {
                "operations": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "op": {"type": "string", "enum": ["ADD", "UPDATE", "DELETE", "NONE"]},
                            "id": {"type": ["string", "null"]},
                            "text": {"type": ["string", "null"]},
                        },
                        "required": ["op", "id", "text"],
                        "additionalProperties": False,
                    },
                }
            },
            "required": ["operations"],
            "additionalProperties": False,
        },
    },
}


@dataclass
class ExtractionInput:
    new_messages: list[dict[str, Any]]
    earlier_messages: list[dict[str, Any]]
    memories: list[Memory]
    # When each new message was captured (epoch seconds), parallel to ``new_messages``.
    times: list[float] = field(default_factory=list)
    # What was wrong with the previous attempt's answer (None on a first attempt).
    feedback: str | None = None
    attempt: int = 1


def local_ids(memories: Sequence[Memory]) -> dict[str, str]:
    """``{"m1": <memory id>, ...}`` in the given (relevance) order."""
    return {f"m{i}": memory.id for i, memory in enumerate(memories, start=1)}


def day_label(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d (%A)")


def _brief(message: dict[str, Any], ts: float | None = None) -> dict[str, Any]:
    out = {"role": message.get("role"), "content": message.get("content")}
    if ts is not None:
        out["date"] = day_label(ts)
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"name": (c.get("function") or {}).get("name"), "arguments": (c.get("function") or {}).get("arguments")}
            for c in message["tool_calls"] if isinstance(c, dict)
        ]  # fmt: skip
    if message.get("name"):
        out["name"] = message["name"]
    return out


def build_messages(
    data: ExtractionInput, instructions: str = "", max_chars: int = 300
) -> list[dict[str, str]]:
    ids = local_ids(data.memories)
    times: list[float | None] = list(data.times) or [None] * len(data.new_messages)
    payload = {
        "today": day_label(max(data.times)) if data.times else None,
        "existing_memories": [
            {"id": local, "text": m.text} for local, m in zip(ids, data.memories, strict=True)
        ],
        "earlier_messages": [_brief(m) for m in data.earlier_messages],
        "new_messages": [_brief(m, ts) for m, ts in zip(data.new_messages, times, strict=True)],
    }
    if data.feedback:
        # In the payload, not as another message: the user message stays the one JSON document.
        payload["previous_answer_rejected"] = (
            f"Your previous answer to this request was rejected: {data.feedback}. "
            "Answer again, correctly this time: the JSON object only, every text one short sentence."
        )
    system = SYSTEM_PROMPT.format(max_chars=max_chars)
    if instructions.strip():
        system += "\n\nOperator instructions (they take precedence):\n" + instructions.strip()
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": json.dumps(payload, ensure_ascii=False, indent=1)},
    ]
