"""A non-ASCII user id is one scope whichever way it arrives.

The ASGI server decodes header bytes as latin-1, so ``josé`` sent as UTF-8 used to be stored
as ``josÃ©``: a second scope that the query string and the body's ``user`` field never reach.
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.support.proxy import Proxy

JOSE_FORMS = {
    "raw UTF-8 bytes": "josé".encode(),
    "latin-1 byte (browsers, Node)": "josé".encode("latin-1"),
    "RFC 8187 percent-encoded": b"UTF-8''jos%C3%A9",
}


@pytest.fixture
def http(proxy: Proxy) -> httpx.Client:
    return proxy.http(f"sk-utf8-{uuid.uuid4().hex[:8]}")


def _ids(http: httpx.Client, user_id: str) -> list[str]:
    response = http.get("/v1/memories", params={"user_id": user_id})
    assert response.status_code == 200, response.text
    return [m["text"] for m in response.json()["data"]]


@pytest.mark.parametrize("form", sorted(JOSE_FORMS))
def test_a_header_id_is_the_same_id_as_the_query_string_one(http: httpx.Client, form: str) -> None:
    text = f"Plays the cello {uuid.uuid4().hex[:6]}"
    created = http.post(
        "/v1/memories", json={"text": text}, headers={b"X-Memproxy-User-Id": JOSE_FORMS[form]}
    )
    assert created.status_code == 201, created.text
    assert created.json()["user_id"] == "josé"
    assert text in _ids(http, "josé")


def test_ids_beyond_latin_1_arrive_as_utf8_or_percent_encoded(http: httpx.Client) -> None:
    forms = ("山田".encode(), b"UTF-8''%E5%B1%B1%E7%94%B0", b"utf-8''%e5%b1%b1%e7%94%b0")
    for n, raw in enumerate(forms):
        created = http.post("/v1/memories", json={"text": f"Likes ramen number {n}"},
                            headers={b"X-Memproxy-User-Id": raw})  # fmt: skip
        assert created.status_code == 201 and created.json()["user_id"] == "山田", created.text
    assert len(_ids(http, "山田")) == 3
    bad = http.get("/v1/memories", headers={b"X-Memproxy-User-Id": b"UTF-8''%FF"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "x-memproxy-user-id"


def test_chat_recalls_a_header_scoped_memory_through_the_body_user_field(proxy: Proxy) -> None:
    token = f"sk-utf8-{uuid.uuid4().hex[:8]}"
    with proxy.http(token) as http:
        created = http.post("/v1/memories", json={"text": "Favourite colour is teal"},
                            headers={b"X-Memproxy-User-Id": "josé".encode()})  # fmt: skip
        assert created.status_code == 201
        body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "favourite colour?"}]}
        by_body = http.post("/v1/chat/completions", json={**body, "user": "josé"})
        by_header = http.post("/v1/chat/completions", json=body,
                              headers={b"X-Memproxy-User-Id": "josé".encode("latin-1")})  # fmt: skip
    for response in (by_body, by_header):
        assert response.status_code == 200, response.text
        assert response.headers["x-memproxy-recalled"] == "1"
        assert "teal" in response.json()["choices"][0]["message"]["content"]
