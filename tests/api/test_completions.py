"""``/v1/completions`` (legacy completions): the real OpenAI SDK → memproxy → (relay | LiteLLM's
text completion) → scripted upstream. The surface is one module (``api/surfaces/completions.py``);
these tests show it gets recall, capture, streaming and errors from the shared pipeline."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from memproxy.testing.scripted_upstream import ScriptedUpstream, is_extraction
from tests.support.memory_flow import captured, query, unique
from tests.support.paths import on_both_paths
from tests.support.proxy import Proxy
from tests.support.surfaces import remember

proxy = on_both_paths("proxy")


def sent(fake: ScriptedUpstream, needle: str) -> tuple[object, dict[str, Any]]:
    """The prompt the provider received, and the body it came in. The fast path relays to its
    ``/completions``; LiteLLM sends a chat model's text completion to ``/chat/completions``, the
    prompt as the user message. (The worker's extraction calls quote turns: not forwarded requests.)"""
    for rec in reversed(fake.requests):
        if needle not in json.dumps(rec.body) or is_extraction(rec.body):
            continue
        if rec.path.endswith("/v1/completions"):
            return rec.body["prompt"], rec.body
        if rec.path.endswith("/chat/completions"):
            return rec.body["messages"][-1]["content"], rec.body
    raise LookupError(needle)


def sent_prompt(fake: ScriptedUpstream, needle: str) -> object:
    return sent(fake, needle)[0]


def test_a_prompt_is_answered_and_captured_as_one_turn(proxy: Proxy, fake: ScriptedUpstream) -> None:
    user, prompt = unique("u"), unique("Once upon a time")
    client = proxy.client(**{"X-Memproxy-User-Id": user})
    raw = client.completions.with_raw_response.create(model="gpt-4o-mini", prompt=prompt, max_tokens=20)
    completion = raw.parse()
    assert completion.choices[0].text == f"You said: {prompt}"
    assert raw.headers["x-memproxy-recalled"] == "0"
    assert captured(proxy.data_dir, raw.headers["x-memproxy-capture"]) == [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": completion.choices[0].text},
    ]
    forwarded_prompt, body = sent(fake, prompt)
    assert forwarded_prompt == prompt and body["max_tokens"] == 20


def test_recall_goes_before_the_prompt_and_is_never_captured(proxy: Proxy, fake: ScriptedUpstream) -> None:
    user, fact = unique("u"), "User keeps three bees named Ada, Bo and Cy"
    remember(proxy, fact, user)
    prompt = unique("Write a poem about my bees")
    client = proxy.client(**{"X-Memproxy-User-Id": user})
    raw = client.completions.with_raw_response.create(model="gpt-4o-mini", prompt=prompt)
    assert int(raw.headers["x-memproxy-recalled"]) >= 1
    sent = sent_prompt(fake, prompt)
    assert isinstance(sent, str)
    block, _, rest = sent.partition("\n\n")
    assert block.startswith("<memories>") and fact in block and rest == prompt
    assert fact in raw.parse().choices[0].text  # the fake names the memories it was given
    # The caller's prompt is captured, not the prompt with the block (the reply is the model's words).
    turn = captured(proxy.data_dir, raw.headers["x-memproxy-capture"])
    assert turn[0] == {"role": "user", "content": prompt} and [m["role"] for m in turn] == [
        "user",
        "assistant",
    ]


def test_a_stream_is_relayed_and_captured_before_done(proxy: Proxy) -> None:
    user, prompt = unique("u"), unique("stream this prompt back")
    client = proxy.client(**{"X-Memproxy-User-Id": user})
    with client.completions.with_streaming_response.create(
        model="gpt-4o-mini", prompt=prompt, stream=True
    ) as raw:
        job_id = raw.headers["x-memproxy-capture"]
        chunks = list(raw.parse())
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == f"You said: {prompt}" and len(chunks) >= 4
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert captured(proxy.data_dir, job_id) == [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": text},
    ]


def test_a_batch_of_prompts_is_forwarded_untouched_and_not_captured(
    proxy: Proxy, fake: ScriptedUpstream
) -> None:
    user, first = unique("u"), unique("first prompt")
    remember(proxy, f"User said {first}", user)
    client = proxy.client(**{"X-Memproxy-User-Id": user})
    raw = client.completions.with_raw_response.create(model="gpt-4o-mini", prompt=[first, "second prompt"])
    assert raw.status_code == 200
    assert raw.headers["x-memproxy-recalled"] == "0" and raw.headers["x-memproxy-capture"] == "off"
    forwarded_prompt, body = sent(fake, first)
    assert "<memories>" not in json.dumps(body)
    if "prompt" in body:  # the fast path: the batch as it came (LiteLLM turns it into chat messages)
        assert forwarded_prompt == [first, "second prompt"]


def test_an_echoing_request_is_left_alone(proxy: Proxy, fake: ScriptedUpstream) -> None:
    """With ``echo`` the answer repeats the prompt: a block before it would reach the client and the capture."""
    user, prompt = unique("u"), unique("Tell me about my bees")
    remember(proxy, "User keeps bees", user)
    client = proxy.client(**{"X-Memproxy-User-Id": user})
    raw = client.completions.with_raw_response.create(model="gpt-4o-mini", prompt=prompt, echo=True)
    assert raw.status_code == 200
    assert raw.headers["x-memproxy-recalled"] == "0" and raw.headers["x-memproxy-capture"] == "off"
    assert "<memories>" not in json.dumps(sent(fake, prompt)[1])


def test_a_stream_cut_mid_way_ends_with_an_error_event_and_is_not_captured(proxy: Proxy) -> None:
    user = unique("u")
    with proxy.http() as http:
        response = http.post("/v1/completions", headers={"X-Memproxy-User-Id": user},
                             json={"model": "drop", "stream": True, "prompt": "a b c d e f"})  # fmt: skip
    events = [e for e in response.text.split("\n\n") if e]
    assert response.status_code == 200
    last = json.loads(events[-1].removeprefix("data: "))
    assert last["error"]["message"] and "data: [DONE]" not in events
    job_id = response.headers["x-memproxy-capture"]
    assert query(proxy, "SELECT count(*) FROM jobs WHERE id = ?", (job_id,)) == [(0,)]


def test_the_providers_refusal_is_passed_on(proxy: Proxy) -> None:
    with pytest.raises(openai.RateLimitError) as caught:
        proxy.client().with_options(max_retries=0).completions.create(model="fail-429", prompt="hi")
    assert caught.value.status_code == 429 and "scripted failure 429" in caught.value.message


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "gpt-4o-mini"}, "prompt"),
        ({"model": "gpt-4o-mini", "prompt": 7}, "prompt"),
        ({"model": "gpt-4o-mini", "prompt": []}, "prompt"),
        ({"prompt": "hi"}, "model"),
        ({"model": "gpt-4o-mini", "prompt": "hi", "stream": "yes"}, "stream"),
    ],
)
def test_a_bad_body_is_refused_in_openais_shape(proxy: Proxy, body: dict[str, object], param: str) -> None:
    with proxy.http() as http:
        response = http.post("/v1/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and error["message"] and error["type"] == "invalid_request_error"
