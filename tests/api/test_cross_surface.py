"""Memory is per scope, not per API: what is told through one surface is recalled through another.

Real SDKs end to end: the told turn is captured, the worker extracts it (scripted extractor),
and the next conversation — on a different API surface — is answered with the memory.
"""

from __future__ import annotations

import pytest

from tests.support.memory_flow import chat, unique, wait_job
from tests.support.proxy import Proxy, http_client
from tests.support.surfaces import anthropic_client, stream_natively


@pytest.fixture(autouse=True, scope="module")
def _native_streams() -> None:
    stream_natively()


def tell_with_responses(proxy: Proxy, user: str, text: str) -> str:
    raw = proxy.client(**{"X-Memproxy-User-Id": user}).responses.with_raw_response.create(
        model="gpt-4o-mini", input=text
    )
    return raw.headers["x-memproxy-capture"]


def tell_with_messages(proxy: Proxy, user: str, text: str) -> str:
    client = anthropic_client(proxy, **{"X-Memproxy-User-Id": user})
    with client.messages.with_streaming_response.create(
        model="gpt-4o-mini", max_tokens=100, messages=[{"role": "user", "content": text}], stream=True
    ) as raw:
        list(raw.parse())
        return raw.headers["x-memproxy-capture"]


def ask_with_chat(proxy: Proxy, user: str, text: str) -> str:
    return chat(proxy.url, [{"role": "user", "content": text}], user=user).text or ""


def ask_with_responses(proxy: Proxy, user: str, text: str) -> str:
    events = proxy.client(**{"X-Memproxy-User-Id": user}).responses.create(
        model="gpt-4o-mini", input=text, stream=True
    )
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def ask_with_messages(proxy: Proxy, user: str, text: str) -> str:
    reply = anthropic_client(proxy, **{"X-Memproxy-User-Id": user}).messages.create(
        model="gpt-4o-mini", max_tokens=100, messages=[{"role": "user", "content": text}]
    )
    return str(reply.content[0].text)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("tell", "ask"),
    [
        (tell_with_responses, ask_with_messages),
        (tell_with_responses, ask_with_chat),
        (tell_with_messages, ask_with_responses),
    ],
)
def test_a_fact_told_through_one_surface_is_recalled_through_another(proxy: Proxy, tell, ask) -> None:  # type: ignore[no-untyped-def]
    user, city = unique("u"), unique("Lisbon").replace("-", "")
    job_id = tell(proxy, user, f"My name is Ana. I live in {city}.")
    wait_job(proxy.url, job_id)
    answer = ask(proxy, user, f"Do you know where I live? Is it {city}?")
    assert f"User lives in {city}" in answer
    with http_client(base_url=proxy.url, timeout=10) as http:  # the memory sits in the user's scope
        found = http.get("/v1/memories", params={"user_id": user},
                         headers={"Authorization": "Bearer sk-test-user-a"}).json()["data"]  # fmt: skip
    assert {m["text"] for m in found} == {"User's name is Ana", f"User lives in {city}"}
