"""``bench/console.py`` runs end to end on a small tenant and reports every console page.

A subprocess, like the other bench smoke tests: it seeds a data dir, starts ``memproxy
serve`` and reads the server's access log. Figures are not asserted (speed goals live in
the bench output); that every page was measured from the server's own log is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "console.py"

pytestmark = pytest.mark.slow


@pytest.mark.timeout(240)
def test_console_bench_measures_every_page_from_the_server_log() -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, str(BENCH), "--memories", "200", "--scopes", "20", "--rounds", "2"],
        capture_output=True, text=True, timeout=220, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["tenant"]["scopes"] == 20 and report["tenant"]["memories_in_big_scope"] == 200
    pages = report["pages"]
    assert {"sign-in", "scopes (first page)", "scope (hybrid search)", "memory (21 history events)",
            "jobs (dead, scope)", "job (messages)"} <= set(pages)  # fmt: skip
    for name, page in pages.items():
        assert page["calls"], name
        for call in page["calls"]:
            assert 0 < call["server_p50_ms"] <= call["server_max_ms"], (name, call)
    assert report["slowest_page_server_ms"] > 0
