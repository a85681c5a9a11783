"""Every ``X-Memproxy-*`` (and request-id) header name, in one place.

Request header names are lower-case (Starlette's ``Headers`` and ASGI scopes are);
response header names keep their documented spelling, since clients and logs show them.
"""

from __future__ import annotations

# Request: scope and switches (README "Use it from the OpenAI SDK").
USER_ID = "x-memproxy-user-id"
AGENT_ID = "x-memproxy-agent-id"
SESSION_ID = "x-memproxy-session-id"
RECALL = "x-memproxy-recall"
CAPTURE = "x-memproxy-capture"

# Response.
RECALLED = "X-Memproxy-Recalled"
RECALL_ERROR = "X-Memproxy-Recall-Error"
CAPTURE_RESULT = "X-Memproxy-Capture"
EXISTING_ID = "X-Memproxy-Existing-Id"

# Both ways: a caller's sane id is echoed, else a new one is made.
REQUEST_ID = "x-request-id"


def display_name(name: str) -> str:
    """``x-memproxy-user-id`` → ``X-Memproxy-User-Id``, as error messages name a header."""
    return "-".join(part.capitalize() for part in name.split("-"))
