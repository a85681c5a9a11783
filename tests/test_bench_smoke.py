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
ROWS = {"direct", "litellm", "memproxy_off", "memproxy_on"}
MODES = {"non_stream", "stream_ttfc"}
LEVELS = {"c1", "c32"}


@pytest.mark.timeout(180)
def test_quick_bench_prints_every_row_mode_and_ratio() -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--memories", "300"],
        capture_output=True, text=True, timeout=150, env=env, check=False,
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
                assert row["errors"] == 0, (level, mode, name, row.get("first_error"))
                assert row["n"] > 0 and 0 < row["p50"] <= row["p95"] <= row["p99"], (level, mode, name, row)
            cell = report["overhead"][level][mode]["p50"]
            assert {"overhead_memproxy_ms", "overhead_litellm_ms", "ratio"} <= set(cell)
            assert "p50_ms" in report["memory_on_minus_off"][level][mode]

    assert report["config"]["memories_seeded"] == 300
    assert isinstance(report["recall"]["recall_wired"], bool)
    assert report["recall"]["responses_seen"] > 0
    assert {"ratio_p50", "ratio_p50_worst", "ratio_met", "memory_delta_p50_ms", "memory_met"} <= set(
        report["targets"]
    )
