"""Time the stages of an engine call from outside, without changing the engine.

The engine has no timing hook, so while a ``StageClock`` is active it replaces a few
functions (``store.ranking.retrieval.entity_boosts``, the SQLite snapshot's signal reads such as
``store.sqlite.signals.SignalReads.first_signals``, …) and the model objects' methods with
wrappers that add their wall time to a named stage, then puts the originals back. The
engine's own code runs unchanged: stages are the real calls of one real ``Engine.search``
/ ``Engine.add_many``, and whatever is not inside a wrapped function (validation, fusion,
row assembly, SQL writes) is the rest.

A ``StoreClock`` times, on either backend, the part of a search spent in the store: it stands in for
the engine's backend and times each snapshot and each read asked of it.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from store.backend import Backend
from store.engine import Engine
from store.ranking import retrieval
from store.sqlite.signals import SignalReads

SEARCH_STAGES = {
    "prepare (NLP, the query embedding begun)": (retrieval, "prepare"),
    "query embedding": ("embedder", "embed_batch"),
    "lemmatize + entities": ("nlp", "analyze_query"),
    "vector KNN ∥ keywords": (SignalReads, "first_signals"),
    "keywords (BM25)": (SignalReads, "bm25_memories"),
    "entity lookup": (retrieval, "entity_boosts"),
    "union distances": (SignalReads, "distances_for"),
}
"""Stage name → (object, attribute) timed during a search; ``"embedder"``/``"nlp"`` mean the engine's.

``prepare`` holds the NLP analysis, while the query embeds on the engine's side thread; the
embedding is waited for in ``first_signals``, once its keyword read is done (for a user whose
vectors the process holds, the keyword read runs beside the KNN), so the query embedding's own
time overlaps both stages."""

ADD_STAGES = {
    "models": (Engine, "_analyse_and_embed"),
    "embed": ("embedder", "embed_batch"),
    "NLP": ("nlp", "analyze_batch"),
}
"""Stages of a write: ``models`` holds embed and NLP, which overlap inside it; the remainder
is SQL (hash look-ups, inserts, entity linking, history)."""

PARALLEL_PARTS = ("query embedding", "lemmatize + entities", "keywords (BM25)", "embed", "NLP")
"""Stages that run inside another (``prepare``, ``models``) and overlap each other."""


class StageClock:
    """Accumulates wall time per stage for the calls made while it is active."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def rest(self, total: float, parts: dict[str, float]) -> float:
        """What the call spent outside every timed stage (overlapping parts counted once, in their parent)."""
        return total - sum(seconds for name, seconds in parts.items() if name not in PARALLEL_PARTS)

    def reset(self) -> dict[str, float]:
        """This round's times, and start a new round."""
        seconds, self.seconds = dict(self.seconds), defaultdict(float)
        return seconds

    def _wrap(self, stage: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[stage] += time.perf_counter() - started

        return timed

    @contextlib.contextmanager
    def active(self, engine: Any, stages: dict[str, tuple[Any, str]]) -> Iterator[StageClock]:
        """Wrap each stage's function for the duration of the block."""
        originals = []
        try:
            for stage, (owner, name) in stages.items():
                target = getattr(engine, owner) if isinstance(owner, str) else owner
                original = getattr(target, name)
                had_own = isinstance(owner, str) and name in vars(target)
                originals.append((target, name, original, isinstance(owner, str) and not had_own))
                setattr(target, name, self._wrap(stage, original))
            yield self
        finally:
            for target, name, original, instance_attribute in reversed(originals):
                if instance_attribute:
                    delattr(target, name)  # uncover the class's method again
                else:
                    setattr(target, name, original)


class StoreClock:
    """A backend as an engine uses it, that adds up what the engine spends in the store: opening and
    closing each snapshot, and each read the engine asks of it (a read's own reads are inside it;
    a callable it is handed, such as the query's embedding still computing, is timed out of it)."""

    def __init__(self, backend: Backend, timer: Callable[[], float] = time.perf_counter) -> None:
        self.backend = backend
        self.timer = timer
        self.spent = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Any]:
        started = self.timer()
        with self.backend.snapshot() as view:
            self.spent += self.timer() - started
            yield TimedView(view, self)
            started = self.timer()
        self.spent += self.timer() - started

    def timed(self, call: Callable[..., Any], sign: float = 1.0) -> Callable[..., Any]:
        """``call``, its time added to ``spent`` (``sign`` -1: taken out of it)."""
        def run(*args: Any, **kwargs: Any) -> Any:
            started = self.timer()
            try:
                return call(*args, **kwargs)
            finally:
                self.spent += sign * (self.timer() - started)
        return run


class TimedView:
    """A snapshot whose reads a ``StoreClock`` times."""

    def __init__(self, view: Any, clock: StoreClock) -> None:
        self._view, self._clock = view, clock

    def __getattr__(self, name: str) -> Any:
        read = getattr(self._view, name)
        if not callable(read):
            return read
        clock = self._clock

        def timed(*args: Any, **kwargs: Any) -> Any:
            handed = [clock.timed(arg, -1.0) if callable(arg) else arg for arg in args]
            return clock.timed(read)(*handed, **kwargs)
        return timed


@contextlib.contextmanager
def store_clocks(engines: dict[str, Engine]) -> Iterator[dict[str, StoreClock]]:
    """Each engine reading through a ``StoreClock`` of its backend, until the block ends."""
    clocks = {name: StoreClock(engine.backend) for name, engine in engines.items()}
    for name, engine in engines.items():
        engine.backend = clocks[name]
    try:
        yield clocks
    finally:
        for name, engine in engines.items():
            engine.backend = clocks[name].backend
