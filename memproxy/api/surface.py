"""The contract of an API surface: what a chat-completions-like endpoint must say about itself
so that ``api.pipeline`` can run its turns (recall, capture, the provider call, the relay).

A surface is one module under ``api/surfaces/`` holding one ``Surface`` subclass as ``SURFACE``
(and, when it has routes beyond its POST, a ``router``); ``api.surfaces.discover`` finds it, so a
new surface touches no shared module.

Invariants every surface keeps (the pipeline relies on them):
- ``validate`` refuses, in the surface's own error shape, every body the provider would refuse
  before anything is recalled or forwarded.
- ``place`` returns a copy: the caller's body is never mutated, and the memory block is its own
  message, item or block (or, where the surface has no messages, a prefix of the prompt).
- ``inputs`` and ``reply_of`` read the caller's own body and the provider's answer, never the
  forwarded body, so the injected memory block is never captured.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from starlette.requests import Request
from starlette.responses import Response

from memproxy.auth import Authenticator, Credential
from memproxy.errors import ApiError
from memproxy.outbox.capture import Accumulator
from memproxy.proxy.placement import Placement
from memproxy.upstream.fastpath import FastPaths
from memproxy.upstream.provider import Upstream
from memproxy.upstream.relay import Relay
from memproxy.upstream.surfaces import SurfaceUpstream
from memproxy.wire.sse import Piece


@dataclass(frozen=True)
class Providers:
    """What a surface may use to reach a provider: the fast path's routes and relay, LiteLLM."""

    fast_paths: FastPaths
    relay: Relay
    litellm: Upstream
    litellm_surfaces: SurfaceUpstream


@dataclass
class Outgoing:
    """One turn on its way to the provider."""

    raw: bytes  # the caller's bytes, forwarded as they came when nothing changed
    body: dict[str, Any]  # the caller's body (never mutated)
    forwarded: dict[str, Any]  # the body to send: ``body`` or a copy with the memory block
    credential: Credential
    request_headers: dict[str, str]  # lower-cased
    watch: bool  # capture will read the answer

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


@dataclass
class Whole:
    """A complete answer: ``content`` sent as is (bytes) or as JSON (a dict)."""

    content: bytes | dict[str, Any]
    answer: dict[str, Any] | None  # the answer as the surface reads it; None: not JSON
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Streamed:
    """An answer being streamed: its source, and the status and headers it opened with."""

    source: Any  # an ``api.stream_relay.EventSource``
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


class Transport(Protocol):
    """How one turn reaches its provider (``api.transports``: the byte relay, LiteLLM)."""

    label: str  # the upstream-time metric's ``path`` label: ``fast`` or ``litellm``

    async def send(self, outgoing: Outgoing) -> Whole | Streamed | Response:
        """A ``Response`` is the provider's refusal, sent as it is and never captured."""
        ...


class Surface(ABC):
    name: ClassVar[str]
    paths: ClassVar[tuple[str, ...]]  # the POST routes (``/v1/...`` and the SDK-less alias)
    operation: ClassVar[str]  # the POST's operationId in /openapi.json (generated clients name methods by it)
    anthropic_errors: ClassVar[bool] = False  # errors on these paths are Anthropic-shaped
    # The body's JSON schema in /openapi.json (``api.openapi``'s ``MESSAGE``, ``ID`` … help write it).
    request_schema: ClassVar[dict[str, Any]] = {"type": "object", "required": ["model"]}

    def authenticate(self, request: Request, auth: Authenticator) -> Credential:
        return auth.authenticate(request.headers.get("authorization"))

    @abstractmethod
    def validate(self, body: dict[str, Any]) -> None:
        """Raise ``ApiError`` (400) for a body the provider would refuse."""

    def user_of(self, body: dict[str, Any]) -> Any:
        """The body's own user field (scope falls back to it when no header names a user)."""
        return body.get("user")

    def is_turn(self, body: dict[str, Any]) -> bool:
        """False for a request that is no conversation turn (legacy completions' batch of prompts):
        it is forwarded untouched, with nothing recalled or captured."""
        return True

    @abstractmethod
    def query(self, body: dict[str, Any]) -> str:
        """The text recall searches for (the newest user input)."""

    @abstractmethod
    def inputs(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The turn's new input as chat messages, for capture."""

    @abstractmethod
    def transport(self, body: dict[str, Any], credential: Credential, providers: Providers) -> Transport:
        """Where this turn goes: the fast path's byte relay when the provider speaks this API, else LiteLLM."""

    @abstractmethod
    def place(
        self, body: dict[str, Any], text: str, placement: Placement, transport: Transport
    ) -> dict[str, Any]:
        """A copy of ``body`` with the memory block ``text`` in it (``proxy.placement``)."""

    @abstractmethod
    def reply_of(self, answer: dict[str, Any]) -> dict[str, Any] | None:
        """The assistant message (chat shape) of a complete answer, for capture."""

    @abstractmethod
    def accumulator(self) -> Accumulator:
        """Rebuilds the reply from a stream's events, for capture."""

    @abstractmethod
    def error_frame(self, error: ApiError, last: bytes) -> bytes:
        """The stream's last event when it fails after the first byte; ``last``: the piece before."""


__all__ = ["Outgoing", "Piece", "Providers", "Streamed", "Surface", "Transport", "Whole"]
