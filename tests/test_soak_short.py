"""The short soak (30 s, 16 clients) from ``bench/soak.py``: every check must pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses: see README "Tests"

SOAK = Path(__file__).resolve().parents[1] / "bench" / "soak.py"


def test_short_soak_passes_every_check() -> None:
    result = subprocess.run(
        [sys.executable, str(SOAK), "--duration", "30", "--clients", "16"],
        capture_output=True,
        text=True,
        timeout=170,
    )
    report = json.loads(result.stdout)
    failed = [name for name, ok in report["checks"].items() if not ok]
    assert not failed, json.dumps(report, indent=1)
    assert result.returncode == 0
    # Every scripted fault was actually exercised, alongside the successes.
    for outcome in ("ok", "ok_stream", "slow_stream", "fail_500", "fail_429", "drop_stream"):
        assert report["outcomes"].get(outcome, 0) > 0, report["outcomes"]
    assert report["captures"]["expected"] > 100
    assert report["recalled_requests"] > 0
