"""``/mcp``: the Model Context Protocol door onto the same store (Streamable HTTP, the official
``mcp`` SDK's session manager), mounted in the app and run inside its lifespan.

Invariants:
- Before any MCP message is read: a foreign ``Origin`` is a 403 (the specification's
  DNS-rebinding check; ``mcp.allowed_origins``, loopback origins and no origin pass), then
  the credential is checked exactly as on ``/v1/*`` (``Authenticator``): none or a wrong one
  is a 401. Both answers are OpenAI-shaped JSON, and nothing reaches the store.
- The tenant is the credential's; the scope comes from the ``X-Memproxy-User-Id`` /
  ``-Agent-Id`` / ``-Session-Id`` headers of each request, which *pin* it (``Caller.pinned``):
  a tool argument may set an id the headers leave open, never replace one they set.
- A session (``Mcp-Session-Id``) belongs to the tenant that opened it: the SDK answers another
  tenant's request for it as for an unknown session (404).
- Tool calls are counted per tool and outcome in ``/metrics`` (``memproxy_mcp_tool_calls_total``,
  ``memproxy_mcp_tool_duration_seconds``); the tool name is a label only when it is one of
  ours, so cardinality stays bounded.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from memproxy import __version__
from memproxy.api.mcp_tools import ToolSpec, api_refusal, build_tools, schema_refusal, success
from memproxy.auth import Credential
from memproxy.config import Settings
from memproxy.errors import ApiError
from memproxy.memory.management import Caller, MemoryManagement
from memproxy.services import Services
from memproxy.storage.engine import DatabaseUnavailable

PATH = "/mcp"
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
_TOOL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_INSTRUCTIONS = (
    "memproxy's long-term memory of this user: the same store the user's apps recall from when they "
    "call a model through memproxy. search_memories before answering questions about the user; "
    "add_memory for a durable fact the user states (one fact per memory); forget_scope only when "
    "the user asks to be forgotten."
)


class McpMetrics:
    """The MCP door's instruments, in the app's registry (``metrics.Metrics.registry``)."""

    def __init__(self, registry: CollectorRegistry, tools: frozenset[str]) -> None:
        self._tools = tools
        self.calls = Counter("memproxy_mcp_tool_calls", "MCP tool calls by tool and outcome (ok, error)",
                             ["tool", "outcome"], registry=registry)  # fmt: skip
        self.seconds = Histogram("memproxy_mcp_tool_duration_seconds", "MCP tool call latency",
                                 ["tool"], buckets=_TOOL_BUCKETS, registry=registry)  # fmt: skip

    def observe(self, tool: str, ok: bool, seconds: float) -> None:
        label = tool if tool in self._tools else "(unknown)"
        self.calls.labels(label, "ok" if ok else "error").inc()
        self.seconds.labels(label).observe(seconds)


def origin_allowed(origin: str | None, allowed: list[str]) -> bool:
    """No Origin (not a browser page), a loopback origin, or one listed in ``mcp.allowed_origins``."""
    if origin is None:
        return True
    if origin in allowed:
        return True
    try:
        parts = urlsplit(origin)
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and host in _LOOPBACK


class McpDoor:
    """The ASGI app at ``/mcp`` and the lifespan that runs its session manager."""

    PATH = PATH
    # Read as the matched route's template by the access log and the request metrics.
    path = PATH

    def __init__(self, settings: Settings, registry: CollectorRegistry) -> None:
        self._allowed_origins = list(settings.mcp.allowed_origins)
        self._max_body = settings.server.max_body_bytes
        self.tools: dict[str, ToolSpec] = build_tools(settings.memory.max_chars)
        self.metrics = McpMetrics(registry, frozenset(self.tools))
        self.server: Server[Any] = Server(
            "memproxy", version=__version__, instructions=_INSTRUCTIONS,
            on_list_tools=self._list_tools, on_call_tool=self._call_tool,
        )  # fmt: skip
        self._manager: StreamableHTTPSessionManager | None = None

    def wrap(
        self, lifespan: Callable[[Any], AbstractAsyncContextManager[None]]
    ) -> Callable[[Any], AbstractAsyncContextManager[None]]:
        """``lifespan`` with the session manager running inside it (opened after the services,
        closed before them); a new manager per run, as the SDK requires."""

        @asynccontextmanager
        async def both(app: Any) -> AsyncIterator[None]:
            async with lifespan(app):
                manager = StreamableHTTPSessionManager(
                    self.server, json_response=True, max_request_body_size=self._max_body,
                    # Origin is checked here, before the credential; Host is not: a reverse proxy
                    # or a container may name this server by any host.
                    security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
                )  # fmt: skip
                async with manager.run():
                    self._manager = manager
                    try:
                        yield
                    finally:
                        self._manager = None

        return both

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self  # the access log's and metrics' route label: /mcp
        request = Request(scope, receive)
        try:
            if not origin_allowed(request.headers.get("origin"), self._allowed_origins):
                raise ApiError(403, f"Origin {request.headers['origin']!r} may not call /mcp: add it to "
                               "mcp.allowed_origins to allow it.", code="origin_not_allowed")  # fmt: skip
            services: Services | None = getattr(request.app.state, "services", None)
            if services is None or self._manager is None:
                raise ApiError(503, "memproxy is starting up", code="not_ready")
            credential = services.auth.authenticate(request.headers.get("authorization"))
        except ApiError as exc:
            await JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state["tenant_hash"] = credential.tenant_hash  # the access log's tenant
        # What a tool call reads (``_call_tool``): the caller and the memory operations.
        state["mcp_credential"] = credential
        state["mcp_management"] = services.management
        # The SDK binds a session to the principal that opened it (its ``client_id``).
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=credential.tenant, scopes=[]))
        await self._manager.handle_request(scope, receive, send)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[spec.tool for spec in self.tools.values()])

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        started, ok = time.perf_counter(), False
        try:
            spec = self.tools.get(params.name)
            if spec is None:
                raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name!r}. tools/list names the "
                               f"tools: {', '.join(self.tools)}.")  # fmt: skip
            args = dict(params.arguments or {})
            refused = schema_refusal(params.name, spec, args)
            if refused is not None:
                return refused
            request = ctx.request
            assert isinstance(request, Request)
            credential: Credential = request.state.mcp_credential
            ops: MemoryManagement = request.state.mcp_management
            caller = Caller(credential.tenant, request.headers, pinned=True)
            try:
                body = await spec.run(ops, caller, args)
            except ApiError as exc:
                return api_refusal(exc)
            except DatabaseUnavailable as exc:
                return api_refusal(ApiError(503, f"Memory storage is unavailable: {exc}",
                                            code="storage_unavailable"))  # fmt: skip
            ok = True
            return success(body)
        finally:
            self.metrics.observe(params.name, ok, time.perf_counter() - started)
