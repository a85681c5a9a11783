"""``memproxy serve --workers 2``: two processes on one port and one data dir.

Real subprocesses (the supervisor and its workers) against the session's scripted upstream.
What must hold: each process listens on a socket of its own (``SO_REUSEPORT``), so the
kernel spreads connections over them; every process answers; a memory written through one is found through any;
each captured turn is extracted exactly once although both processes run a worker; after
a forget no snapshot holds the scope's entries, whichever process had loaded it; SIGTERM stops everything with exit 0,
and killing the supervisor takes its workers with it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from memproxy.auth import passthrough_tenant
from memproxy.commands.serve import WORKER_NAME
from memproxy.index import snapshot as snapshot_file
from memproxy.scope import Scope
from memproxy.testing.background_server import free_port
from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.support.memory_flow import TOKEN, chat, memories, search, unique, wait_job, wait_until
from tests.support.serve_process import ServeProcess, write_config

pytestmark = pytest.mark.slow


def children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (Linux /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and " Z " not in Path(f"/proc/{pid}/stat").read_text()


def is_worker(pid: int) -> bool:
    """A worker names itself (``serve.WORKER_NAME``); the supervisor's other child, multiprocessing's
    resource tracker, keeps the interpreter's name. The command line cannot tell them apart: both
    run the venv's python, whose path holds the checkout's directory (``…/memproxy/.venv/…``)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == WORKER_NAME
    except OSError:
        return False


def workers_of(server: ServeProcess, count: int = 2) -> set[int]:
    """The supervisor's ``count`` worker pids, once each has named itself."""

    def named() -> set[int] | None:
        workers = {p for p in children(server.process.pid) if is_worker(p)}
        return workers if len(workers) >= count else None

    return wait_until(named, 60)


@pytest.fixture
def served(
    upstream: tuple[ScriptedUpstream, str], tmp_path: Path
) -> Iterator[tuple[ServeProcess, str, Path]]:
    port = free_port()
    data_dir = tmp_path / "data"
    config = write_config(tmp_path / "config.yaml", {
        "server": {"port": port},
        "storage": {"data_dir": str(data_dir)},
        "upstream": {"api_base": upstream[1], "timeout_s": 10},
        "extraction": {"model": "extractor", "poll_interval_s": 0.05, "backoff_base_s": 0.05},
        "index": {"snapshot_interval_s": 0.2},
    })  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with ServeProcess("serve", config, tmp_path / "serve.log", args=("--workers", "2")) as server:
        server.wait_ready(url, timeout=120)
        try:
            yield server, url, data_dir
        finally:
            for pid in children(server.process.pid):  # never leave a worker behind
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)


def test_two_processes_share_one_data_dir(
    served: tuple[ServeProcess, str, Path], fake: ScriptedUpstream
) -> None:
    server, url, data_dir = served
    workers = workers_of(server)
    assert len(workers) == 2, server.log_text()  # not the resource tracker too

    # Written through whichever process accepts; found through every connection after it.
    user = unique("shared")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    created = httpx.post(url + "/v1/memories", headers=headers, timeout=10,
                         json={"user_id": user, "text": "Keeps bees on the roof"})  # fmt: skip
    assert created.status_code == 201, created.text
    with ThreadPoolExecutor(8) as pool:  # new connection each: the kernel spreads them over both
        found = list(pool.map(lambda _: search(url, user, "bees roof"), range(24)))
    assert all(hits and hits[0]["text"] == "Keeps bees on the roof" for hits in found)

    # Both processes run a worker; each turn is extracted once.
    people = [unique("p") for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:
        turns = list(pool.map(lambda p: chat(url, [{"role": "user", "content": f"I live in Town{p[-4:]}"}],
                                             user=p), people))  # fmt: skip
    for person, turn in zip(people, turns, strict=True):
        assert turn.status == 200
        done = wait_job(url, turn.job_id, timeout=60)
        assert done["attempts"] == 1
        assert [m["text"] for m in memories(url, person)] == [f"User lives in Town{person[-4:]}"]
    calls = [r for r in fake.chat_requests(extraction=True) if any(p in str(r.body) for p in people)]
    assert len(calls) <= len(people)

    # Forget: no snapshot of the scope survives, whichever process had written one.
    snapshot = data_dir / "index" / f"{Scope(passthrough_tenant(TOKEN), people[0], '').key}.faiss"
    with ThreadPoolExecutor(4) as pool:  # load the scope in both processes
        list(pool.map(lambda _: search(url, people[0], "Town"), range(8)))
    wait_until(snapshot.exists, 30)
    forgotten = httpx.delete(url + "/v1/memories", params={"user_id": people[0]}, headers=headers, timeout=10)
    assert forgotten.status_code == 200
    with ThreadPoolExecutor(4) as pool:
        assert not any(pool.map(lambda _: search(url, people[0], "Town"), range(8)))
    time.sleep(1.0)  # five snapshot intervals of both processes
    if snapshot.exists():  # a search after the forget may snapshot the (now empty) scope again
        _, arrays = snapshot_file.decode(snapshot.read_bytes())
        assert len(arrays["lex_nums"]) == 0 and len(arrays.get("vec_nums", [])) == 0
        assert f"town{people[0][-4:]}".encode() not in snapshot.read_bytes()

    assert server.stop(signal.SIGTERM, timeout=60) == 0
    assert not [p for p in workers if alive(p)]


def sockets_by_pid(pids: set[int]) -> dict[int, set[int]]:
    """Socket inodes each process holds open (Linux /proc)."""
    found: dict[int, set[int]] = {}
    for pid in pids:
        inodes = set()
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
        found[pid] = inodes
    return found


def tcp_inodes(port: int, state: str) -> list[int]:
    """Inodes of IPv4 TCP sockets whose local port is ``port`` in ``state`` (0A listening, 01
    established), from /proc/net/tcp."""
    inodes = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state:
            inodes.append(int(fields[9]))
    return inodes


def test_each_worker_listens_on_its_own_socket_and_gets_connections(
    served: tuple[ServeProcess, str, Path],
) -> None:
    server, url, _ = served
    port = int(url.rsplit(":", 1)[1])
    workers = workers_of(server)
    # Ready means one worker answered; the other may still be starting (it listens once its
    # app has started). Two listening sockets, one in each worker: not one socket shared
    # (uvicorn's own --workers, where keep-alive connections pile up on whichever process
    # accepted first).
    listening = wait_until(lambda: tcp_inodes(port, "0A") if len(tcp_inodes(port, "0A")) >= 2 else None, 120)
    assert len(listening) == 2, listening
    held = sockets_by_pid(workers)
    assert sorted(sum(inode in held[pid] for inode in listening) for pid in workers) == [1, 1]

    # 32 keep-alive connections at once, as a load generator opens them: both workers get some.
    clients = [httpx.Client(base_url=url, timeout=10) for _ in range(32)]
    try:
        with ThreadPoolExecutor(32) as pool:
            assert all(r.status_code == 200 for r in pool.map(lambda c: c.get("/healthz"), clients))
        established = set(tcp_inodes(port, "01"))
        per_worker = {pid: len(established & inodes) for pid, inodes in sockets_by_pid(workers).items()}
        assert sum(per_worker.values()) == 32, per_worker
        assert min(per_worker.values()) >= 1, per_worker  # all on one would fail (p = 2**-31 by chance)
    finally:
        for client in clients:
            client.close()


def test_killing_the_supervisor_takes_the_workers_along(served: tuple[ServeProcess, str, Path]) -> None:
    server, _, _ = served
    workers = workers_of(server)
    server.process.kill()
    server.process.wait(30)
    wait_until(lambda: not [p for p in workers if alive(p)], 30)
