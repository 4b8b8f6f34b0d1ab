"""Changing a database's embedding model: re-embed every memory and entity, then switch.

The new vectors go into twin tables beside the live ones (``store.db``, section
"re-embedding"), filled in committed chunks, so an interrupted run keeps its work and a
rerun embeds only what is still missing. Until the switch every other process reads and
writes the live tables with the old model; triggers on ``memories`` and ``entities``
drop a twin vector whose text changes or whose row goes, so nothing they do leaves the
twins stale. The switch is one write transaction: embed what other writers added since
the last chunk, check that every memory and entity has exactly one new vector and that a
KNN search finds a memory by its own text, then replace the live tables and record the
new model in ``meta``. A crash anywhere before its ``COMMIT`` leaves the old index in use.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import apsw

from . import connection, db
from .embeddings import Embedder
from .errors import InvalidArgument, TrimemError

log = logging.getLogger(__name__)

CHUNK = 256
"""Rows embedded and committed together: small enough that a kill loses little work, large
enough that the model runs in full batches."""

PROBE_MAX_DISTANCE = 1e-3
"""A memory's freshly embedded text must find its own stored vector at (almost) distance 0."""

Progress = Callable[[int, int], None]
"""Called after each committed chunk with (vectors stored so far, vectors to store in all)."""


@dataclass(frozen=True)
class ReembedReport:
    """What a completed re-embedding did: the models before and after, the rows now indexed
    with the new model, and how many vectors this run computed (fewer than memories plus
    entities when it resumed an interrupted run)."""

    model: str
    dimension: int
    previous_model: str
    previous_dimension: int
    memories: int
    entities: int
    embedded: int
    resumed: bool
    seconds: float


def reembed(conn: apsw.Connection, embedder: Embedder, progress: Progress | None = None) -> ReembedReport:
    """Re-embed every memory and entity with ``embedder`` and make it the database's model.

    Resumes an interrupted run for the same model (an unfinished run for another model is
    discarded); refuses a database that already uses the model, discarding any unfinished
    run for another one (the way back from an interrupted change). Raises ``TrimemError``
    and switches nothing if the new index fails its checks.
    """
    started = time.perf_counter()
    recorded = connection.meta(conn)
    if recorded["embedding_model"] == embedder.name:
        with connection.write_transaction(conn):  # going back: an unfinished run for another model is dropped
            unfinished = db.reembed_target(conn)
            if unfinished is not None:
                db.drop_reembed(conn)
        dropped = "" if unfinished is None else f" (the unfinished re-embedding with '{unfinished[0]}' was discarded)"
        raise InvalidArgument(f"this database already uses the embedding model '{embedder.name}'; nothing to do{dropped}")
    resumed = _begin(conn, embedder.name, embedder.dimension)
    with connection.read_transaction(conn):
        total = db.count_to_reembed(conn)
    embedded = 0
    while stored := _embed_pending(conn, embedder, CHUNK):  # each chunk commits on its own
        embedded += stored
        if progress is not None:
            progress(min(embedded, total), total)
    with connection.write_transaction(conn):
        # Under the write lock nobody else writes: what other writers added since the last
        # chunk is embedded here (usually nothing, or a few rows), then checked and swapped.
        while stored := _embed_pending(conn, embedder, CHUNK, commit=False):
            embedded += stored
        _check(conn, embedder)
        counts = db.counts(conn)
        db.swap_in_reembedded(conn, embedder.name, embedder.dimension)
    log.debug("re-embedded %s memories and %s entities with %s", counts["memories"], counts["entities"], embedder.name)
    return ReembedReport(
        model=embedder.name,
        dimension=embedder.dimension,
        previous_model=recorded["embedding_model"],
        previous_dimension=int(recorded["embedding_dimension"]),
        memories=counts["memories"],
        entities=counts["entities"],
        embedded=embedded,
        resumed=resumed,
        seconds=round(time.perf_counter() - started, 3),
    )


def _begin(conn: apsw.Connection, model: str, dimension: int) -> bool:
    """Set up the twin tables for ``model``, or keep an unfinished run's: True when resuming."""
    with connection.write_transaction(conn):
        target = db.reembed_target(conn)
        if target == (model, dimension):
            return True
        if target is not None:
            log.info("discarding an unfinished re-embedding with %s", target[0])
            db.drop_reembed(conn)
        db.begin_reembed(conn, model, dimension)
    return False


def _embed_pending(conn: apsw.Connection, embedder: Embedder, limit: int, *, commit: bool = True) -> int:
    """Embed up to ``limit`` memories (then entities) that lack a new vector and store them;
    returns how many. The model runs outside any write lock when ``commit`` (each call then
    writes its own transaction); without it the caller's transaction holds everything."""
    rows: list[tuple[str, int, str]] = []
    with connection.read_transaction(conn):
        for table in db.REEMBED_SOURCES:  # memories first, then entities
            if len(rows) < limit:
                rows += [(table, key, text) for key, text in db.to_reembed(conn, table, limit - len(rows))]
    if not rows:
        return 0
    vectors = embedder.embed_batch([text for _, _, text in rows])
    with connection.write_transaction(conn) if commit else connection.read_transaction(conn):
        for (table, key, text), vector in zip(rows, vectors):
            db.put_reembedded(conn, table, key, text, vector)
    return len(rows)


def _check(conn: apsw.Connection, embedder: Embedder) -> None:
    """Refuse the switch unless every memory and entity has exactly one new vector and a KNN
    search of the new vectors finds the first memory from its freshly embedded text."""
    problems = db.reembed_problems(conn)
    if problems:
        found = ", ".join(f"{count} {name}" for name, count in problems.items())
        raise TrimemError(f"the new index is incomplete ({found}); nothing was switched: run the command again")
    first = db.first_memory(conn)
    if first is None:
        return
    text, scope = first
    distance = db.nearest_reembedded(conn, embedder.embed_batch([text])[0], scope)
    if distance is None or distance > PROBE_MAX_DISTANCE:
        raise TrimemError(
            f"a probe search of the new index did not find a memory by its own text (distance {distance}); "
            "nothing was switched: check the model, then run the command again"
        )
