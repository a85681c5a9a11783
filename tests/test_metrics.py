"""``GET /metrics``: Prometheus text that parses, and counters/histograms that move."""

from __future__ import annotations

import time
import uuid

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.paths import on_both_paths
from tests.support.proxy import Proxy, http_get

proxy_on_both_paths = on_both_paths("proxy")


def scrape(proxy: Proxy) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = http_get(proxy.url + "/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_requests_and_latencies_are_counted_by_route_status_and_streaming(proxy: Proxy) -> None:
    path = "fast" if proxy.settings.upstream.fast_path == "auto" else "litellm"
    before = scrape(proxy)
    client = proxy.client(**{"X-Memproxy-User-Id": "metrics-" + uuid.uuid4().hex[:8]})
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    list(
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="fail-429", messages=[{"role": "user", "content": "hi"}])
    after = scrape(proxy)

    route = "/v1/chat/completions"
    plain = {"route": route, "method": "POST", "status": "200", "streamed": "false"}
    streamed = {**plain, "streamed": "true"}
    limited = {**plain, "status": "429"}
    for labels in (plain, streamed, limited):
        assert (
            value(after, "memproxy_requests_total", **labels)
            == value(before, "memproxy_requests_total", **labels) + 1
        )

    for flag in ("true", "false"):
        count = "memproxy_request_duration_seconds_count"
        assert value(after, count, route=route, streamed=flag) > value(
            before, count, route=route, streamed=flag
        )
        up = "memproxy_upstream_duration_seconds_count"
        assert value(after, up, streamed=flag, path=path) > value(before, up, streamed=flag, path=path)
        other = "litellm" if path == "fast" else "fast"  # the label says which path was taken
        assert value(after, up, streamed=flag, path=other) == value(before, up, streamed=flag, path=other)
    assert value(after, "memproxy_upstream_duration_seconds_sum", streamed="false", path=path) > 0


def test_unknown_paths_share_one_route_label(proxy: Proxy) -> None:
    path = "/no-such-" + uuid.uuid4().hex
    assert http_get(proxy.url + path, timeout=10).status_code == 404
    samples = scrape(proxy)
    assert not any(path in str(key) for key in samples)
    assert (
        value(
            samples,
            "memproxy_requests_total",
            route="(unmatched)",
            method="GET",
            status="404",
            streamed="false",
        )
        >= 1
    )


def test_gauges_mirror_jobs_and_index_state(proxy: Proxy) -> None:
    samples = scrape(proxy)
    for status in ("pending", "running", "done", "dead"):
        assert ("memproxy_jobs", (("status", status),)) in samples
    assert ("memproxy_index_scopes_loaded", ()) in samples
    assert ("memproxy_index_vectors_held", ()) in samples
    for name in (
        "memproxy_capture_failures_total",
        "memproxy_recall_duration_seconds_count",
        "memproxy_recalled_memories_count",
    ):
        assert (name, ()) in samples


def test_each_app_has_its_own_registry(proxy: Proxy, keys_proxy: Proxy) -> None:
    before_keys = scrape(keys_proxy)
    for _ in range(3):
        http_get(proxy.url + "/healthz", timeout=10)
    after_keys = scrape(keys_proxy)
    labels = {"route": "/healthz", "method": "GET", "status": "200", "streamed": "false"}
    assert value(after_keys, "memproxy_requests_total", **labels) == value(
        before_keys, "memproxy_requests_total", **labels
    )
    assert value(scrape(proxy), "memproxy_requests_total", **labels) >= 3


def test_capture_extraction_and_index_metrics_follow_a_turn(proxy: Proxy) -> None:
    before = scrape(proxy)
    user = "metrics-x-" + uuid.uuid4().hex[:8]
    client = proxy.client(**{"X-Memproxy-User-Id": user})
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": f"Remember that {user} plays the oboe"}]
    )
    job = raw.headers["x-memproxy-capture"]
    with proxy.http() as http:
        deadline = time.monotonic() + 20
        while http.get(f"/v1/jobs/{job}").json()["status"] != "done":
            assert time.monotonic() < deadline, "the job was not extracted"
            time.sleep(0.05)
        # A recall in the scope loads its index.
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "oboe?"}])
    after = scrape(proxy)
    ok = "memproxy_extraction_attempts_total"
    assert value(after, ok, outcome="ok") > value(before, ok, outcome="ok")
    tokens = "memproxy_extraction_tokens_total"
    assert value(after, tokens, kind="prompt") > value(before, tokens, kind="prompt")
    assert value(after, "memproxy_jobs", status="done") >= value(before, "memproxy_jobs", status="done") + 1
    assert value(after, "memproxy_recall_duration_seconds_count") > value(
        before, "memproxy_recall_duration_seconds_count"
    )
    assert (
        value(after, "memproxy_recalled_memories_sum") >= value(before, "memproxy_recalled_memories_sum") + 1
    )
    assert value(after, "memproxy_index_scopes_loaded") >= 1
    assert value(after, "memproxy_index_vectors_held") >= 1


def test_recall_stages_are_timed_for_a_chat_request(proxy: Proxy) -> None:
    user = "metrics-stages-" + uuid.uuid4().hex[:8]
    with proxy.http() as http:
        created = http.post("/v1/memories", json={"text": "User's cat is called Biscuit.", "user_id": user})
    assert created.status_code == 201, created.text
    before = scrape(proxy)
    client = proxy.client(**{"X-Memproxy-User-Id": user})
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "What is my cat called?"}]
    )
    assert raw.headers["x-memproxy-recalled"] == "1"
    after = scrape(proxy)
    count = "memproxy_recall_stage_duration_seconds_count"
    for stage in ("embed", "search", "budget", "placement"):
        assert value(after, count, stage=stage) == value(before, count, stage=stage) + 1, stage
        assert value(after, "memproxy_recall_stage_duration_seconds_sum", stage=stage) > 0, stage


def test_query_embedding_cache_hits_are_counted_for_near_identical_questions(proxy: Proxy) -> None:
    user = "metrics-cache-" + uuid.uuid4().hex[:8]
    client = proxy.client(**{"X-Memproxy-User-Id": user})
    question = f"Where did I park the car {uuid.uuid4().hex[:8]}?"
    total = "memproxy_query_embeddings_total"
    before = scrape(proxy)
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": question}])
    middle = scrape(proxy)
    assert value(middle, total, result="miss") == value(before, total, result="miss") + 1
    assert value(middle, total, result="hit") == value(before, total, result="hit")
    # The same question in another case and spacing is the same query.
    again = "  " + question.upper().replace(" ", "\n ", 2) + " "
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": again}])
    after = scrape(proxy)
    assert value(after, total, result="hit") == value(middle, total, result="hit") + 1
    assert value(after, total, result="miss") == value(middle, total, result="miss")
