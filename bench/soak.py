"""Soak test: memproxy under mixed load with injected upstream faults, then consistency checks.

Runs the scripted upstream and ``memproxy serve`` as subprocesses (so the server's RSS is
honest), drives N concurrent clients for a fixed time, drains the outbox and checks:

- every response is the one its scenario scripts (200, or the scripted 500/429/504, or a
  stream that ends in an error event for mid-stream drops) — nothing else;
- every successful turn with capture on was captured exactly once (its job exists and its
  user message is stored once); failed, dropped and capture-off turns were not;
- no memory is visible across scopes or tenants (listing, search and recalled replies);
- resident memory (the server and its workers) is stable after warm-up; the server is still
  ready; SIGTERM exits 0;
- the server's log has no error, no lost capture and no restarted worker; each missing turn
  is reported with every log line naming its job, so it comes with its cause.

The client is plain httpx with its default pool (5 s idle expiry, as the OpenAI SDK), so a
server that closes idle connections as soon as the client may reuse them shows up as a
client error here.

Usage: ``python bench/soak.py [--duration 300] [--clients 64] [--scopes 16] [--workers 2]
[--keep DIR]``. Prints one JSON object; exit status 1 when any check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import random
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import processes
from stats import percentiles_ms

KEYS = {"alpha": "soak-key-alpha-0000000001", "beta": "soak-key-beta-00000000002"}
MARKER = re.compile(r"\bmk[0-9a-f]{8}\b")
FACTS_PER_SCOPE = 12
UPSTREAM_TIMEOUT_S = 2.0
CLIENT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Scenario:
    name: str
    weight: int
    model: str
    stream: bool
    expect_status: int
    scoped: bool = True
    capture: bool = True

    @property
    def succeeds(self) -> bool:
        return self.expect_status == 200 and self.model != "drop"


SCENARIOS = [
    Scenario("ok", 40, "gpt-4o-mini", False, 200),
    Scenario("ok_stream", 30, "gpt-4o-mini", True, 200),
    Scenario("slow_stream", 6, "slow", True, 200),
    Scenario("no_capture", 4, "gpt-4o-mini", False, 200, capture=False),
    Scenario("no_scope", 3, "gpt-4o-mini", True, 200, scoped=False),
    Scenario("fail_500", 5, "fail-500", False, 500),
    Scenario("fail_500_stream", 2, "fail-500", True, 500),
    Scenario("fail_429", 5, "fail-429", False, 429),
    Scenario("hang_timeout", 1, "hang", False, 504),
    Scenario("hang_timeout_stream", 1, "hang", True, 504),
    Scenario("drop_stream", 5, "drop", True, 200),
]


@dataclass(frozen=True)
class ScopeRef:
    tenant: str
    user_id: str

    @property
    def marker(self) -> str:
        return "mk" + hashlib.sha256(f"{self.tenant}/{self.user_id}".encode()).hexdigest()[:8]


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    unexpected: list[dict[str, Any]] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    captured: dict[str, str] = field(default_factory=dict)  # job id -> user text (expected captured)
    not_captured: list[str] = field(default_factory=list)  # user texts that must not be stored
    leaks: list[str] = field(default_factory=list)
    recalled_requests: int = 0

    def bad(self, scenario: Scenario, detail: str) -> None:
        self.outcomes["unexpected"] += 1
        if len(self.unexpected) < 20:
            self.unexpected.append({"scenario": scenario.name, "detail": detail[:300]})


# -- processes --------------------------------------------------------------------------------


@contextmanager
def subprocesses(tmp: Path, workers: int = 1) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """The scripted upstream and memproxy, started side by side; both stopped and reaped on exit."""
    up_port, mp_port = processes.free_port(), processes.free_port()
    config = {
        "server": {"port": mp_port, "shutdown_grace_s": 10},
        "storage": {"data_dir": str(tmp / "data")},
        "upstream": {
            "api_base": f"http://127.0.0.1:{up_port}/v1",
            "api_key": "sk-soak-provider",
            "timeout_s": UPSTREAM_TIMEOUT_S,
        },
        "auth": {"mode": "keys", "keys": [{"key": key, "tenant": tenant} for tenant, key in KEYS.items()]},
        "embedding": {"provider": "hash"},
        "extraction": {"model": "extractor", "poll_interval_s": 0.1, "backoff_base_s": 0.1},
    }
    # Logs go to files: the scripted drops make the upstream print a traceback each.
    upstream = processes.upstream_child(__file__, "--serve-upstream", up_port, tmp / "upstream.log")
    extra = ("--workers", str(workers)) if workers > 1 else ()
    server = processes.memproxy_child("serve", config, tmp, "memproxy", *extra)
    with processes.running([upstream, server]) as (_, server_proc):
        yield f"http://127.0.0.1:{mp_port}", server_proc, tmp / "data" / "memproxy.sqlite3"


# -- load -------------------------------------------------------------------------------------


def headers_for(scope: ScopeRef, scenario: Scenario) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {KEYS[scope.tenant]}"}
    if scenario.scoped:
        headers["X-Memproxy-User-Id"] = scope.user_id
    if not scenario.capture:
        headers["X-Memproxy-Capture"] = "off"
    return headers


def check_reply(tally: Tally, scope: ScopeRef, text: str) -> None:
    """The scripted reply echoes recalled memories: none may carry another scope's marker."""
    recalled = text.split("I remember:", 1)[1] if "I remember:" in text else ""
    if recalled:
        tally.recalled_requests += 1
    foreign = {m for m in MARKER.findall(recalled) if m != scope.marker}
    if foreign:
        tally.leaks.append(f"reply in {scope.tenant}/{scope.user_id} recalled {sorted(foreign)}")


async def one_request(http: httpx.AsyncClient, tally: Tally, scope: ScopeRef, scenario: Scenario) -> None:
    turn = uuid.uuid4().hex[:12]
    text = f"Remember that {scope.marker} fact {random.randrange(FACTS_PER_SCOPE)}. Turn {turn}"
    body: dict[str, Any] = {"model": scenario.model, "messages": [{"role": "user", "content": text}]}
    if scenario.stream:
        body["stream"] = True
    started = time.perf_counter()
    async with http.stream(
        "POST", "/v1/chat/completions", json=body, headers=headers_for(scope, scenario)
    ) as r:
        raw = (await r.aread()).decode()
        status, job = r.status_code, r.headers.get("x-memproxy-capture")
    seconds = time.perf_counter() - started
    if status != scenario.expect_status:
        tally.bad(scenario, f"status {status}: {raw[:200]}")
        return
    if status != 200:
        tally.outcomes[scenario.name] += 1
        tally.not_captured.append(text)
        return
    reply, error = parse_answer(raw, scenario.stream)
    if scenario.model == "drop":
        ok = error is not None
        tally.not_captured.append(text)
    else:
        ok = error is None and reply.startswith("You said:")
        check_reply(tally, scope, reply)
        expect_job = scenario.scoped and scenario.capture
        if expect_job and job and job.startswith("job_"):
            tally.captured[job] = text
        elif expect_job or job != "off":
            ok = False
        if not expect_job:
            tally.not_captured.append(text)
    if not ok:
        tally.bad(scenario, f"body {raw[-300:]} (capture header {job})")
        return
    tally.outcomes[scenario.name] += 1
    tally.latencies[scenario.name].append(seconds)


def parse_answer(raw: str, stream: bool) -> tuple[str, str | None]:
    """(answer text, error message if the answer carried one)."""
    if not stream:
        data = json.loads(raw)
        return str(data["choices"][0]["message"]["content"] or ""), None
    events = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
    if not events:
        return "", "empty stream"
    if events[-1] != "[DONE]":
        last = json.loads(events[-1])
        return "", str(last.get("error", {}).get("message", "stream ended without [DONE]"))
    text = ""
    for event in events[:-1]:
        chunk = json.loads(event)
        if "error" in chunk:
            return text, str(chunk["error"])
        for choice in chunk.get("choices", []):
            text += choice.get("delta", {}).get("content") or ""
    return text, None


async def client_loop(
    http: httpx.AsyncClient, tally: Tally, scopes: list[ScopeRef], deadline: float, rng: random.Random
) -> None:
    weights = [s.weight for s in SCENARIOS]
    while time.monotonic() < deadline:
        scenario = rng.choices(SCENARIOS, weights)[0]
        scope = rng.choice(scopes)
        try:
            await one_request(http, tally, scope, scenario)
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            tally.bad(scenario, f"{type(exc).__name__}: {exc}")


class RssSampler:
    """Samples the server's resident set size once a second (Linux ``/proc``): the process and
    its descendants, so ``--workers N`` counts the workers, not just their supervisor."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float]] = []

    def tree(self) -> list[int]:
        pids, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            for task in Path(f"/proc/{pid}/task").glob("*/children"):
                with contextlib.suppress(OSError):
                    todo += [int(child) for child in task.read_text().split()]
        return pids

    def read_mb(self) -> float:
        total = 0
        for pid in self.tree():
            with contextlib.suppress(OSError):  # a process that just exited
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        return total / 1024

    async def run(self, started: float) -> None:
        while True:
            self.samples.append((time.monotonic() - started, self.read_mb()))
            await asyncio.sleep(1.0)

    def summary(self, warmup_s: float) -> dict[str, float]:
        after = [mb for t, mb in self.samples if t >= warmup_s] or [mb for _, mb in self.samples]
        head, tail = after[:3], after[-3:]
        at_warmup, at_end = statistics.median(head), statistics.median(tail)
        return {
            "at_start": round(self.samples[0][1], 1),
            "after_warmup": round(at_warmup, 1),
            "end": round(at_end, 1),
            "peak": round(max(mb for _, mb in self.samples), 1),
            "growth_after_warmup": round(at_end - at_warmup, 1),
        }


async def drive(url: str, server_pid: int, args: argparse.Namespace, tally: Tally) -> dict[str, Any]:
    scopes = [ScopeRef(tenant, f"user-{i}") for tenant in KEYS for i in range(args.scopes)]
    limits = httpx.Limits(max_connections=args.clients + 8, max_keepalive_connections=args.clients + 8)
    sampler = RssSampler(server_pid)
    started = time.monotonic()
    sampling = asyncio.create_task(sampler.run(started))
    try:
        async with httpx.AsyncClient(base_url=url, timeout=CLIENT_TIMEOUT_S, limits=limits) as http:
            deadline = started + args.duration
            await asyncio.gather(
                *(
                    client_loop(http, tally, scopes, deadline, random.Random(args.seed + n))
                    for n in range(args.clients)
                )
            )
    finally:
        sampling.cancel()
        try:
            await sampling
        except asyncio.CancelledError:
            pass
    elapsed = time.monotonic() - started
    return {
        "elapsed_s": round(elapsed, 1),
        "rss_mb": sampler.summary(args.duration * args.warmup),
        "scopes": scopes,
    }


# -- checks after the load --------------------------------------------------------------------


def drain(url: str, timeout: float) -> float:
    """Wait until no tenant has pending or running jobs; returns the seconds it took."""
    started = time.monotonic()
    with httpx.Client(base_url=url, timeout=10) as http:
        while time.monotonic() - started < timeout:
            busy = 0
            for key in KEYS.values():
                for status in ("pending", "running"):
                    r = http.get(
                        "/v1/jobs", params={"status": status}, headers={"Authorization": f"Bearer {key}"}
                    )
                    busy += len(r.json()["data"])
            if not busy:
                return time.monotonic() - started
            time.sleep(0.25)
    raise TimeoutError("the outbox did not drain")


def check_captures(db_path: Path, tally: Tally) -> dict[str, Any]:
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        jobs = dict(conn.execute("SELECT id, status FROM jobs").fetchall())
        rows = conn.execute("SELECT job_id, content FROM messages WHERE role = 'user'").fetchall()
    # Messages are stored as JSON objects; count each user text, and under which job.
    stored: Counter[str] = Counter()
    stored_under: dict[str, str | None] = {}
    for job_id, content in rows:
        text = str(json.loads(content).get("content"))
        stored[text] += 1
        stored_under[text] = job_id
    expected = set(tally.captured)
    return {
        "expected": len(expected),
        "jobs": len(jobs),
        "missing_jobs": len(expected - jobs.keys()),
        "missing_ids": sorted(expected - jobs.keys()),
        "extra_jobs": len(jobs.keys() - expected),
        "not_stored_once": sum(
            1 for job, text in tally.captured.items() if stored[text] != 1 or stored_under[text] != job
        ),
        "stored_but_should_not": sum(1 for text in tally.not_captured if stored[text]),
        "done": sum(1 for s in jobs.values() if s == "done"),
        "dead": sum(1 for s in jobs.values() if s == "dead"),
    }


# Server log lines that say a turn's capture did not happen (outbox.capture).
CAPTURE_LOST = re.compile(r"capture of job \S+ failed|turn of job \S+ not captured")


def server_evidence(log_path: Path, missing: list[str]) -> dict[str, Any]:
    """What the server's log says about the missing turns and its own errors, so a missing turn
    or a client error comes with its cause (or the lack of one) instead of a bare count."""
    lines = log_path.read_text(errors="replace").splitlines() if log_path.exists() else []
    errors = [line for line in lines if " ERROR " in line or line.startswith("Traceback")]
    return {
        "error_lines": len(errors),
        "error_samples": [line[:300] for line in errors[:10]],
        "capture_lost_lines": sum(1 for line in lines if CAPTURE_LOST.search(line)),
        "worker_restarts": sum(1 for line in lines if "exited (code" in line),
        # Every line naming a missing job (its access-log line, a capture failure...).
        "missing": {job: [line[:300] for line in lines if job in line] for job in missing[:10]},
    }


def list_memories(http: httpx.Client, scope: ScopeRef) -> list[str]:
    texts: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, str | int] = {"user_id": scope.user_id, "limit": 100}
        if cursor:
            params["cursor"] = cursor
        r = http.get("/v1/memories", params=params, headers={"Authorization": f"Bearer {KEYS[scope.tenant]}"})
        r.raise_for_status()
        page = r.json()
        texts += [str(m["text"]) for m in page["data"]]
        cursor = page.get("next_cursor")
        if not cursor:
            return texts


def check_isolation(url: str, scopes: list[ScopeRef], tally: Tally) -> dict[str, int]:
    rng = random.Random(7)
    held = 0
    with httpx.Client(base_url=url, timeout=10) as http:
        for scope in scopes:
            texts = list_memories(http, scope)
            held += len(texts)
            for text in texts:
                if MARKER.findall(text) != [scope.marker]:
                    tally.leaks.append(f"{scope.tenant}/{scope.user_id} lists {text!r}")
            twin = ScopeRef("beta" if scope.tenant == "alpha" else "alpha", scope.user_id)
            for other in (twin, rng.choice([s for s in scopes if s != scope])):
                r = http.post(
                    "/v1/memories/search",
                    json={"query": f"{other.marker} fact", "user_id": scope.user_id},
                    headers={"Authorization": f"Bearer {KEYS[scope.tenant]}"},
                )
                r.raise_for_status()
                for hit in r.json()["data"]:
                    if other.marker in str(hit["text"]):
                        tally.leaks.append(f"search in {scope.tenant}/{scope.user_id} found {hit['text']!r}")
    return {"scopes_checked": len(scopes), "memories_held": held, "leaks": len(tally.leaks)}


def latency_summary(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {}
    return {"n": len(seconds), **percentiles_ms(seconds, (50, 95, 99), digits=1),
            "max_ms": round(max(seconds) * 1000, 1)}  # fmt: skip


@contextmanager
def work_dir(keep: str | None) -> Iterator[Path]:
    """A temporary directory for the data and the logs, or ``keep`` (created, left in place)."""
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        yield Path(keep)
        return
    with tempfile.TemporaryDirectory(prefix="memproxy-soak-") as tmp:
        yield Path(tmp)


def stop_server(server: subprocess.Popen[bytes]) -> int | None:
    server.send_signal(signal.SIGTERM)
    try:
        return server.wait(30)
    except subprocess.TimeoutExpired:
        return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    tally = Tally()
    phases: dict[str, float] = {}
    clock = time.monotonic()
    with (
        work_dir(args.keep) as tmp,
        subprocesses(tmp, args.workers) as (url, server, db),
    ):
        phases["startup_s"] = time.monotonic() - clock
        load = asyncio.run(drive(url, server.pid, args, tally))
        drain_s = drain(url, timeout=max(120.0, args.duration))
        ready = httpx.get(url + "/readyz", timeout=10).status_code == 200
        clock = time.monotonic()
        captures = check_captures(db, tally)
        isolation = check_isolation(url, load.pop("scopes"), tally)
        phases["checks_s"] = time.monotonic() - clock
        clock = time.monotonic()
        exit_code = stop_server(server)
        phases["shutdown_s"] = time.monotonic() - clock
        evidence = server_evidence(tmp / "memproxy.log", captures["missing_ids"])
    total = sum(tally.outcomes.values())
    rss = load["rss_mb"]
    checks = {
        "only_scripted_failures": tally.outcomes["unexpected"] == 0,
        "captured_exactly_once": captures["missing_jobs"]
        == captures["extra_jobs"]
        == captures["not_stored_once"]
        == captures["stored_but_should_not"]
        == captures["dead"]
        == 0
        and captures["expected"] > 0,
        "no_cross_scope_memory": not tally.leaks and isolation["memories_held"] > 0,
        "rss_stable_after_warmup": rss["growth_after_warmup"]
        <= max(args.rss_slack_mb, 0.2 * rss["after_warmup"]),
        "server_log_clean": evidence["error_lines"]
        == evidence["capture_lost_lines"]
        == evidence["worker_restarts"]
        == 0,
        "healthy_after": ready,
        "graceful_exit_0": exit_code == 0,
    }
    return {
        "duration_s": args.duration,
        "clients": args.clients,
        "scopes": isolation["scopes_checked"],
        "requests": total,
        "requests_per_s": round(total / load["elapsed_s"], 1),
        "outcomes": dict(sorted(tally.outcomes.items())),
        "latency": {name: latency_summary(values) for name, values in sorted(tally.latencies.items())},
        "recalled_requests": tally.recalled_requests,
        "captures": captures,
        "drain_s": round(drain_s, 2),
        "phases_s": {name: round(value, 1) for name, value in phases.items()},
        "isolation": isolation,
        "rss_mb": rss,
        "unexpected_samples": tally.unexpected,
        "server_log": evidence,
        "leak_samples": tally.leaks[:10],
        "checks": checks,
        "passed": all(checks.values()),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load (default 300)")
    parser.add_argument("--clients", type=int, default=64, help="concurrent clients (default 64)")
    parser.add_argument("--scopes", type=int, default=16, help="users per tenant (two tenants)")
    parser.add_argument("--warmup", type=float, default=0.3, help="fraction of the run treated as warm-up")
    parser.add_argument("--rss-slack-mb", type=float, default=40.0, help="allowed RSS growth after warm-up")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", metavar="DIR", help="keep the data dir and the logs in DIR (an empty dir)")
    parser.add_argument("--workers", type=int, default=1, help="memproxy serve --workers N (default 1)")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_upstream:
        processes.serve_scripted_upstream(args.serve_upstream)
        return 0
    result = run(args)
    print(json.dumps(result, indent=2))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
