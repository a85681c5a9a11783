"""Legacy completions (``POST /v1/completions``: prompt in, text out) as a surface.

Older clients and base models still call it. It has no messages, so:
- Memory block: a prefix of the prompt, followed by a blank line (the caller's prompt stays
  whole and last, where a completion model continues it).
- Recall's query and capture's input: the prompt, as one user message; the reply: choice 0's
  ``text``, as one assistant message. Only a single non-blank text prompt (a string, or an array
  of one string) without ``echo`` is a turn: a batch of prompts, token arrays, or a request that
  echoes its prompt back is forwarded untouched, with nothing recalled or captured.
- An OpenAI-wire provider that serves ``/completions`` (``SERVING_PROVIDERS``) gets the turn
  relayed byte for byte; any other goes through ``litellm.atext_completion``. A stream ends with ``data: [DONE]`` (sent once the turn
  is captured), or with ``data: {"error": …}`` when it fails after the first byte.
"""

from __future__ import annotations

from typing import Any, ClassVar

from memproxy.api.body import require_str
from memproxy.api.openapi import ID, PROVIDER_FIELDS
from memproxy.api.surface import Providers, Surface, Transport
from memproxy.api.transports import ByteRelay, ThroughLiteLLM
from memproxy.auth import Credential
from memproxy.errors import ApiError
from memproxy.proxy.placement import Placement
from memproxy.proxy.recall import QUERY_MAX_CHARS
from memproxy.upstream.provider import to_api_error
from memproxy.upstream.surfaces import call_arguments
from memproxy.wire.message_text import clip_text
from memproxy.wire.sse import DONE_FRAME, Piece, data_frame

PATH = "/completions"
# The OpenAI-wire providers that serve the legacy API at ``{base}/completions`` (OpenAI and any
# server named by ``upstream.api_base``, OpenRouter, Together, Fireworks, vLLM, LM Studio,
# llamafile). Groq and Mistral have none and DeepSeek only under ``/beta``: their turns go
# through LiteLLM, which turns them into chat.
SERVING_PROVIDERS = frozenset({"openai", "openrouter", "together_ai", "fireworks_ai", "hosted_vllm", "lm_studio",
                               "llamafile"})  # fmt: skip
# The request fields of OpenAI's legacy completions API that LiteLLM takes as arguments.
PARAMS = frozenset(
    {
        "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
        "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix", "temperature",
        "top_p", "user",
    }
)  # fmt: skip
_LITELLM_ONLY_KEYS = frozenset({"provider_specific_fields", "_hidden_params"})


def prompt_text(body: dict[str, Any]) -> str | None:
    """The prompt when it is a single text prompt, else None (a batch or tokens: not a turn)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return prompt if isinstance(prompt, str) else None


def _index(choice: dict[str, Any]) -> int | None:
    index = choice.get("index", 0)
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def _json(obj: Any) -> dict[str, Any]:
    data = obj.model_dump(exclude_none=True) if hasattr(obj, "model_dump") else dict(obj)
    return {k: v for k, v in data.items() if k not in _LITELLM_ONLY_KEYS}


def _openai_shape(obj: Any) -> dict[str, Any]:
    """A LiteLLM text completion (whole or chunk) as OpenAI sends it: each choice's ``text`` a
    string (LiteLLM's last chunk has none), ``logprobs`` and ``finish_reason`` present, null until set."""
    data = _json(obj)
    for choice in data.get("choices") or []:
        choice["text"] = choice.get("text") or ""
        choice.setdefault("logprobs", None)
        choice.setdefault("finish_reason", None)
    return data


def _chunk_piece(chunk: Any) -> list[Piece]:
    data = _openai_shape(chunk)
    return [Piece(data_frame(data), [data])]


class CompletionsAccumulator:
    """Rebuilds choice 0's text from relayed chunks; complete once it has a finish reason."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self.finish_reason: str | None = None

    def feed(self, event: dict[str, Any]) -> None:
        for choice in event.get("choices") or ():
            if isinstance(choice, dict) and _index(choice) == 0:
                self._text.append(str(choice.get("text") or ""))
                self.finish_reason = choice.get("finish_reason") or self.finish_reason

    @property
    def complete(self) -> bool:
        return self.finish_reason is not None

    def message(self) -> dict[str, Any] | None:
        return {"role": "assistant", "content": "".join(self._text)}


class CompletionsSurface(Surface):
    name = "completions"
    operation = "create_completion"
    paths = ("/v1/completions", "/completions")
    request_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["model", "prompt"],
        "properties": {**PROVIDER_FIELDS, "user": ID, "prompt": {"oneOf": [
            {"type": "string"},
            {"type": "array", "minItems": 1, "items": {"type": "string"}},
            {"type": "array", "minItems": 1, "items": {"type": "integer"}},
            {"type": "array", "minItems": 1, "items": {"type": "array", "items": {"type": "integer"}}},
        ]}},
    }  # fmt: skip

    def validate(self, body: dict[str, Any]) -> None:
        """The checks OpenAI makes before anything is forwarded."""
        require_str(body, "model")
        prompt = body.get("prompt")
        if prompt is None:
            raise ApiError(400, "Missing required parameter: 'prompt'.", param="prompt",
                           code="missing_required_parameter")  # fmt: skip
        if not isinstance(prompt, str | list) or (isinstance(prompt, list) and not prompt):
            raise ApiError(400, "'prompt' must be a string, an array of strings or an array of tokens.",
                           param="prompt", code="invalid_type")  # fmt: skip
        if "stream" in body and not isinstance(body["stream"], bool):
            raise ApiError(400, "'stream' must be a boolean.", param="stream", code="invalid_type")

    def is_turn(self, body: dict[str, Any]) -> bool:
        # With ``echo`` the answer repeats the prompt: a memory block before it would come back to
        # the client and be captured as the reply, so an echoing request is left alone.
        return bool((prompt_text(body) or "").strip()) and not body.get("echo")

    def query(self, body: dict[str, Any]) -> str:
        return clip_text((prompt_text(body) or "").strip(), QUERY_MAX_CHARS)

    def inputs(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        prompt = prompt_text(body)
        return [{"role": "user", "content": prompt}] if prompt and prompt.strip() else []

    def transport(self, body: dict[str, Any], credential: Credential, providers: Providers) -> Transport:
        route = providers.fast_paths.route(body["model"], credential)
        if route is not None and route.provider in SERVING_PROVIDERS:
            return ByteRelay(providers.relay, route, PATH)
        upstream = providers.litellm

        async def call(forwarded: dict[str, Any]) -> Any:
            try:
                return await upstream.litellm.atext_completion(
                    **call_arguments(upstream, forwarded, credential, PARAMS)
                )
            except Exception as exc:
                raise to_api_error(exc) from exc

        trailer = Piece(DONE_FRAME, [], final=True)
        return ThroughLiteLLM(
            call, content=_openai_shape, cut=_chunk_piece, error=to_api_error, trailer=trailer
        )

    def place(
        self, body: dict[str, Any], text: str, placement: Placement, transport: Transport
    ) -> dict[str, Any]:
        placed = f"{text}\n\n{prompt_text(body)}"
        return {**body, "prompt": [placed] if isinstance(body["prompt"], list) else placed}

    def reply_of(self, answer: dict[str, Any]) -> dict[str, Any] | None:
        for choice in answer.get("choices") or []:
            if isinstance(choice, dict) and _index(choice) == 0:
                return {"role": "assistant", "content": str(choice.get("text") or "")}
        return None

    def accumulator(self) -> CompletionsAccumulator:
        return CompletionsAccumulator()

    def error_frame(self, error: ApiError, last: bytes) -> bytes:
        return data_frame(error.body())


SURFACE = CompletionsSurface()
