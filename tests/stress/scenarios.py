"""The crash and multi-writer scenarios, sized by the caller.

``tests/test_reliability.py`` runs them small enough for CI; ``tests/stress/`` runs
them large under ``TRIMEM_STRESS=1``. Both verify through the library: a fresh
``Engine`` on the file after every kill, ``Engine.check`` and ``Engine.get``.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass

from forkserver import ForkServer, Worker, memory_text

from store import Config, Engine


def fullest_check(engine: Engine) -> list:
    """``Engine.check`` with all its backend has: the entity analysis run again too, where the
    backend can (``deep_check``; PostgreSQL refuses it)."""
    return engine.check(deep="deep_check" in engine.capabilities)


@dataclass(frozen=True)
class CrashStats:
    kills: int
    kills_with_add_in_flight: int
    kills_inside_transaction: int
    acknowledged: int
    stored: int


def open_and_verify(config: Config, embedder, nlp, acked: set[str], user: str, deep: bool = False) -> int:
    """Open the file anew (recovering its WAL), assert every invariant and every acked id; return the count."""
    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        violations = engine.check(deep=deep)
        assert violations == [], violations[:20]
        stored = {m.id for m in _all(engine, user)}
        lost = acked - stored
        assert not lost, f"{len(lost)} acknowledged memories lost, e.g. {sorted(lost)[:3]}"
        return len(stored)


def _all(engine: Engine, user: str) -> list:
    memories, offset = [], 0
    while page := engine.list(user_id=user, limit=100, offset=offset, show_expired=True):
        memories += page
        offset += len(page)
    return memories


def crash_cycles(
    server: ForkServer, config: Config, embedder, nlp, *, kills: int, seed: int, max_delay: float = 0.6
) -> CrashStats:
    """Fork a writer, SIGKILL it, reopen and verify the file; ``kills`` times.

    Half the cycles the test kills the writer after a random delay (mostly while the
    models run, sometimes while it opens the file); the other half the writer kills
    itself at a random row write inside a transaction, or right after a commit.
    """
    rng = random.Random(seed)
    user = "crash"
    acked: set[str] = set()
    in_flight = inside = 0
    stored = 0
    for cycle in range(kills):
        when = "inside" if cycle % 2 else "timer"
        worker: Worker = server.start("crash", config.database, user, seed * 1000 + cycle, when)
        if when == "timer":
            server.drain(rng.uniform(0.0, max_delay))
            try:
                os.kill(worker.pid, signal.SIGKILL)
            except ProcessLookupError:  # it died on its own: the status check below says why
                pass
        server.wait_dead(worker)
        inside += worker.mid_transaction
        assert os.WIFSIGNALED(worker.status) and os.WTERMSIG(worker.status) == signal.SIGKILL, (
            f"worker ended by itself (status {worker.status}) instead of being killed:\n{server.stderr()}"
        )
        in_flight += worker.in_flight
        acked.update(worker.acked)
        stored = open_and_verify(config, embedder, nlp, acked, user, deep=cycle == kills - 1)
    return CrashStats(kills, in_flight, inside, len(acked), stored)


@dataclass(frozen=True)
class WriterStats:
    processes: int
    writes_each: int
    acknowledged: int
    stored: int
    seconds_writing: float


def concurrent_writers(
    server: ForkServer, config: Config, embedder, nlp, *, processes: int, writes: int
) -> WriterStats:
    """``processes`` workers, each with its own connection, add ``writes`` memories at once to one
    shared scope (so they also race for the same entities) and search meanwhile."""
    user = "shared"
    started = time.monotonic()
    database = config.store.database_url or str(config.database)
    workers = [server.start("write", database, user, writes, n) for n in range(processes)]
    for worker in workers:
        server.wait_dead(worker, timeout=60.0 + writes * processes * 2.0)
        assert worker.status == 0 and worker.done, f"worker {worker.pid} failed (status {worker.status}):\n{server.stderr()}"
        assert len(worker.acked) == writes
    acked = [memory_id for worker in workers for memory_id in worker.acked]
    seconds = round(time.monotonic() - started, 1)
    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        assert fullest_check(engine) == []
        stored = _all(engine, user)
        assert sorted(m.id for m in stored) == sorted(acked), "lost or duplicated writes"
        expected = sorted(memory_text(f"{user}-{n}", i) for n in range(processes) for i in range(writes))
        assert sorted(m.text for m in stored) == expected
        for memory in stored:
            hits = engine.search(memory.text, user_id=user, top_k=3)
            assert memory.id in [hit.memory.id for hit in hits], f"{memory.text!r} is not searchable"
    return WriterStats(processes, writes, len(acked), len(stored), seconds)
