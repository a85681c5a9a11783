"""Extraction: one LLM call turns captured turns into memory operations.

The call goes to ``extraction.model`` through ``Upstream`` (same routing rules as chat:
``upstream.api_base``, aliases). The prompt (``memproxy.outbox.prompt``) carries the new
messages with their dates, a bounded window of the session's earlier messages (context
only), the scope's most similar existing memories under local ids and
``extraction.instructions``; the answer is read by ``memproxy.outbox.operations``.

Invariants:
- Every call is bounded: ``max_tokens`` (``extraction.max_tokens``) and a timeout, so a
  model stuck in a repetition loop costs one bounded answer, reported as cut off.
- ``response_format``: ``extraction.response_format: auto`` asks for the JSON schema
  where LiteLLM says the model supports structured outputs
  (``litellm.supports_response_schema``), ``json_object`` otherwise; ``json_schema``,
  ``json_object`` and ``none`` force one. Decided once, at start.
- A retry is not the same request again: it carries the previous attempt's error as
  feedback and, with ``extraction.retry_temperature`` set, samples at that temperature.
- The call takes the same road as a chat request: relayed (``memproxy.upstream.relay``) when the
  model's route is an OpenAI-wire provider, which spares LiteLLM's ~8 ms of client-side CPU
  per call in the process that also serves requests; through LiteLLM otherwise.
- Credentials: the worker never has a caller's token. It uses a model alias's key,
  ``upstream.api_key``, or the provider's own environment variable; for a keyless
  OpenAI-compatible ``upstream.api_base`` a placeholder key is sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from memproxy.auth import Credential
from memproxy.config import ExtractionSettings, UpstreamSettings
from memproxy.outbox.operations import ExtractionError, Operation, Rejected, parse_answer
from memproxy.outbox.prompt import RESPONSE_SCHEMA, ExtractionInput, build_messages, local_ids
from memproxy.upstream.fastpath import FastPaths
from memproxy.upstream.provider import Upstream, import_litellm
from memproxy.upstream.relay import Relay, provider_error

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 4000
_KEYLESS = "memproxy-no-key"


class MissingCredentials(Exception):
    """The extraction call failed and the start-up check found no credentials for it."""


@dataclass
class ExtractionResult:
    operations: list[Operation]
    rejected: list[Rejected] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    local_ids: dict[str, str] = field(default_factory=dict)


@dataclass
class _Answer:
    """What extraction reads off a chat completion, whichever road it took."""

    content: str | None
    cut_off: bool  # finish_reason "length": the answer hit max_tokens
    prompt_tokens: int
    completion_tokens: int

    @classmethod
    def of(cls, response: Any) -> _Answer:
        """From LiteLLM's response object or a provider's JSON (a dict)."""
        usage = _field(response, "usage")
        choices = _field(response, "choices") or []
        first = choices[0] if choices else None
        content = _field(_field(first, "message"), "content")
        return cls(
            content if isinstance(content, str) or content is None else str(content),
            _field(first, "finish_reason") == "length",
            int(_field(usage, "prompt_tokens") or 0),
            int(_field(usage, "completion_tokens") or 0),
        )


def _field(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def choose_response_format(setting: str, routed: dict[str, Any]) -> dict[str, Any] | None:
    """The ``response_format`` to send (see the module doc); None sends none."""
    if setting == "none":
        return None
    if setting == "json_schema":
        return RESPONSE_SCHEMA
    if setting == "auto":
        try:
            litellm = import_litellm()
            supported = litellm.supports_response_schema(
                model=str(routed["model"]), custom_llm_provider=routed.get("custom_llm_provider")
            )
        except Exception:  # an unknown model or provider: no structured outputs then
            supported = False
        if supported:
            return RESPONSE_SCHEMA
    return {"type": "json_object"}


class Extractor:
    def __init__(
        self,
        upstream: Upstream,
        settings: ExtractionSettings,
        upstream_settings: UpstreamSettings,
        *,
        max_chars: int = 300,
        fast: tuple[FastPaths, Relay] | None = None,
    ) -> None:
        self.upstream = upstream
        self._fast = fast
        self.settings = settings
        self.max_chars = max_chars
        routed = self.upstream.route(settings.model, None)
        self._credential = self._worker_credential(routed, upstream_settings)
        self.response_format = choose_response_format(settings.response_format, routed)
        kind = self.response_format["type"] if self.response_format else "none"
        log.info("extraction model %s, response_format %s", settings.model, kind)
        # ``model_access``'s message when no credentials reach ``settings.model`` (set by services).
        self.credential_gap: str | None = None

    def _worker_credential(self, routed: dict[str, Any], upstream: UpstreamSettings) -> Credential | None:
        """A placeholder key only for a keyless OpenAI-compatible base URL (see module doc)."""
        if "api_key" in routed or not upstream.api_base or os.environ.get("OPENAI_API_KEY"):
            return None
        return Credential(tenant="", provider_key=_KEYLESS)

    def request_body(self, data: ExtractionInput) -> dict[str, Any]:
        s = self.settings
        body: dict[str, Any] = {
            "model": s.model,
            "messages": build_messages(data, s.instructions, self.max_chars),
            "max_tokens": s.max_tokens,
        }
        if self.response_format is not None:
            body["response_format"] = self.response_format
        if data.attempt > 1 and s.retry_temperature is not None:
            body["temperature"] = s.retry_temperature
        return body

    async def extract(self, data: ExtractionInput) -> ExtractionResult:
        """One extraction call. Raises ``ExtractionError`` (with usage attached) or upstream errors."""
        ids = local_ids(data.memories)
        body = self.request_body(data)
        try:
            # Not ``wait_for``: on Python 3.11 it can swallow a cancel (see ``Worker._idle``).
            async with asyncio.timeout(self.settings.timeout_s):
                answer = await self._call(body)
        except Exception as exc:
            if self.credential_gap is None:
                raise
            # The start-up check knew this would fail: say which setting is missing.
            raise MissingCredentials(f"{self.credential_gap} (provider said: {exc})") from exc
        usage = (answer.prompt_tokens, answer.completion_tokens)
        try:
            parsed = parse_answer(answer.content, ids, cut_off=answer.cut_off)
        except ExtractionError as exc:
            raise ExtractionError(str(exc), usage) from None
        return ExtractionResult(parsed.operations, parsed.rejected, *usage, ids)

    async def _call(self, body: dict[str, Any]) -> _Answer:
        route = self._fast[0].route(self.settings.model, self._credential) if self._fast else None
        if route is None or self._fast is None:
            return _Answer.of(await self.upstream.chat(body, self._credential))
        payload = json.dumps({**body, "model": route.model}).encode()
        reply = await self._fast[1].send(route, "/chat/completions", payload, stream=False)
        try:
            data = json.loads(reply.body or b"")
        except ValueError:
            data = None
        if reply.status >= 400 or not isinstance(data, dict):
            raise provider_error(reply.status, data)
        return _Answer.of(data)
