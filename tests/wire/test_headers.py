"""The header names: request names as the ASGI scope spells them, response names as documented."""

from __future__ import annotations

from pathlib import Path

from memproxy.wire import headers

ROOT = Path(__file__).resolve().parents[2]
REQUEST = (headers.USER_ID, headers.AGENT_ID, headers.SESSION_ID, headers.RECALL, headers.CAPTURE)
RESPONSE = (headers.RECALLED, headers.RECALL_ERROR, headers.CAPTURE_RESULT, headers.EXISTING_ID)


def test_request_names_are_lower_case_and_response_names_in_display_form() -> None:
    # Starlette's Headers and ASGI scopes are lower-case: a capital letter would never match.
    for name in (*REQUEST, headers.REQUEST_ID):
        assert name == name.lower() and name.startswith(("x-memproxy-", "x-request-id"))
    for name in RESPONSE:
        assert name == headers.display_name(name.lower())


def test_display_name_capitalises_every_part() -> None:
    assert headers.display_name(headers.USER_ID) == "X-Memproxy-User-Id"
    assert headers.display_name(headers.REQUEST_ID) == "X-Request-Id"
    assert headers.display_name("x") == "X"


def test_every_header_is_documented_for_users() -> None:
    docs = "\n".join(
        p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    ).lower()
    missing = [name for name in (*REQUEST, *RESPONSE, headers.REQUEST_ID) if name.lower() not in docs]
    assert missing == []
