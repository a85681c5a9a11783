"""``recall.placement``: where the memory block goes, and the prompt-cache promise of ``end``.

The 20-turn tests talk real HTTP (client → memproxy → scripted upstream, on the fast path) and
compare consecutive requests as the provider received them.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from memproxy.proxy.placement import place_anthropic, place_chat, place_responses
from memproxy.testing.scripted_upstream import MEMORY_MARKER, ScriptedUpstream
from tests.support.memory_flow import unique
from tests.support.proxy import Proxy, proxy_settings, start_proxy
from tests.support.surfaces import anthropic_client, forwarded, memory_texts, remember

BLOCK = f"{MEMORY_MARKER}\n- fact\n</memories>"
SYSTEM = "You are Atlas, a travel assistant. " * 20
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
CITIES = ["Lisbon", "Porto", "Faro", "Braga", "Evora", "Sintra", "Aveiro", "Coimbra", "Tavira", "Lagos"]


def test_chat_placements() -> None:
    body = {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                                       {"role": "assistant", "content": "prefill"}]}  # fmt: skip
    original = copy.deepcopy(body)
    assert [m["content"] for m in place_chat(body, BLOCK, "after_system")["messages"]] == [
        "s",
        BLOCK,
        "u",
        "prefill",
    ]
    assert [m["content"] for m in place_chat(body, BLOCK, "end")["messages"]] == ["s", "u", BLOCK, "prefill"]
    assert body == original


def test_responses_placements() -> None:
    assert place_responses({"input": "hi"}, BLOCK, "end")["input"] == [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "developer", "content": BLOCK},
    ]
    items = [{"role": "developer", "content": "d"}, {"role": "user", "content": "u"},
             {"type": "function_call_output", "call_id": "c", "output": "o"}]  # fmt: skip
    placed = place_responses({"input": items}, BLOCK, "after_system")["input"]
    assert placed[0] == items[0] and placed[1]["content"] == BLOCK and placed[2:] == items[1:]
    assert place_responses({"input": items}, BLOCK, "end")["input"][:3] == items


def test_anthropic_placements_keep_cache_control_breakpoints() -> None:
    system = [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}]
    result = [
        {"type": "tool_result", "tool_use_id": "t1", "content": "21C", "cache_control": {"type": "ephemeral"}}
    ]
    body: dict[str, Any] = {"system": system, "messages": [{"role": "user", "content": "u"},
                                           {"role": "assistant", "content": [{"type": "tool_use", "id": "t1"}]},
                                           {"role": "user", "content": result}]}  # fmt: skip
    original = copy.deepcopy(body)
    end = place_anthropic(body, BLOCK, "end")
    assert end["system"] == system and end["messages"][:2] == body["messages"][:2]
    assert end["messages"][2]["content"] == [
        *result,
        {"type": "text", "text": BLOCK},
    ]  # tool_result stays first
    after = place_anthropic(body, BLOCK, "after_system")
    assert (
        after["system"] == [*system, {"type": "text", "text": BLOCK}]
        and after["messages"] == body["messages"]
    )
    assert place_anthropic({"system": "plain", "messages": []}, BLOCK, "after_system")["system"] == [
        {"type": "text", "text": "plain"}, {"type": "text", "text": BLOCK}
    ]  # fmt: skip
    assert body == original


# -- the 20-turn prefix-stability test ------------------------------------------------------


@pytest.fixture(scope="module")
def end_proxy(
    upstream: tuple[ScriptedUpstream, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    settings = proxy_settings(
        upstream[1],
        tmp_path_factory.mktemp("end"),
        recall={"placement": "end", "top_k": 3, "timeout_ms": 10_000},
    )
    server, handle = start_proxy(settings)
    yield handle
    server.stop()


def ask(proxy: Proxy, surface: str, user: str, history: list[dict[str, Any]]) -> str:
    headers = {"X-Memproxy-User-Id": user}
    client: Any = proxy.client(**headers)  # plain dicts, not the SDK's TypedDicts
    if surface == "chat":
        reply = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "system", "content": SYSTEM}, *history], tools=CHAT_TOOLS
        )
        return str(reply.choices[0].message.content)
    if surface == "responses":
        tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
        answer = client.responses.create(
            model="gpt-4o-mini", instructions=SYSTEM, input=history, tools=tools, store=False
        )
        return str(answer.output_text)
    message = anthropic_client(proxy, **headers).messages.create(
        model="gpt-4o-mini", max_tokens=100, system=SYSTEM, messages=history,  # type: ignore[arg-type]
        tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
    )  # fmt: skip
    return str(message.content[0].text)  # type: ignore[union-attr]


def caller_part(items: list[Any]) -> list[str]:
    """The forwarded items without memproxy's block, each as the bytes it serializes to."""
    return [json.dumps(item) for item in items if not memory_texts(item)]


@pytest.mark.slow
@pytest.mark.parametrize("surface", ["chat", "responses", "messages"])
def test_twenty_turns_keep_the_callers_prefix_byte_identical(
    end_proxy: Proxy, fake: ScriptedUpstream, surface: str
) -> None:
    user = unique("u")
    history: list[dict[str, Any]] = []
    sent: list[dict[str, Any]] = []
    for turn in range(20):
        city = CITIES[turn % len(CITIES)]
        remember(end_proxy, f"User wants to visit {city} in spring (note {turn})", user)
        text = f"turn {turn} {user}: what about visiting {city} in spring?"
        history.append({"role": "user", "content": text})
        history.append({"role": "assistant", "content": ask(end_proxy, surface, user, history)})
        # /v1/messages for this model arrives translated to chat (memproxy's fast path)
        path = "/responses" if surface == "responses" else "/chat/completions"
        sent.append(forwarded(fake, text, path).body)
    key = "input" if surface == "responses" else "messages"
    blocks = [memory_texts(body[key][-1]) for body in sent]
    assert all(len(b) == 1 for b in blocks)  # the block is the last item every turn
    assert len({b[0] for b in blocks}) > 5  # and the recalled set kept changing
    for before, after in itertools.pairwise(sent):
        assert after.get("tools") == before.get("tools")
        assert after.get("instructions") == before.get("instructions")
        old_items = caller_part(before[key])
        assert [json.dumps(i) for i in after[key][: len(old_items)]] == old_items
