"""``memproxy demo`` runs offline, end to end, and shows the facts recalled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses: see README "Tests"


def test_demo_captures_then_recalls_both_facts(tmp_path: Path) -> None:
    # No provider key and an empty working dir: the demo must need neither.
    env = {
        k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("MEMPROXY_")
    }
    result = subprocess.run(
        [sys.executable, "-m", "memproxy", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    # Split on the step headings at line starts: the job id printed in step 1 is random hex
    # and may itself contain "2)" (e.g. "job_…2)"), which once made this test fail 1 run in 16.
    memories_section = out.split("\n2) ")[1].split("\n3) ")[0]
    assert "User's name is Ana" in memories_section and "User lives in Lisbon" in memories_section
    answer = next(line for line in out.splitlines() if "I remember:" in line)
    assert "Ana" in answer.split("I remember:")[1] and "Lisbon" in answer.split("I remember:")[1]
    assert "X-Memproxy-Recalled: 2" in out
    forwarded = out.split("What memproxy sent to the model:")[1]
    assert "<memories>" in forwarded and "- " in forwarded
    assert list(tmp_path.iterdir()) == [], "the demo leaves nothing behind in the working dir"
