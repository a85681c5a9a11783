"""``bench/overhead.py --quick`` runs end to end and prints the JSON the issues ask for.

A subprocess on purpose: the bench starts its own fake upstream and memproxy processes
and must work as the standalone script people run; the figures themselves are not
asserted (speed goals live in the bench output, not in timed unit tests). About 15 s on
an idle 2-core machine; the timeout is generous because other suites may share the CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses: see README "Tests"

BENCH = Path(__file__).resolve().parent.parent / "bench" / "overhead.py"
# The --workers 2 and LiteLLM-proxy rows start extra servers (slow to start here, and LiteLLM's
# proxy needs `memproxy[bench]`): the smoke run leaves them out; the full run has them.
SKIPPED = ("memproxy_on_w2", "litellm_proxy")
ROWS = {"direct", "litellm", "memproxy_off", "memproxy_on", "memproxy_on_hash", "memproxy_on_cached",
        "memproxy_litellm_off", "memproxy_litellm_on"}  # fmt: skip
# Memory-on rows served by one process: their breakdown is read from that server's /metrics.
BROKEN_DOWN = {"memproxy_on", "memproxy_on_hash", "memproxy_on_cached", "memproxy_litellm_on"}
MODES = {"non_stream", "stream_ttfc"}
LEVELS = {"c1", "c32"}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_bench_prints_every_row_mode_and_ratio() -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    skips = [arg for row in SKIPPED for arg in ("--skip", row)]
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--memories", "300", *skips],
        capture_output=True, text=True, timeout=280, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)

    assert set(report["results"]) == LEVELS
    for level in LEVELS:
        assert set(report["results"][level]) == MODES
        for mode in MODES:
            rows = report["results"][level][mode]
            assert set(rows) == ROWS
            for name, row in rows.items():
                # LiteLLM's own transport sometimes fails to connect to the loaded fake at c=32
                # (502 "Connection error", seen on the LiteLLM-path rows only): tolerated there.
                allowed = row["n"] // 10 if name.startswith("memproxy_litellm") else 0
                assert row["errors"] <= allowed, (level, mode, name, row.get("first_error"))
                assert row["n"] > 0 and 0 < row["p50"] <= row["p95"] <= row["p99"], (level, mode, name, row)
            added = report["overhead_ms"][level][mode]["p50"]
            assert set(added) == ROWS - {"direct"}
            assert set(report["memory_on_minus_off"][level][mode]) == {"fast", "fast_hash", "litellm"}
            parts = report["breakdown"][level][mode]
            assert set(parts) == BROKEN_DOWN
            for name in BROKEN_DOWN:
                assert (
                    parts[name]["mean_ms"]["embed"] is not None
                    and parts[name]["mean_ms"]["search"] is not None
                )
            # Varied questions embed; the repeated one is answered by the cache.
            assert parts["memproxy_on"]["query_embedding_cache"]["miss"] > 0
            assert parts["memproxy_on"]["query_embedder_calls"] > 0
            cached = parts["memproxy_on_cached"]["query_embedding_cache"]  # a miss when its 60 s TTL ends
            assert cached["hit"] > 10 * cached["miss"], cached

    assert report["config"]["memories_seeded"] == 300
    assert report["recall"]["recall_wired"] is True
    assert report["recall"]["responses_seen"] > 0
    for mode in MODES:
        targets = report["targets"][mode]
        assert targets["c1_fast_off_vs_litellm"]["value"] is not None
        assert targets["c32_rps_on_hash_fast_vs_litellm_path"]["value"] is not None
        assert targets["c1_on_vs_litellm_proxy"]["value"] is None  # its row was skipped
        assert targets["c32_rps_on_w2_vs_w1"]["value"] is None  # its row was skipped
