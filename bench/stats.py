"""Latency summaries for the bench scripts: one percentile rule for all of them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def percentiles_ms(
    seconds: Sequence[float], points: Sequence[int] = (50, 95, 99), digits: int = 3
) -> dict[str, float]:
    """``{"p50_ms": …, …}`` of samples taken in seconds (numpy's linear interpolation)."""
    if not seconds:
        return {}
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    return {f"p{p}_ms": round(float(np.percentile(ms, p)), digits) for p in points}
