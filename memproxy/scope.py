"""Who a request's memory belongs to.

Invariants:
- The tenant comes from the credential (see ``auth``), never from a header or body field.
- A memory scope is (tenant, user_id, agent_id); an absent id is the empty string, so
  ``(t, "u", "")`` and ``(t, "u", "a")`` are different scopes.
- ``Scope.key`` is a SHA-256 over the three parts; it is what names snapshot files and
  what every stored row is grouped by, so raw ids never become file paths.
- One id is one scope however it arrives: header values (which the ASGI server hands over
  decoded as latin-1) are read back as UTF-8 when their bytes are UTF-8, as latin-1
  otherwise, and ``UTF-8''<percent-encoded>`` (RFC 8187) is decoded; so ``josé`` sent as
  raw UTF-8, as latin-1, percent-encoded, in a body field or in a query string is the
  same id.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from urllib.parse import unquote

from memproxy.errors import ApiError
from memproxy.wire.headers import AGENT_ID, CAPTURE, RECALL, SESSION_ID, USER_ID, display_name

MAX_ID_BYTES = 256
# RFC 8187's ext-value prefix: ``UTF-8''`` then the percent-encoded UTF-8 bytes.
_EXT_VALUE_PREFIX = "utf-8''"

USER_HEADER = USER_ID
AGENT_HEADER = AGENT_ID
SESSION_HEADER = SESSION_ID
RECALL_HEADER = RECALL
CAPTURE_HEADER = CAPTURE


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


def decode_header(value: str, param: str | None = None) -> str:
    """A header value as the client meant it (see the module invariants).

    The server decoded the raw bytes as latin-1, so encoding back to latin-1 recovers them
    exactly; bytes that are valid UTF-8 are read as UTF-8 (curl, ``"josé".encode()``), other
    bytes stay latin-1 (browsers and Node send ``é`` as one latin-1 byte).
    """
    if value[: len(_EXT_VALUE_PREFIX)].lower() == _EXT_VALUE_PREFIX:
        try:
            return unquote(value[len(_EXT_VALUE_PREFIX) :], encoding="utf-8", errors="strict")
        except UnicodeDecodeError:
            raise ApiError(400, f"{param or 'header'}: percent-encoded value is not UTF-8", param=param,
                           code="invalid_scope") from None  # fmt: skip
    try:
        raw = value.encode("latin-1")
    except UnicodeEncodeError:
        return value  # already text (not from an HTTP header)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return value


def header_id(value: str | None, header: str) -> str:
    """A scope id sent in ``header``: decoded (``decode_header``), then ``validate_id``."""
    return validate_id(None if value is None else decode_header(value, header), header)


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
        user_id = header_id(user_header, display_name(USER_HEADER))
    else:
        user_id = validate_id(body_user, "user")
    agent_id = header_id(headers.get(AGENT_HEADER), display_name(AGENT_HEADER))
    session_id = header_id(headers.get(SESSION_HEADER), display_name(SESSION_HEADER))
    return RequestScope(
        scope=Scope(tenant=tenant, user_id=user_id, agent_id=agent_id),
        session_id=session_id,
        recall=_switch(headers.get(RECALL_HEADER), display_name(RECALL_HEADER)),
        capture=_switch(headers.get(CAPTURE_HEADER), display_name(CAPTURE_HEADER)),
    )
