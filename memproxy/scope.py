"""Who a request's memory belongs to.

Invariants:
- The tenant comes from the credential (see ``auth``), never from a header or body field.
- A memory scope is (tenant, user_id, agent_id); an absent id is the empty string, so
  ``(t, "u", "")`` and ``(t, "u", "a")`` are different scopes.
- ``Scope.key`` is a SHA-256 over the three parts; it is what names snapshot files and
  what every stored row is grouped by, so raw ids never become file paths.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from memproxy.errors import ApiError

MAX_ID_BYTES = 256

USER_HEADER = "x-memproxy-user-id"
AGENT_HEADER = "x-memproxy-agent-id"
SESSION_HEADER = "x-memproxy-session-id"
RECALL_HEADER = "x-memproxy-recall"
CAPTURE_HEADER = "x-memproxy-capture"


@dataclass(frozen=True, slots=True)
class Scope:
    """A memory namespace: one FAISS index and one set of memory rows."""

    tenant: str
    user_id: str = ""
    agent_id: str = ""

    @property
    def key(self) -> str:
        raw = "\x00".join((self.tenant, self.user_id, self.agent_id)).encode()
        return hashlib.sha256(raw).hexdigest()

    @property
    def has_memory(self) -> bool:
        """Memory is on only when the caller names a user or an agent."""
        return bool(self.user_id or self.agent_id)


@dataclass(frozen=True, slots=True)
class RequestScope:
    """Everything a chat request says about memory: its scope and its switches."""

    scope: Scope
    session_id: str = ""
    recall: bool = True
    capture: bool = True

    @property
    def memory_on(self) -> bool:
        return self.scope.has_memory


def validate_id(value: object, param: str) -> str:
    """Return a scope id, or raise a 400 naming ``param``.

    Ids are at most 256 bytes of printable text. Anything else is a client bug we
    report rather than silently truncate.
    """
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ApiError(400, f"{param} must be a string", param=param, code="invalid_scope")
    if len(value.encode("utf-8")) > MAX_ID_BYTES:
        raise ApiError(
            400, f"{param} must be at most {MAX_ID_BYTES} bytes", param=param, code="invalid_scope"
        )
    if not value.isprintable():
        raise ApiError(400, f"{param} must be printable text", param=param, code="invalid_scope")
    return value.strip()


def _switch(value: str | None, header: str) -> bool:
    if value is None:
        return True
    lowered = value.strip().lower()
    if lowered in ("off", "false", "0", "no"):
        return False
    if lowered in ("on", "true", "1", "yes", ""):
        return True
    raise ApiError(400, f"{header} must be 'on' or 'off'", param=header, code="invalid_header")


def parse_request_scope(tenant: str, headers: dict[str, str], body_user: object) -> RequestScope:
    """Build the scope of a chat request from its headers, falling back to the body's ``user``."""
    user_header = headers.get(USER_HEADER)
    if user_header is not None:
        user_id = validate_id(user_header, "X-Memproxy-User-Id")
    else:
        user_id = validate_id(body_user, "user")
    agent_id = validate_id(headers.get(AGENT_HEADER), "X-Memproxy-Agent-Id")
    session_id = validate_id(headers.get(SESSION_HEADER), "X-Memproxy-Session-Id")
    return RequestScope(
        scope=Scope(tenant=tenant, user_id=user_id, agent_id=agent_id),
        session_id=session_id,
        recall=_switch(headers.get(RECALL_HEADER), "X-Memproxy-Recall"),
        capture=_switch(headers.get(CAPTURE_HEADER), "X-Memproxy-Capture"),
    )
