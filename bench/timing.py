"""Durations measured in seconds, summarised as the benchmarks report them: p50 and p95 in milliseconds."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RUN_TIMEOUT_S = 300
"""The longest one timed command may take before the benchmark fails."""


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


def run_timed(command: Sequence[str], env: dict[str, str], stdin: str = "") -> tuple[float, str]:
    """Wall seconds of one run of ``command`` to its exit (it must succeed), and what it printed."""
    started = time.perf_counter()
    done = subprocess.run(command, input=stdin, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          check=True)
    return time.perf_counter() - started, done.stdout
