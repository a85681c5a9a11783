"""A scripted OpenAI-compatible upstream: the stand-in for a paid provider.

Used by the test-suite, the benchmarks and ``memproxy demo``; it never runs in the
proxy's own request path. Behaviour is chosen per request by the model name, so
concurrent tests do not step on each other:

- ``fail-500`` / ``fail-429`` / ``fail-401`` / ``fail-403`` / ``fail-404``: an OpenAI error
- ``hang``: never answers (for timeouts; chat and embeddings)
- ``drop``: streams two chunks, then cuts the connection
- ``slow``: 50 ms between streamed chunks
- ``tools``: answers with a tool call
- ``terse``: the text answer without the memories it was given (a model's answer does not
  grow with the memory block; ``bench/prefix_cache.py`` measures prompts built from answers)
- anything else: a deterministic text answer (``reply_for``)
- a model name registered in ``raw``: exactly those bytes (``RawReply``)

The same behaviours answer OpenAI's Responses API (``scripted_responses``: ``/v1/responses``,
typed SSE events, stored answers for ``GET``/``DELETE``) and Anthropic's Messages API
(``scripted_anthropic``: ``/v1/messages``, the shape LiteLLM's native Anthropic route sends).

Requests are checked as OpenAI checks them (``scripted_validation``): an unknown role, a
content that is neither text nor parts, a parameter of the wrong type or a missing required
one is a 400 in OpenAI's error shape, so a client bug shows here and not first in production.

Extraction calls (recognised by ``EXTRACTOR_MARKER`` in a system message) are answered
from ``canned`` first, then by ``extractor`` if one is set, else by the rule-based
``scripted_extractor.rule_extractor``; an answer longer than the request's ``max_tokens``
words is cut there with ``finish_reason: length``. Every request is recorded.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import math
import re
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from memproxy.outbox.prompt import EXTRACTOR_MARKER
from memproxy.testing import scripted_anthropic as anthropic
from memproxy.testing import scripted_completions as completions
from memproxy.testing import scripted_responses as responses
from memproxy.testing.scripted_extractor import rule_extractor
from memproxy.testing.scripted_replies import MEMORY_MARKER, TOOL_ARGUMENTS, reply_for
from memproxy.testing.scripted_validation import invalid_chat_request
from memproxy.wire.message_text import message_text

# Re-exported: tests and benches import them from here (the fake's one public module).
__all__ = ["EMBED_DIM", "MEMORY_MARKER", "TOOL_ARGUMENTS", "RawReply", "Recorded", "ScriptedUpstream",
           "embed", "is_extraction", "reply_for", "typed_sse"]  # fmt: skip
EMBED_DIM = 64


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class RawReply:
    """Exact bytes to answer with (for byte-for-byte relay tests): one body, or SSE pieces."""

    body: bytes | list[bytes]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    media_type: str = "application/json"

    def response(self) -> Response:
        if isinstance(self.body, list):
            pieces = list(self.body)

            async def chunks() -> AsyncIterator[bytes]:
                for piece in pieces:
                    yield piece

            return StreamingResponse(chunks(), self.status, self.headers, self.media_type)
        return Response(self.body, self.status, self.headers, self.media_type)


@dataclass
class ScriptedUpstream:
    """State of the fake provider; ``app`` serves it."""

    requests: list[Recorded] = field(default_factory=list)
    canned: deque[str] = field(default_factory=deque)
    # May return the answer or an awaitable of it (a test can hold an extraction open).
    extractor: Callable[[dict[str, Any]], str | Awaitable[str]] | None = None
    # Model name → exact reply (``RawReply``), checked before every other behaviour.
    raw: dict[str, RawReply] = field(default_factory=dict)
    cancelled_streams: int = 0
    completed_streams: int = 0
    # Responses API answers by id (``previous_response_id``, GET, DELETE).
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)

    def requests_to(self, suffix: str) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith(suffix)]

    def chat_requests(self, *, extraction: bool | None = None) -> list[Recorded]:
        out = [r for r in self.requests if r.path.endswith("/chat/completions")]
        if extraction is not None:
            out = [r for r in out if is_extraction(r.body) == extraction]
        return out

    def last_chat(self) -> Recorded:
        return self.chat_requests(extraction=False)[-1]

    def find_chat(self, needle: str) -> Recorded:
        """The latest non-extraction chat request whose body mentions ``needle``."""
        for rec in reversed(self.chat_requests(extraction=False)):
            if needle in json.dumps(rec.body):
                return rec
        raise LookupError(needle)

    @property
    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/models/{model_id:path}", self._model, methods=["GET"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/responses/{id}", self._stored_response, methods=["GET", "DELETE"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
            ]
        )

    async def _responses(self, request: Request) -> Response:
        body = await self._record(request)
        model = str(body.get("model", ""))
        if (failure := _failure(model)) is not None:
            return failure
        if "hang" in model:
            await _hang(request)
        previous = body.get("previous_response_id")
        if previous is not None and previous not in self.stored:
            return _not_found(f"Previous response with id '{previous}' not found.")
        answer = responses.response_object(body, responses.output_items(body, model))
        if body.get("store", True):
            self.stored[answer["id"]] = answer
        if body.get("stream"):
            events = responses.stream_events(answer)
            return StreamingResponse(typed_sse(events, model, self), media_type="text/event-stream")
        return JSONResponse(answer)

    async def _stored_response(self, request: Request) -> Response:
        self.requests.append(Recorded(request.url.path, dict(request.headers), {}))
        response_id = request.path_params["id"]
        if response_id not in self.stored:
            return _not_found(f"Response with id '{response_id}' not found.")
        if request.method == "DELETE":
            del self.stored[response_id]
            return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})
        return JSONResponse(self.stored[response_id])

    async def _messages(self, request: Request) -> Response:
        body = await self._record(request)
        model = str(body.get("model", ""))
        if (failure := anthropic.failure(model)) is not None:
            return failure
        if "hang" in model:
            await _hang(request)
        answer = anthropic.message_object(body)
        if body.get("stream"):
            events = anthropic.stream_events(answer)
            return StreamingResponse(typed_sse(events, model, self), media_type="text/event-stream")
        return JSONResponse(answer)

    async def _completions(self, request: Request) -> Response:
        body = await self._record(request)
        model = str(body.get("model", ""))
        if (failure := _failure(model)) is not None:
            return failure
        answer = completions.completion_object(body)
        if body.get("stream"):
            chunks = completions.stream_chunks(answer)
            return StreamingResponse(self._data_events(chunks, model), media_type="text/event-stream")
        return JSONResponse(answer)

    async def _data_events(self, chunks: list[dict[str, Any]], model: str) -> AsyncIterator[bytes]:
        """``data: {json}`` events then ``data: [DONE]`` (``drop`` cuts after two, ``slow`` waits 50 ms)."""
        try:
            for i, chunk in enumerate(chunks):
                if "drop" in model and i == 2:
                    raise ConnectionAbortedError("scripted drop")
                if "slow" in model and i:
                    await asyncio.sleep(0.05)
                yield _sse(chunk)
            yield b"data: [DONE]\n\n"
            self.completed_streams += 1
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled_streams += 1
            raise

    async def _record(self, request: Request) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(await request.body() or b"{}")
        self.requests.append(Recorded(request.url.path, dict(request.headers), body))
        return body

    async def _models(self, request: Request) -> Response:
        self.requests.append(Recorded(request.url.path, dict(request.headers), {}))
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "scripted"}
            for m in ("gpt-4o-mini", "tools")
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _model(self, request: Request) -> Response:
        self.requests.append(Recorded(request.url.path, dict(request.headers), {}))
        model_id = request.path_params["model_id"]
        if model_id not in ("gpt-4o-mini", "tools"):
            error = {"message": f"The model '{model_id}' does not exist", "type": "invalid_request_error",
                     "param": None, "code": "model_not_found"}  # fmt: skip
            return JSONResponse({"error": error}, status_code=404)
        return JSONResponse({"id": model_id, "object": "model", "created": 0, "owned_by": "scripted"})

    async def _embeddings(self, request: Request) -> Response:
        body = await self._record(request)
        if (failure := _failure(str(body.get("model", "")))) is not None:
            return failure
        if "hang" in str(body.get("model", "")):
            await _hang(request)
        inputs = body.get("input", [])
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        data = [{"object": "embedding", "index": i, "embedding": embed(str(t))} for i, t in enumerate(texts)]
        usage = {"prompt_tokens": sum(len(str(t).split()) for t in texts), "total_tokens": 0}
        usage["total_tokens"] = usage["prompt_tokens"]
        return JSONResponse({"object": "list", "data": data, "model": body.get("model"), "usage": usage})

    async def _chat(self, request: Request) -> Response:
        body = await self._record(request)
        model = str(body.get("model", ""))
        if model in self.raw:
            return self.raw[model].response()
        if (refused := invalid_chat_request(body)) is not None:
            return refused
        if (failure := _failure(model)) is not None:
            return failure
        if "hang" in model:
            await _hang(request)
        if is_extraction(body):
            answer = self.canned.popleft() if self.canned else (self.extractor or rule_extractor)(body)
            if inspect.isawaitable(answer):
                answer = await answer
            return JSONResponse(_limited(body, _completion(body, answer, None)))
        tool_calls = _tool_calls(body) if "tools" in model else None
        content = None if tool_calls else reply_for(body)
        if body.get("stream"):
            return StreamingResponse(self._stream(body, content, tool_calls), media_type="text/event-stream")
        return JSONResponse(_completion(body, content, tool_calls))

    async def _stream(
        self, body: dict[str, Any], content: str | None, tool_calls: list[dict[str, Any]] | None
    ) -> AsyncIterator[bytes]:
        model = str(body.get("model", ""))
        base = {
            "id": "chatcmpl-" + uuid.uuid4().hex[:12],
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        chunks = [{**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                  for delta in _deltas(content, tool_calls)]  # fmt: skip
        finish = "tool_calls" if tool_calls else "stop"
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "choices": [], "usage": _usage(body, content)})
        async for event in self._data_events(chunks, model):
            yield event


async def typed_sse(
    events: list[dict[str, Any]], model: str, counter: ScriptedUpstream
) -> AsyncIterator[bytes]:
    """``event: <type>`` / ``data: {json}`` pairs (Responses and Anthropic streams);
    ``drop`` cuts the connection after two events, ``slow`` waits 50 ms between them."""
    try:
        for i, event in enumerate(events):
            if "drop" in model and i == 2:
                raise ConnectionAbortedError("scripted drop")
            if "slow" in model and i:
                await asyncio.sleep(0.05)
            yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
        counter.completed_streams += 1
    except (asyncio.CancelledError, GeneratorExit):
        counter.cancelled_streams += 1
        raise


def _not_found(message: str) -> Response:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": "not_found"}
    return JSONResponse({"error": error}, status_code=404)


async def _hang(request: Request) -> None:
    """Never answer, but notice the caller giving up, so shutting down does not wait on us."""
    for _ in range(72_000):  # an hour in 50 ms steps
        if await request.is_disconnected():
            return
        await asyncio.sleep(0.05)


def is_extraction(body: dict[str, Any]) -> bool:
    return any(
        m.get("role") == "system" and EXTRACTOR_MARKER in str(m.get("content"))
        for m in body.get("messages", [])
        if isinstance(m, dict)
    )


def embed(text: str) -> list[float]:
    """Deterministic unit vector for the fake embeddings endpoint."""
    vec = [0.0] * EMBED_DIM
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
        vec[int.from_bytes(digest, "little") % EMBED_DIM] += 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def _no_facts(body: dict[str, Any]) -> str:
    return json.dumps({"operations": []})


def _failure(model: str) -> Response | None:
    match = re.search(r"fail-(\d{3})", model)
    if not match:
        return None
    status = int(match.group(1))
    kinds = {
        401: "invalid_request_error",
        403: "permission_error",
        404: "invalid_request_error",
        429: "rate_limit_error",
    }
    body = {
        "error": {
            "message": f"scripted failure {status}",
            "type": kinds.get(status, "server_error"),
            "param": None,
            "code": f"scripted_{status}",
        }
    }
    return JSONResponse(body, status_code=status)


def _tool_calls(body: dict[str, Any]) -> list[dict[str, Any]]:
    tools = body.get("tools") or [{"function": {"name": "lookup"}}]
    name = tools[0].get("function", {}).get("name", "lookup")
    return [
        {
            "id": "call_scripted_1",
            "type": "function",
            "function": {"name": name, "arguments": TOOL_ARGUMENTS},
        }
    ]


def _usage(body: dict[str, Any], content: str | None) -> dict[str, int]:
    prompt = sum(len(message_text(m).split()) for m in body.get("messages", []) if isinstance(m, dict))
    completion = len((content or "").split()) or 1
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _completion(
    body: dict[str, Any], content: str | None, tool_calls: list[dict[str, Any]] | None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    n = int(body.get("n") or 1)
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:12],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model"),
        "system_fingerprint": "fp_scripted",
        "choices": [
            {
                "index": i,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
            for i in range(n)
        ],
        "usage": _usage(body, content),
    }


def _limited(body: dict[str, Any], completion: dict[str, Any]) -> dict[str, Any]:
    """Honour ``max_tokens`` as a provider does: cut the answer, say ``finish_reason: length``
    (a token here is a whitespace-separated word, as in ``_usage``)."""
    limit = body.get("max_tokens")
    content = completion["choices"][0]["message"]["content"] or ""
    if isinstance(limit, int) and len(content.split()) > limit:
        cut = " ".join(content.split()[:limit])
        for choice in completion["choices"]:
            choice["message"]["content"], choice["finish_reason"] = cut, "length"
        completion["usage"] = _usage(body, cut)
    return completion


def _deltas(content: str | None, tool_calls: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if tool_calls:
        call = tool_calls[0]
        args = call["function"]["arguments"]
        half = len(args) // 2
        first = {
            "index": 0,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": args[:half]},
        }
        return [
            {"role": "assistant", "content": None, "tool_calls": [first]},
            {"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]},
        ]
    words = (content or "").split(" ")
    pieces = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
    return [{"role": "assistant", "content": ""}] + [{"content": p} for p in pieces]


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"
