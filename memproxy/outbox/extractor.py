"""Extraction: one LLM call turns captured turns into memory operations, validated strictly.

The call goes to ``extraction.model`` through ``Upstream`` (same routing rules as chat:
``upstream.api_base``, aliases), with JSON output requested. The prompt carries:
the new messages, a bounded window of the session's earlier messages (context only),
today's date, the scope's most similar existing memories under short local ids
(``m1``, ``m2`` …; raw UUIDs never reach the model) and ``extraction.instructions``.

Invariants:
- The answer must be ``{"operations": [...]}`` with ops ADD(text), UPDATE(id, text),
  DELETE(id), NONE. Malformed JSON, unknown ops, unknown ids, an id used twice and empty
  texts raise ``ExtractionError``: a failed attempt to retry, never "no memories".
- Local ids are mapped back to memory ids here; callers only see real ids.
- Credentials: the worker never has a caller's token. It uses a model alias's key,
  ``upstream.api_key``, or the provider's own environment variable; for a keyless
  OpenAI-compatible ``upstream.api_base`` a placeholder key is sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memproxy.auth import Credential
from memproxy.config import ExtractionSettings, UpstreamSettings
from memproxy.memory.rows import Memory
from memproxy.upstream import Upstream

OPS = ("ADD", "UPDATE", "DELETE", "NONE")
MAX_MEMORY_CHARS = 2000
MAX_QUERY_CHARS = 4000
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_KEYLESS = "memproxy-no-key"

# Names the extraction call in its system prompt, so a log line or a scripted upstream
# (memproxy.testing) can tell memory's own calls from a caller's.
EXTRACTOR_MARKER = "memproxy-extractor"

SYSTEM_PROMPT = f"""You are {EXTRACTOR_MARKER}, the memory keeper of an assistant.
From the NEW messages of a conversation, decide what long-term memories about the user to \
add, update or delete, and answer with one JSON object: {{"operations": [...]}}.

Operations:
- {{"op": "ADD", "text": "..."}}: a new durable fact about the user (identity, preferences, \
plans, relationships, circumstances). One short, self-contained sentence in the third person \
("User lives in Paris"). Turn relative dates into absolute ones using today's date.
- {{"op": "UPDATE", "id": "m1", "text": "..."}}: an existing memory whose fact changed or \
became more precise; give its complete new text.
- {{"op": "DELETE", "id": "m2"}}: an existing memory the user contradicted or retracted.
- {{"op": "NONE"}}: nothing worth remembering.

Rules:
- Only use ids listed in existing_memories. Never ADD a fact that an existing memory already states.
- Prefer UPDATE over ADD + DELETE when a fact changed ("moved to Berlin" updates "lives in Paris").
- Remember what the user says about themselves; not the assistant's suggestions, not \
small talk, not questions. Never store secrets (passwords, API keys, card numbers).
- earlier_messages are context only (to resolve "it", "there"); extract from new_messages.
- Answer with the JSON object only."""


class MissingCredentials(Exception):
    """The extraction call failed and the start-up check found no credentials for it."""


class ExtractionError(Exception):
    """The extractor's answer is unusable; the attempt failed and will be retried."""

    def __init__(self, message: str, usage: tuple[int, int] = (0, 0)) -> None:
        super().__init__(message)
        self.usage = usage  # (prompt, completion) tokens spent on the failed attempt


@dataclass(frozen=True, slots=True)
class Operation:
    op: str
    text: str | None = None
    memory_id: str | None = None  # the real id, for UPDATE and DELETE


@dataclass
class ExtractionInput:
    new_messages: list[dict[str, Any]]
    earlier_messages: list[dict[str, Any]]
    memories: list[Memory]
    today: str


@dataclass
class ExtractionResult:
    operations: list[Operation]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    local_ids: dict[str, str] = field(default_factory=dict)


def local_ids(memories: Sequence[Memory]) -> dict[str, str]:
    """``{"m1": <memory id>, ...}`` in the given (relevance) order."""
    return {f"m{i}": memory.id for i, memory in enumerate(memories, start=1)}


def _brief(message: dict[str, Any]) -> dict[str, Any]:
    out = {"role": message.get("role"), "content": message.get("content")}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"name": (c.get("function") or {}).get("name"), "arguments": (c.get("function") or {}).get("arguments")}
            for c in message["tool_calls"] if isinstance(c, dict)
        ]  # fmt: skip
    if message.get("name"):
        out["name"] = message["name"]
    return out


def build_messages(data: ExtractionInput, instructions: str = "") -> list[dict[str, str]]:
    ids = local_ids(data.memories)
    payload = {
        "today": data.today,
        "existing_memories": [
            {"id": local, "text": m.text} for local, m in zip(ids, data.memories, strict=True)
        ],
        "earlier_messages": [_brief(m) for m in data.earlier_messages],
        "new_messages": [_brief(m) for m in data.new_messages],
    }
    system = SYSTEM_PROMPT
    if instructions.strip():
        system += "\n\nOperator instructions (they take precedence):\n" + instructions.strip()
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": json.dumps(payload, ensure_ascii=False, indent=1)},
    ]


def _text(item: dict[str, Any], n: int) -> str:
    text = item.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ExtractionError(f"operation {n}: {item.get('op')} needs a non-empty text")
    if len(text) > MAX_MEMORY_CHARS:
        raise ExtractionError(f"operation {n}: text longer than {MAX_MEMORY_CHARS} characters")
    return text.strip()


def _target(item: dict[str, Any], n: int, ids: dict[str, str], used: set[str]) -> str:
    local = item.get("id")
    if not isinstance(local, str) or local not in ids:
        raise ExtractionError(f"operation {n}: unknown memory id {local!r}")
    if local in used:
        raise ExtractionError(f"operation {n}: memory id {local!r} used twice")
    used.add(local)
    return ids[local]


def parse_operations(raw: str | None, ids: dict[str, str]) -> list[Operation]:
    """Validate the extractor's answer; map local ids to memory ids. NONE ops are dropped."""
    text = (raw or "").strip()
    fenced = _FENCE.match(text)
    try:
        data = json.loads(fenced.group(1) if fenced else text)
    except ValueError as exc:
        raise ExtractionError(f"extractor answer is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("operations"), list):
        raise ExtractionError('extractor answer must be an object with an "operations" list')
    operations: list[Operation] = []
    used: set[str] = set()
    for n, item in enumerate(data["operations"]):
        if not isinstance(item, dict):
            raise ExtractionError(f"operation {n} is not an object")
        op = str(item.get("op") or item.get("event") or "").upper()
        if op == "ADD":
            operations.append(Operation("ADD", text=_text(item, n)))
        elif op == "UPDATE":
            operations.append(Operation("UPDATE", memory_id=_target(item, n, ids, used), text=_text(item, n)))
        elif op == "DELETE":
            operations.append(Operation("DELETE", memory_id=_target(item, n, ids, used)))
        elif op != "NONE":
            raise ExtractionError(f"operation {n}: unknown op {item.get('op')!r}")
    return operations


def today(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d (%A)")


def _usage(response: Any) -> tuple[int, int]:
    usage = getattr(response, "usage", None)
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion = int(getattr(usage, "completion_tokens", 0) or 0)
    return prompt, completion


class Extractor:
    def __init__(
        self, upstream: Upstream, settings: ExtractionSettings, upstream_settings: UpstreamSettings
    ) -> None:
        self.upstream = upstream
        self.settings = settings
        self._credential = self._worker_credential(settings.model, upstream_settings)
        # ``model_access``'s message when no credentials reach ``settings.model`` (set by services).
        self.credential_gap: str | None = None

    def _worker_credential(self, model: str, upstream: UpstreamSettings) -> Credential | None:
        """A placeholder key only for a keyless OpenAI-compatible base URL (see module doc)."""
        routed = self.upstream.route(model, None)
        if "api_key" in routed or not upstream.api_base or os.environ.get("OPENAI_API_KEY"):
            return None
        return Credential(tenant="", provider_key=_KEYLESS)

    async def extract(self, data: ExtractionInput) -> ExtractionResult:
        """One extraction call. Raises ``ExtractionError`` (with usage attached) or upstream errors."""
        ids = local_ids(data.memories)
        body = {
            "model": self.settings.model,
            "messages": build_messages(data, self.settings.instructions),
            "response_format": {"type": "json_object"},
        }
        try:
            # Not ``wait_for``: on Python 3.11 it can swallow a cancel (see ``Worker._idle``).
            async with asyncio.timeout(self.settings.timeout_s):
                response = await self.upstream.chat(body, self._credential)
        except Exception as exc:
            if self.credential_gap is None:
                raise
            # The start-up check knew this would fail: say which setting is missing.
            raise MissingCredentials(f"{self.credential_gap} (provider said: {exc})") from exc
        prompt, completion = _usage(response)
        choices = getattr(response, "choices", None) or []
        raw = getattr(getattr(choices[0], "message", None), "content", None) if choices else None
        try:
            operations = parse_operations(raw, ids)
        except ExtractionError as exc:
            raise ExtractionError(str(exc), (prompt, completion)) from None
        return ExtractionResult(operations, prompt, completion, ids)
