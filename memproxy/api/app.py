"""``create_app(settings)``: the ASGI app. Everything stateful is built in the lifespan."""

from __future__ import annotations

import gc
import logging
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memproxy import __version__
from memproxy.api import console, openai_routes, ops
from memproxy.api import jobs as jobs_api
from memproxy.api import memories as memories_api
from memproxy.api import scopes as scopes_api
from memproxy.api.access_log import CLIENT_CLOSED, AccessLogMiddleware
from memproxy.api.mcp_server import McpDoor
from memproxy.api.openapi import openapi_schema
from memproxy.api.pipeline import Pipeline, surface_router
from memproxy.api.surfaces import discover
from memproxy.config import Settings
from memproxy.errors import ApiError, anthropic_error_body
from memproxy.metrics import Metrics
from memproxy.services import open_services, reembed_in_background, start_replica_tasks, start_worker
from memproxy.storage.engine import DatabaseUnavailable
from memproxy.wire.headers import REQUEST_ID

log = logging.getLogger("memproxy")
_REQUEST_ID = REQUEST_ID.encode()
_SANE_REQUEST_ID = re.compile(r"^[\w.\-:]{1,128}$")


class RequestIdMiddleware:
    """Accept a sane ``X-Request-Id`` or make one; expose it to handlers and return it.

    Pure ASGI (not ``BaseHTTPMiddleware``) so streamed responses and client-disconnect
    cancellation pass through untouched.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope["headers"]).get(_REQUEST_ID, b"").decode("latin-1")
        request_id = incoming if _SANE_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (_REQUEST_ID, request_id.encode())]
            await send(message)

        await self.app(scope, receive, send_with_id)


class TrailingSlashMiddleware:
    """Serve ``/v1/chat/completions/`` as ``/v1/chat/completions``.

    A base URL written with a trailing slash makes some clients call ``…/completions/``;
    Starlette's answer is a bare 307 that SDKs do not follow for a POST. Stripping the
    slash before routing serves the request (no redirect, the method and body are kept).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and len(path) > 1 and path.endswith("/"):
            stripped = path.rstrip("/") or "/"
            raw = scope.get("raw_path")
            scope = {**scope, "path": stripped,
                     "raw_path": (raw.rstrip(b"/") or b"/") if raw else stripped.encode()}  # fmt: skip
        await self.app(scope, receive, send)


_HTTP_CODES = {404: "unknown_route", 405: "method_not_allowed"}
_METHODS = ("GET", "POST", "PATCH", "PUT", "DELETE")


def _error_response(request: Request, exc: ApiError) -> Response:
    # Anthropic's SDK reads errors in Anthropic's shape; every other route speaks OpenAI's.
    anthropic = request.url.path.rstrip("/") in getattr(request.app.state, "anthropic_paths", ())
    body = anthropic_error_body(exc) if anthropic else exc.body()
    return JSONResponse(body, status_code=exc.status, headers=exc.headers)


async def _on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _error_response(request, exc)


async def _on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
    return _error_response(
        request,
        ApiError(
            400, f"Invalid request: {first.get('msg', 'bad input')}", param=param, code="invalid_request"
        ),
    )


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    message = exc.detail if isinstance(exc.detail, str) else "Request failed"
    if status == 404:
        message = f"Unknown route: {request.method} {request.url.path}"
    headers = dict(exc.headers or {})
    if status == 405:
        allowed = _allowed_methods(request)
        headers["Allow"] = ", ".join(allowed)
        message = (
            f"Method {request.method} is not allowed on {request.url.path} (allowed: {headers['Allow']})."
        )
    # A code on every error, as on ours: clients branch on it rather than on the message.
    code = _HTTP_CODES.get(status, f"http_{status}")
    return _error_response(request, ApiError(status, message, code=code, headers=headers))


def _allowed_methods(request: Request) -> list[str]:
    """The methods some route serves at this path (Starlette's own ``Allow`` names only the
    first route's, and each method here is a route of its own)."""
    routes = request.app.router.routes
    return [method for method in _METHODS
            if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)]  # fmt: skip


async def _on_database_unavailable(request: Request, exc: Exception) -> Response:
    # Postgres restarting or failing over: the client may retry shortly (chat never gets here).
    error = ApiError(503, f"Memory storage is unavailable, retry shortly: {exc}", code="storage_unavailable",
                     headers={"Retry-After": "1"})  # fmt: skip
    return _error_response(request, error)


async def _on_client_disconnect(request: Request, exc: Exception) -> Response:
    # The client went away while its body was being read: nothing failed here, and nobody is
    # left to answer. 499 (nginx's "client closed request") is what the access log and the
    # request metrics record, instead of a 500 and a traceback.
    return _error_response(request, ApiError(CLIENT_CLOSED, "The client closed the connection.",
                                             code="client_closed_request"))  # fmt: skip


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s", request.url.path)
    return _error_response(request, ApiError(500, "Internal server error"))


def create_app(settings: Settings) -> FastAPI:
    # Per app, not prometheus-client's global registry: tests run several apps in one process.
    app_metrics = Metrics()
    # /mcp (issue 23): the MCP door onto the same services, its session manager inside the lifespan.
    mcp_door = McpDoor(settings, app_metrics.registry)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = await open_services(settings, metrics=app_metrics)
        app.state.services = services
        app.state.pipeline = Pipeline.of(services)
        try:
            # A neural embedder takes a moment to load: /readyz says so until it is done
            # (recall and the worker wait for it), instead of the first request paying.
            services.start_task("embedder", services.embedder.load)
            stale = await services.store.start()
            start_replica_tasks(services)
            services.capture.on_failure = services.metrics.capture_failed
            if settings.extraction.worker_enabled:
                start_worker(services)
            # Tokenizers take ~0.2 s to load; warm them so the first recall does not wait.
            services.start_task("tokenizers", services.recaller.tokenizers.warm)
            if stale:
                services.start_task("reembed", lambda: reembed_in_background(services))
            # LiteLLM, FastAPI and friends leave ~1M long-lived objects behind at import; a full
            # garbage collection that walks them all stalls every in-flight request. Freezing
            # what exists at start-up keeps them out of every later collection.
            gc.freeze()
            services.ready = True
            yield
        finally:
            await services.close()

    # /openapi.json: the schema clients and fuzzers read (api.openapi); no docs pages (no CDN assets).
    app = FastAPI(title="memproxy", version=__version__, lifespan=mcp_door.wrap(lifespan), docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json")  # fmt: skip
    # Each API surface (``api.surfaces``: chat, Responses, Messages, legacy completions) runs
    # its turns through the one pipeline (``api.pipeline``).
    anthropic_paths: set[str] = set()
    app.state.surface_specs = {}  # read by api.openapi: each surface describes its own POST
    for found in discover():
        spec = {"body_schema": found.surface.request_schema, "ok": ("200", "ProviderObject"), "stream": True,
                "anthropic": found.surface.anthropic_errors}  # fmt: skip
        app.state.surface_specs.update(dict.fromkeys(found.surface.paths, spec))
        app.include_router(surface_router(found.surface))
        if found.router is not None:
            app.include_router(found.router)
        if found.surface.anthropic_errors:
            anthropic_paths.update(found.surface.paths)
    app.state.anthropic_paths = frozenset(anthropic_paths)
    app.include_router(openai_routes.router)
    app.include_router(memories_api.router)
    app.include_router(jobs_api.router)
    app.include_router(scopes_api.router)
    app.include_router(ops.router)
    app.include_router(console.build_router())
    app.router.routes.append(Route(mcp_door.PATH, mcp_door, include_in_schema=False))
    app.state.metrics = app_metrics
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(HTTPException, _on_http_error)
    app.add_exception_handler(DatabaseUnavailable, _on_database_unavailable)
    app.add_exception_handler(ClientDisconnect, _on_client_disconnect)
    app.add_exception_handler(Exception, _on_unexpected)
    # Added first so it runs inside RequestIdMiddleware and sees the request id.
    app.add_middleware(AccessLogMiddleware, server=settings.server, metrics=app_metrics)
    app.add_middleware(RequestIdMiddleware)
    app.add_middleware(TrailingSlashMiddleware)
    app.router.redirect_slashes = False
    app.openapi = lambda: openapi_schema(app)  # type: ignore[method-assign]
    return app
