"""Durations measured in seconds, summarised as the benchmarks report them: p50 and p95 in milliseconds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def percentiles(values: Sequence[float]) -> tuple[float, float]:
    """p50 and p95 in milliseconds of durations in seconds."""
    p50, p95 = np.percentile(np.asarray(values) * 1000.0, [50, 95])
    return float(p50), float(p95)


@dataclass(frozen=True)
class Latency:
    """Client-side wall time of one kind of call, in milliseconds."""

    p50_ms: float
    p95_ms: float
    calls: int

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        p50, p95 = percentiles(seconds)
        return cls(p50, p95, len(seconds))
