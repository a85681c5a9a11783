"""``bench/extraction_quality.py`` in replay mode: the scripted extractor and the recorded small-model
answers go through the real worker and guards; the scores that must hold whatever the model does
are asserted (no secret stored, the name never deleted, the cut-off loop ends dead, not silent)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a subprocess that imports LiteLLM and runs ~40 extractions

BENCH = Path(__file__).resolve().parent.parent / "bench" / "extraction_quality.py"


@pytest.mark.timeout(600)
def test_replayed_and_scripted_extraction_scores() -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, str(BENCH), "--show"], capture_output=True, text=True, timeout=540,
                          env=env, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout)["runs"]
    small, larger = (
        runs["replay:Qwen2.5-Coder-0.5B-Instruct"]["maya"],
        runs["replay:Qwen2.5-Coder-1.5B-Instruct"]["maya"],
    )
    scripted = runs["scripted"]
    for scores in (small, larger, scripted["maya"], scripted["leo"]):
        assert scores["secrets_stored"] == 0 and scores["relative_dates_stored"] == 0
        assert all(len(text) <= 300 for text in scores["final_memories"])
    # 0.5B: its UPDATEs rewrote the name memory into another memory's text; nothing was deleted.
    assert small["refused"]["collision"] >= 1 and any("Maya" in t for t in small["final_memories"])
    # 1.5B: the password was offered in five answers and refused each time; the repetition loop
    # (five identical cut-off answers) is one dead job, visible, not a silent "no memories".
    assert larger["refused"]["secret"] >= 1 and larger["dead_jobs"] == 1
    assert larger["refused"]["prompt_example"] >= 1 and larger["refused"]["question"] >= 1
    assert larger["recall"] >= 0.5  # run-ons split into facts instead of one ever-growing memory
    # The rule-based stand-in: the change and the retraction applied, secrets refused, no junk.
    leo = scripted["leo"]
    assert (leo["updates_applied"], leo["retractions_applied"], leo["junk_stored"]) == (1, 1, 0)
    assert leo["precision"] == 1.0
