"""Heavier versions of the reliability scenarios: ``TRIMEM_STRESS=1 pytest tests/stress -s``.

Same scenarios as ``tests/test_reliability.py`` (see ``scenarios.py``), sized up: 200
SIGKILLs, 8 processes x 200 writes. The hypothesis tests scale up under the same flag.
"""

from __future__ import annotations

import os

import pytest
from forkserver import ForkServer
from scenarios import concurrent_writers, crash_cycles

pytestmark = [
    pytest.mark.stress,
    pytest.mark.skipif(os.environ.get("TRIMEM_STRESS") != "1", reason="set TRIMEM_STRESS=1 for stress runs"),
]

KILLS = int(os.environ.get("TRIMEM_STRESS_KILLS", "200"))
PROCESSES = int(os.environ.get("TRIMEM_STRESS_PROCESSES", "8"))
WRITES = int(os.environ.get("TRIMEM_STRESS_WRITES", "200"))


@pytest.mark.only_on("sqlite")  # kills land inside SQLite's own transactions (its WAL hook)
def test_crash_consistency_stress(fork_server: ForkServer, config, embedder, nlp) -> None:
    stats = crash_cycles(fork_server, config, embedder, nlp, kills=KILLS, seed=11, max_delay=1.5)
    print(f"\ncrash (stress): {stats}")
    assert stats.kills == KILLS and stats.kills_inside_transaction > 0


def test_concurrent_writers_stress(fork_server: ForkServer, config, embedder, nlp) -> None:
    stats = concurrent_writers(fork_server, config, embedder, nlp, processes=PROCESSES, writes=WRITES)
    print(f"\nwriters (stress): {stats}")
    assert stats.stored == stats.acknowledged == PROCESSES * WRITES
