"""FastAPI dependencies, gathered here so routes read as plain signatures.

Each route takes the parts it uses (``ManagementDep``, ``DatabaseDep``, ``SettingsDep``, ...),
not the whole ``Services``: a signature says what a route can touch. Every part is read from
the running app's ``Services`` (``get_services``, resolved once per request and shared by the
parts), so a route called before start-up is a 503 ``not_ready`` whichever part it asks for.
``ServicesDep`` stays for the proxy pipeline, which uses most of the parts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Any, Protocol

from fastapi import Depends, Request

from memproxy.auth import Authenticator, Credential
from memproxy.config import Settings
from memproxy.errors import ApiError
from memproxy.memory.management import MemoryManagement
from memproxy.metrics import Metrics
from memproxy.outbox.worker import Worker
from memproxy.services import Services
from memproxy.storage.database import Database
from memproxy.upstream.provider import Upstream


# ``async def`` on purpose: FastAPI runs a plain ``def`` dependency on a worker thread,
# and these do no blocking work, so two thread hops per request would be pure latency.
def running_part(request: Request, name: str) -> Any:
    """``app.state.<name>``, set once the lifespan has started it; 503 ``not_ready`` before."""
    part = getattr(request.app.state, name, None)
    if part is None:
        raise ApiError(503, "memproxy is starting up", code="not_ready")
    return part


async def get_services(request: Request) -> Services:
    services: Services = running_part(request, "services")
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


# --- the parts ----------------------------------------------------------------------------


async def get_settings(services: ServicesDep) -> Settings:
    return services.settings


async def get_auth(services: ServicesDep) -> Authenticator:
    return services.auth


async def get_management(services: ServicesDep) -> MemoryManagement:
    """The memory operations every door calls (REST routes, MCP tools), built once per app."""
    return services.management


async def get_database(services: ServicesDep) -> Database:
    return services.db


async def get_clock(services: ServicesDep) -> Callable[[], float]:
    # The store's clock as it is now: tests set ``store.clock`` after start-up.
    return services.store.clock


async def get_worker(services: ServicesDep) -> Worker | None:
    """The in-process extraction worker, or None (``extraction.worker_enabled`` false)."""
    return services.worker


async def get_upstream(services: ServicesDep) -> Upstream:
    return services.upstream


async def get_metrics(services: ServicesDep) -> Metrics:
    return services.metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
AuthDep = Annotated[Authenticator, Depends(get_auth)]
ManagementDep = Annotated[MemoryManagement, Depends(get_management)]
DatabaseDep = Annotated[Database, Depends(get_database)]
ClockDep = Annotated[Callable[[], float], Depends(get_clock)]
WorkerDep = Annotated[Worker | None, Depends(get_worker)]
UpstreamDep = Annotated[Upstream, Depends(get_upstream)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]


# --- the caller ---------------------------------------------------------------------------


async def get_credential(request: Request, auth: AuthDep) -> Credential:
    credential = auth.authenticate(request.headers.get("authorization"))
    # For the access log: the tenant only ever appears there as this short hash.
    request.state.tenant_hash = credential.tenant_hash
    return credential


async def get_request_id(request: Request) -> str:
    rid: str | None = getattr(request.state, "request_id", None)
    return rid or uuid.uuid4().hex


CredentialDep = Annotated[Credential, Depends(get_credential)]
RequestIdDep = Annotated[str, Depends(get_request_id)]


# --- the operations routes (no credentials, and answered while the app starts) -----------


class Readiness(Protocol):
    """What ``/readyz`` reads of the running app (``Services`` is one)."""

    ready: bool

    def health_problems(self) -> list[str]: ...

    def memory_status(self) -> dict[str, object]: ...

    async def degradations(self) -> list[str]: ...


async def get_readiness(request: Request) -> Readiness | None:
    """The running app as ``/readyz`` sees it; None before the lifespan has opened it (not a
    503 here: ``/readyz`` answers "starting" itself)."""
    services: Services | None = getattr(request.app.state, "services", None)
    return services


async def get_scrape(request: Request) -> Metrics | None:
    """The app's metrics for a ``/metrics`` scrape, their stored-state gauges brought up to
    date when the app is running; None if the app has none."""
    metrics: Metrics | None = getattr(request.app.state, "metrics", None)
    if metrics is None:
        return None
    services: Services | None = getattr(request.app.state, "services", None)
    if services is not None:
        await services.refresh_metrics()
    return metrics


ReadinessDep = Annotated[Readiness | None, Depends(get_readiness)]
ScrapeDep = Annotated[Metrics | None, Depends(get_scrape)]


# --- query strings ------------------------------------------------------------------------


def allow_query(*names: str) -> Any:
    """A route dependency: query parameters other than ``names`` (or one given twice) are a 400.

    A typo such as ``?userid=`` must not silently widen a read to the whole tenant. It runs
    after authentication, so a caller without credentials still gets 401 first.
    """
    allowed = frozenset(names)

    async def check(request: Request, credential: CredentialDep) -> None:
        seen: set[str] = set()
        for name, _ in request.query_params.multi_items():
            if name not in allowed:
                known = f" Known parameters: {', '.join(sorted(allowed))}." if allowed else ""
                raise ApiError(400, f"Unknown query parameter: '{name}'.{known}", param=name,
                               code="unknown_parameter")  # fmt: skip
            if name in seen:
                raise ApiError(400, f"Query parameter '{name}' is given more than once.", param=name,
                               code="invalid_value")  # fmt: skip
            seen.add(name)

    return Depends(check)
