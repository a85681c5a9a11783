"""``bench/retrieval_quality.py`` runs end to end on its committed dataset (hash embedder: fast).

The dataset must be what ``generate.py`` writes (it is deterministic), and the bench's
report must hold what the README's table is built from. The one figure asserted is a
behaviour, not a speed: with the evidence gate, small talk gets nothing injected.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data" / "retrieval"


@pytest.mark.timeout(300)
def test_dataset_is_reproducible_and_the_bench_reports_every_figure(tmp_path: Path) -> None:
    files = [
        folder / name
        for folder in (DATA, DATA / "hard")
        for name in ("conversations.jsonl", "questions.jsonl")
    ]
    before = {path: path.read_bytes() for path in files}
    for flags in ([], ["--hard"]):
        subprocess.run(
            [sys.executable, str(DATA / "generate.py"), *flags], check=True, capture_output=True, timeout=60
        )
    assert {path: path.read_bytes() for path in files} == before

    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "retrieval_quality.py"), "--embedders", "hash",
         "--min-scores", "0.1", "--out", str(out)],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["dataset"] == {"variant": "default", "conversations": 6, "questions": 366, "turns": 732}
    hash_report = report["embedders"]["hash"]
    assert hash_report["memories"] == 732
    legacy, gated = hash_report["pipelines"]["legacy"], hash_report["pipelines"]["gated@0.1"]
    # The second hop finds what the name in a first result links to (multi-hop questions).
    assert gated["recall@10_by_type"]["multi-hop"] > legacy["recall@10_by_type"]["multi-hop"]
    for pipeline in (legacy, gated):
        assert {"recall@1", "recall@10", "recall@25", "injected_precision", "tokens_per_request"} <= set(
            pipeline
        )
    assert legacy["small_talk_injection_rate"] == 100.0  # before the gate: "hi" got every memory
    assert gated["small_talk_injection_rate"] == 0.0
    assert "| hash | gated@0.1 |" in done.stdout
