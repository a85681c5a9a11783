"""Postgres stopped under traffic: chat keeps answering, captured turns are spooled on local disk
and moved into the outbox exactly once, in order, when the database is back.

This test owns a dedicated Postgres cluster, because it stops and restarts it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from memproxy.testing.pg_cluster import PostgresCluster
from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.support.memory_flow import chat, query, unique, wait_until
from tests.support.postgres import PostgresServer, start_server
from tests.support.proxy import Proxy, proxy_settings, start_proxy

pytestmark = pytest.mark.slow
TOKEN = "sk-outage-test"
OUTAGE_S = 5.0


@pytest.fixture
def own_server(pg_server: PostgresServer) -> Iterator[PostgresServer]:
    """A cluster of this test's own (``pg_server`` first, so CI fails rather than skips here too)."""
    yield from start_server(own=True)


def _metric(proxy: Proxy, name: str) -> float:
    with proxy.http(None) as http:
        lines = http.get("/metrics").text.splitlines()
    return sum(
        float(line.split()[-1])
        for line in lines
        if line.startswith(name + " ") or line.startswith(name + "{")
    )


def test_postgres_down_for_5s_under_traffic_loses_and_duplicates_nothing(
    upstream: tuple[ScriptedUpstream, str],
    own_server: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    cluster = own_server.cluster
    assert isinstance(cluster, PostgresCluster)
    settings = proxy_settings(upstream[1], tmp_path_factory.mktemp("outage"),
                              storage={"url": own_server.fresh_url("outage")},
                              extraction={"worker_enabled": False})  # fmt: skip
    server, proxy = start_proxy(settings)
    answered: list[tuple[str, str]] = []  # (job id, text) of every answered turn, in order
    user = unique("steady")
    stop = threading.Event()

    def traffic() -> None:
        n = 0
        while not stop.is_set():
            text = f"turn {n} {user}"
            turn = chat(proxy.url, [{"role": "user", "content": text}], user=user, token=TOKEN)
            assert turn.status == 200 and turn.text == f"You said: {text}"
            assert turn.job_id.startswith("job_"), turn.headers
            answered.append((turn.job_id, text))
            n += 1
            time.sleep(0.02)

    try:
        thread = threading.Thread(target=traffic)
        thread.start()
        wait_until(lambda: len(answered) >= 5)
        cluster.stop_server()
        down_at = len(answered)
        time.sleep(OUTAGE_S / 2)
        with proxy.http(None) as http:
            ready = http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "degraded", ready.text
        assert _metric(proxy, "memproxy_capture_spooled_total") > 0
        time.sleep(OUTAGE_S / 2)
        during = len(answered) - down_at
        cluster.start_server()
        wait_until(lambda: len(answered) >= down_at + during + 5, timeout=30)
        stop.set()
        thread.join(30)
        assert during >= 5, "chat should keep answering while Postgres is down"
        ids = [job_id for job_id, _ in answered]

        def all_in_outbox() -> bool:
            try:
                return len(query(proxy, "SELECT id FROM jobs WHERE user_id = ?", (user,))) >= len(ids)
            except Exception:
                return False

        wait_until(all_in_outbox, timeout=60)
        rows = query(proxy, "SELECT job_id, content FROM messages WHERE user_id = ? AND role = 'user' ORDER BY num",
                     (user,))  # fmt: skip
        assert sorted(r[0] for r in rows) == sorted(ids)  # each answered turn exactly once
        jobs = query(proxy, "SELECT id FROM jobs WHERE user_id = ? ORDER BY created_at, rowid", (user,))
        assert [r[0] for r in jobs] == ids  # the outbox holds them in the order they were answered
        wait_until(lambda: _metric(proxy, "memproxy_spool_pending") == 0, timeout=30)
        with httpx.Client(base_url=proxy.url) as http:
            assert http.get("/readyz").json()["status"] == "ready"
    finally:
        stop.set()
        server.stop()
