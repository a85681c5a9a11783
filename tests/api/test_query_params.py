"""Unknown query parameters on the memory routes are a 400 naming the parameter.

A typo such as ``?userid=`` used to be ignored, so a read meant for one user returned the
whole tenant (and an export would have exported it).
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.support.proxy import Proxy


@pytest.fixture
def http(proxy: Proxy) -> httpx.Client:
    return proxy.http(f"sk-query-{uuid.uuid4().hex[:8]}")


def _error(response: httpx.Response, param: str) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error", error
    message: str = error["message"]
    assert param in message
    return message


def test_a_typo_in_a_filter_is_refused_instead_of_listing_the_tenant(http: httpx.Client) -> None:
    for user in ("user-42", "someone-else"):
        assert (
            http.post("/v1/memories", json={"user_id": user, "text": f"{user} likes tea"}).status_code == 201
        )
    message = _error(http.get("/v1/memories", params={"userid": "user-42"}), "userid")
    assert "user_id" in message  # names what it would have understood
    _error(http.get("/v1/memories/export", params={"userid": "user-42"}), "userid")
    _error(http.delete("/v1/memories", params={"user_id": "user-42", "agentid": "x"}), "agentid")
    # the right spelling still works and is narrowed to the one user
    data = http.get("/v1/memories", params={"user_id": "user-42"}).json()["data"]
    assert [m["text"] for m in data] == ["user-42 likes tea"]


def test_every_memory_route_checks_its_query(http: httpx.Client) -> None:
    memory = http.post("/v1/memories", json={"user_id": "u", "text": "Drinks coffee"}).json()
    mid = memory["id"]
    _error(http.get(f"/v1/memories/{mid}", params={"x": "1"}), "x")
    _error(http.patch(f"/v1/memories/{mid}", params={"x": "1"}, json={"text": "Drinks tea"}), "x")
    _error(http.get(f"/v1/memories/{mid}/history", params={"x": "1"}), "x")
    _error(http.post("/v1/memories/search", params={"user_id": "u"}, json={"query": "coffee", "user_id": "u"}),
           "user_id")  # fmt: skip
    _error(http.post("/v1/memories", params={"dry_run": "1"}, json={"user_id": "u", "text": "x"}), "dry_run")
    _error(http.delete(f"/v1/memories/{mid}", params={"x": "1"}), "x")
    assert http.get(f"/v1/memories/{mid}").json()["text"] == "Drinks coffee"  # nothing was changed


def test_a_parameter_given_twice_is_refused(http: httpx.Client) -> None:
    response = http.get("/v1/memories?user_id=a&user_id=b")
    _error(response, "user_id")


def test_credentials_are_checked_before_the_query(proxy: Proxy) -> None:
    with proxy.http(None) as anonymous:
        assert anonymous.get("/v1/memories", params={"userid": "x"}).status_code == 401
