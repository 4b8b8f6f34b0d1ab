"""One benchmark scope, grown to a size and searched: the build in batches, warm searches timed
by stage (``bench/stages.py``), and the floors beside them measured in the same run.

``speed``, ``ranking_cost`` and ``ui`` grow their scope here, so a figure at a size means the
same scope in each of them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from bench import sqlite_file, timing
from bench.stages import ADD_STAGES, SEARCH_STAGES, StageClock
from store import Engine
from store.engine import MemoryInput
from store.ranking import scoring
from store.sqlite.held_vectors import best_first, similarities

SCOPE = "speed"
TOP_K = 10
BUILD_CHUNK = 2000
SEARCH_ORDER = (
    "prepare (NLP, the query embedding begun)",
    "query embedding",
    "lemmatize + entities",
    "vector KNN ∥ keywords",
    "keywords (BM25)",
    "entity lookup",
    "fusion + assembly",
)


@dataclass
class SearchRun:
    """Latencies at one size, in seconds per query, by stage."""

    size: int
    total: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)
    forward_pass: list[float] = field(default_factory=list)
    numpy_topk: list[float] = field(default_factory=list)
    file_bytes: int = 0
    build_seconds: float = 0.0
    build_stages: dict[str, float] = field(default_factory=dict)
    built: int = 0
    model_texts: int = 0
    overfetch: int = 0
    """The KNN's over-fetch at ``TOP_K`` under the searching engine's configuration: the floor's k."""


def fill(engine: Engine, texts: Sequence[str]) -> None:
    """Add texts to the benchmark scope through ``Engine.add_many``, ``BUILD_CHUNK`` at a time."""
    for lo in range(0, len(texts), BUILD_CHUNK):
        engine.add_many([MemoryInput(text) for text in texts[lo : lo + BUILD_CHUNK]], user_id=SCOPE)


def grow(engine: Engine, texts: Sequence[str], run: SearchRun) -> None:
    """Add texts to the benchmark scope in batches, timing embed / NLP / the rest (SQL)."""
    clock = StageClock()
    started = time.perf_counter()
    with clock.active(engine, ADD_STAGES):
        fill(engine, texts)
    run.build_seconds = time.perf_counter() - started
    run.build_stages = clock.reset()
    run.built = len(texts)


def measure_search(engine: Engine, questions: Sequence[str], run: SearchRun, warmup: int = 10) -> None:
    """Warm searches, each timed whole and by stage (the rest is fusion + assembly)."""
    clock = StageClock()
    for question in questions[:warmup]:
        engine.search(question, user_id=SCOPE, top_k=TOP_K)
    stages: dict[str, list[float]] = {name: [] for name in SEARCH_ORDER}
    with clock.active(engine, SEARCH_STAGES):
        for question in questions:
            clock.reset()
            started = time.perf_counter()
            engine.search(question, user_id=SCOPE, top_k=TOP_K)
            total = time.perf_counter() - started
            parts = clock.reset()
            run.total.append(total)
            for name in SEARCH_ORDER[:-1]:
                stages[name].append(parts.get(name, 0.0))
            stages["fusion + assembly"].append(clock.rest(total, parts))
    run.stages = stages


def stored_vectors(engine: Engine) -> np.ndarray:
    """Every vector of the benchmark scope, read back from ``memory_vectors``."""
    with sqlite_file.reading(engine.backend.path) as view:
        rows = view.conn.execute("SELECT embedding FROM memory_vectors WHERE user_id = ?", (SCOPE,)).fetchall()
    return np.frombuffer(b"".join(row[0] for row in rows), dtype=np.float32).reshape(len(rows), -1)


def exact_top_k(vectors: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    """The rows of the ``k`` vectors nearest ``query`` (unit vectors: largest dot product), nearest
    first: numpy's exact KNN as the engine takes it over held vectors (``held_vectors.similarities``
    and ``best_first``), the floor of a vector search."""
    return best_first(similarities(vectors, query), k)


def measure_floors(engine: Engine, questions: Sequence[str], run: SearchRun) -> None:
    """One model forward pass per query; numpy exact top-k (the KNN's over-fetch) over the stored vectors."""
    vectors = stored_vectors(engine)
    options = engine.config.search
    run.overfetch = scoring.internal_limit(TOP_K, options.overfetch_factor, options.overfetch_minimum)
    k = run.overfetch
    for question in questions:
        started = time.perf_counter()
        (query,) = engine.embedder.embed_batch([question])
        run.forward_pass.append(time.perf_counter() - started)
        started = time.perf_counter()
        exact_top_k(vectors, query, k)
        run.numpy_topk.append(time.perf_counter() - started)


def floor_ms(run: SearchRun) -> float:
    """The unavoidable work of one search, ms p50: one forward pass for the query plus an exact top-k."""
    return timing.percentiles(run.forward_pass)[0] + timing.percentiles(run.numpy_topk)[0]
