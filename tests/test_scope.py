"""Scope ids: one id however it arrives, refused rather than truncated, switches read strictly.

tests/test_auth.py checks the tenant and the key's shape; tests/api/test_scope_headers.py the same
ids over HTTP. Here: the decoding and validation rules themselves, at their edges.
"""

from __future__ import annotations

import pytest

from memproxy.errors import ApiError
from memproxy.scope import (
    MAX_ID_BYTES,
    Scope,
    decode_header,
    header_id,
    parse_request_scope,
    validate_id,
)


def as_asgi(raw: bytes) -> str:
    """A header value as the ASGI server hands it over: the raw bytes decoded as latin-1."""
    return raw.decode("latin-1")


@pytest.mark.parametrize(
    "raw",
    [
        "josé".encode(),
        "josé".encode("latin-1"),
        b"UTF-8''jos%C3%A9",
        b"utf-8''jos%c3%a9",
        b"Utf-8''jos%C3%A9",
    ],
)
def test_one_id_however_the_header_carries_it(raw: bytes) -> None:
    assert decode_header(as_asgi(raw)) == "josé"
    by_header = parse_request_scope("t", {"x-memproxy-user-id": as_asgi(raw)}, None).scope
    by_body = parse_request_scope("t", {}, "josé").scope
    assert by_header == by_body and by_header.key == by_body.key


def test_beyond_latin_1_and_already_decoded_text() -> None:
    assert decode_header(as_asgi("山田".encode())) == "山田"
    assert decode_header("山田") == "山田"  # not from a header: returned as is
    assert decode_header("plain-ascii") == "plain-ascii"


def test_a_percent_encoded_value_that_is_not_utf8_is_a_400_naming_the_header() -> None:
    with pytest.raises(ApiError) as err:
        decode_header("UTF-8''%FF", "X-Memproxy-User-Id")
    assert (err.value.status, err.value.param, err.value.code) == (400, "X-Memproxy-User-Id", "invalid_scope")


def test_ids_are_limited_in_bytes_not_characters() -> None:
    assert validate_id("a" * MAX_ID_BYTES, "user") == "a" * MAX_ID_BYTES
    assert validate_id("é" * (MAX_ID_BYTES // 2), "user") == "é" * (MAX_ID_BYTES // 2)
    for too_long in ("a" * (MAX_ID_BYTES + 1), "é" * (MAX_ID_BYTES // 2 + 1)):
        with pytest.raises(ApiError) as err:
            validate_id(too_long, "user")
        assert err.value.param == "user" and "at most 256 bytes" in err.value.message


@pytest.mark.parametrize("value", ["a\nb", "a\x00b", "\u200b", "tab\there", 7, ["u"], {"id": "u"}, True])
def test_non_text_and_control_characters_are_refused(value: object) -> None:
    with pytest.raises(ApiError) as err:
        validate_id(value, "agent_id")
    assert (err.value.status, err.value.param, err.value.code) == (400, "agent_id", "invalid_scope")


def test_control_characters_are_refused_when_percent_encoded_too() -> None:
    with pytest.raises(ApiError) as err:
        header_id("UTF-8''a%0Ab", "X-Memproxy-User-Id")
    assert err.value.param == "X-Memproxy-User-Id"


def test_none_is_no_id_and_blanks_around_an_id_are_dropped() -> None:
    assert validate_id(None, "user") == "" and header_id(None, "h") == ""
    assert validate_id("  alice ", "user") == "alice"
    assert parse_request_scope("t", {"x-memproxy-user-id": " alice"}, None).scope == Scope("t", "alice")


def test_an_absent_part_is_its_own_scope() -> None:
    keys = {Scope("t").key, Scope("t", "u").key, Scope("t", "u", "a").key, Scope("t", "", "u").key}
    assert len(keys) == 4
    assert not Scope("t").has_memory and Scope("t", "", "a").has_memory


@pytest.mark.parametrize(
    ("value", "on"),
    [(None, True), ("on", True), ("TRUE", True), (" 1 ", True), ("yes", True), ("", True),
     ("off", False), ("False", False), ("0", False), (" NO ", False)],
)  # fmt: skip
def test_recall_and_capture_switches(value: str | None, on: bool) -> None:
    headers = {} if value is None else {"x-memproxy-recall": value, "x-memproxy-capture": value}
    scoped = parse_request_scope("t", headers, "u")
    assert scoped.recall is on and scoped.capture is on


@pytest.mark.parametrize("header", ["x-memproxy-recall", "x-memproxy-capture"])
def test_a_switch_that_is_neither_on_nor_off_is_a_400_naming_it(header: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_request_scope("t", {header: "maybe"}, "u")
    display = "-".join(part.capitalize() for part in header.split("-"))
    assert (err.value.param, err.value.code) == (display, "invalid_header")


def test_a_bad_header_id_names_the_header_and_a_bad_body_user_names_user() -> None:
    with pytest.raises(ApiError) as err:
        parse_request_scope("t", {"x-memproxy-session-id": "a\x01"}, None)
    assert err.value.param == "X-Memproxy-Session-Id"
    with pytest.raises(ApiError) as err:
        parse_request_scope("t", {}, 12)
    assert err.value.param == "user"
    # A header user id wins even over a body user that would be refused.
    assert parse_request_scope("t", {"x-memproxy-user-id": "u"}, 12).scope.user_id == "u"
