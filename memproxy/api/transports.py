"""The two ways a turn reaches its provider, shared by every surface (``api.surface.Transport``).

``ByteRelay``: the fast path. The provider speaks the surface's own API, so the body goes through
``upstream.relay`` and the answer comes back byte for byte: its status and body, or its SSE
stream read as ``ProviderStream`` pieces. ``ThroughLiteLLM``: any other provider, through a
LiteLLM call that translates; the surface says how its answer and stream items become JSON.

Invariants:
- ``ByteRelay`` sends the caller's own bytes when nothing changed (no memory block, the model named
  as the provider knows it); otherwise the body is serialized once. The provider's refusal
  (status ≥ 400) is returned as it came, with only the headers ``upstream.relay`` passes on.
- Neither changes what the provider sent; memproxy's ``X-Memproxy-*`` headers are added by the
  pipeline to a successful answer only.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import Response

from memproxy.api.stream_relay import LiteLLMEvents
from memproxy.api.surface import Outgoing, Streamed, Whole
from memproxy.errors import ApiError
from memproxy.upstream.fastpath import FastRoute
from memproxy.upstream.relay import ProviderStream, Relay
from memproxy.wire.sse import Piece, is_done, json_object


class ByteRelay:
    label = "fast"

    def __init__(
        self,
        relay: Relay,
        route: FastRoute,
        path: str,
        *,
        is_final: Callable[[bytes], bool] = is_done,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        self.relay = relay
        self.route = route
        self.path = path
        self._is_final = is_final
        self._extra_headers = extra_headers

    def payload(self, outgoing: Outgoing) -> bytes:
        """What the provider receives: the caller's own bytes when nothing changed."""
        if outgoing.forwarded is outgoing.body and self.route.model == outgoing.body.get("model"):
            return outgoing.raw
        return json.dumps({**outgoing.forwarded, "model": self.route.model}).encode()

    async def send(self, outgoing: Outgoing) -> Whole | Streamed | Response:
        reply = await self.relay.send(self.route, self.path, self.payload(outgoing), stream=outgoing.stream,
                                      extra_headers=self._extra_headers)  # fmt: skip
        if reply.status >= 400:  # the provider's error, as it sent it (not captured)
            return Response(reply.body, status_code=reply.status, headers=reply.headers)
        if reply.streaming:
            source = ProviderStream(reply, self._is_final, watch=outgoing.watch)
            return Streamed(source, reply.status, reply.headers)
        body = reply.body or b""
        answer = json_object(body) if outgoing.watch else None
        return Whole(body, answer, reply.status, reply.headers)


class ThroughLiteLLM:
    """``call(forwarded, credential)`` is LiteLLM's call for the surface; ``content`` turns its
    complete answer into the JSON the client gets; ``cut`` turns one stream item into pieces."""

    label = "litellm"

    def __init__(
        self,
        call: Callable[[dict[str, Any]], Awaitable[Any]],
        *,
        content: Callable[[Any], dict[str, Any]],
        cut: Callable[[Any], list[Piece]],
        error: Callable[[Exception], ApiError],
        trailer: Piece | None = None,
    ) -> None:
        self._call = call
        self._content = content
        self._cut = cut
        self._error = error
        self._trailer = trailer

    async def send(self, outgoing: Outgoing) -> Whole | Streamed | Response:
        # Errors before the first chunk (auth, rate limit, timeout) still get a real status code.
        answer = await self._call(outgoing.forwarded)
        if outgoing.stream:
            return Streamed(LiteLLMEvents(answer, self._cut, self._error, self._trailer))
        content = self._content(answer)
        return Whole(content, content)
