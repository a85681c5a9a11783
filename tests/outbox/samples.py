"""The recorded small-model extraction calls (tests/data/small-models.jsonl) as test fixtures."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "small-models.jsonl"


@cache
def samples() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLES.read_text().splitlines() if line.strip()]


def sample(line: int) -> dict[str, Any]:
    found: dict[str, Any] = samples()[line]
    assert found["line"] == line
    return found
