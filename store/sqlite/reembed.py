"""Changing a database's embedding model: re-embed every memory and entity, then switch.

The new vectors go into twin tables beside the live ones, filled in committed chunks, so an
interrupted run keeps its work and a rerun embeds only what is still missing. Until the
switch every other process reads and writes the live tables with the old model; triggers
on ``memories`` and ``entities`` drop a twin vector whose text changes or whose row goes,
so nothing they do leaves the twins stale. The switch is one write transaction: embed what other writers added since
the last chunk, check that every memory and entity has exactly one new vector and that a
KNN search finds a memory by its own text, then replace the live tables and record the
new model in ``meta``. A crash anywhere before its ``COMMIT`` leaves the old index in use.
"""

from __future__ import annotations

import logging
import time

import apsw
import numpy as np

from store.analysis.embeddings import Embedder
from store.backend import Progress
from store.errors import InvalidArgument, TrimemError
from store.records import ReembedReport

from . import connection, migrations, schema
from .memories import MemoryReads
from .sql import vector_blob

log = logging.getLogger(__name__)

CHUNK = 256
"""Rows embedded and committed together: small enough that a kill loses little work, large
enough that the model runs in full batches."""

PROBE_MAX_DISTANCE = 1e-3
"""A memory's freshly embedded text must find its own stored vector at (almost) distance 0."""


def reembed(conn: apsw.Connection, embedder: Embedder, progress: Progress | None = None) -> ReembedReport:
    """Re-embed every memory and entity with ``embedder`` and make it the database's model.

    Resumes an interrupted run for the same model (an unfinished run for another model is
    discarded); refuses a database that already uses the model, discarding any unfinished
    run for another one (the way back from an interrupted change). Raises ``TrimemError``
    and switches nothing if the new index fails its checks.
    """
    started = time.perf_counter()
    recorded = schema.meta(conn)
    if recorded["embedding_model"] == embedder.name:
        with connection.write_transaction(conn):  # going back: an unfinished run for another model is dropped
            unfinished = target(conn)
            if unfinished is not None:
                drop(conn)
        dropped = "" if unfinished is None else f" (the unfinished re-embedding with '{unfinished[0]}' was discarded)"
        raise InvalidArgument(f"this database already uses the embedding model '{embedder.name}'; nothing to do{dropped}")
    resumed = _begin(conn, embedder.name, embedder.dimension)
    with connection.read_transaction(conn):
        total = count_pending(conn)
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
        counts = MemoryReads(conn).counts()
        swap_in_reembedded(conn, embedder.name, embedder.dimension)
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
        unfinished = target(conn)
        if unfinished == (model, dimension):
            return True
        if unfinished is not None:
            log.info("discarding an unfinished re-embedding with %s", unfinished[0])
            drop(conn)
        begin(conn, model, dimension)
    return False


def _embed_pending(conn: apsw.Connection, embedder: Embedder, limit: int, *, commit: bool = True) -> int:
    """Embed up to ``limit`` memories (then entities) that lack a new vector and store them;
    returns how many. The model runs outside any write lock when ``commit`` (each call then
    writes its own transaction); without it the caller's transaction holds everything."""
    rows: list[tuple[str, int, str]] = []
    with connection.read_transaction(conn):
        for table in REEMBED_SOURCES:  # memories first, then entities
            if len(rows) < limit:
                rows += [(table, key, text) for key, text in to_reembed(conn, table, limit - len(rows))]
    if not rows:
        return 0
    vectors = embedder.embed_batch([text for _, _, text in rows])
    with connection.write_transaction(conn) if commit else connection.read_transaction(conn):
        for (table, key, text), vector in zip(rows, vectors):
            put_reembedded(conn, table, key, text, vector)
    return len(rows)


def _check(conn: apsw.Connection, embedder: Embedder) -> None:
    """Refuse the switch unless every memory and entity has exactly one new vector and a KNN
    search of the new vectors finds the first memory from its freshly embedded text."""
    incomplete = problems(conn)
    if incomplete:
        found = ", ".join(f"{count} {name}" for name, count in incomplete.items())
        raise TrimemError(f"the new index is incomplete ({found}); nothing was switched: run the command again")
    first = first_memory(conn)
    if first is None:
        return
    text, scope = first
    distance = nearest_reembedded(conn, embedder.embed_batch([text])[0], scope)
    if distance is None or distance > PROBE_MAX_DISTANCE:
        raise TrimemError(
            f"a probe search of the new index did not find a memory by its own text (distance {distance}); "
            "nothing was switched: check the model, then run the command again"
        )


# --- the twin tables ---------------------------------------------------------------------

REEMBED_PREFIX = "reembed_"
REEMBED_META = ("reembed_model", "reembed_dimension")
"""``meta`` keys naming the model an unfinished re-embedding is building tables for."""


REEMBED_TRIGGERS_SQL = f"""
    -- Writers (of any trimem version) keep the twins honest: a changed text or a deleted
    -- row drops its new vector, so the next pass embeds it again or it stays gone.
    CREATE TRIGGER {REEMBED_PREFIX}memory_text AFTER UPDATE OF text ON memories BEGIN
        DELETE FROM {REEMBED_PREFIX}memory_vectors WHERE memory_rowid = old.rowid;
    END;
    CREATE TRIGGER {REEMBED_PREFIX}memory_delete AFTER DELETE ON memories BEGIN
        DELETE FROM {REEMBED_PREFIX}memory_vectors WHERE memory_rowid = old.rowid;
    END;
    CREATE TRIGGER {REEMBED_PREFIX}entity_delete AFTER DELETE ON entities BEGIN
        DELETE FROM {REEMBED_PREFIX}entity_vectors WHERE entity_id = old.id;
    END;
"""


def target(conn: apsw.Connection) -> tuple[str, int] | None:
    """The model and dimension an unfinished re-embedding was building for, if any."""
    stored = dict(conn.execute(
        f"SELECT key, value FROM meta WHERE key IN ({','.join('?' * len(REEMBED_META))})", REEMBED_META
    ).fetchall())
    if len(stored) < len(REEMBED_META):
        return None
    return stored["reembed_model"], int(stored["reembed_dimension"])


def begin(conn: apsw.Connection, model: str, dimension: int) -> None:
    """Create the twin tables and the triggers that follow other writers, and record the target."""
    conn.execute(migrations.vector_tables_sql(dimension, REEMBED_PREFIX) + REEMBED_TRIGGERS_SQL)
    conn.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?), (?, ?)",
        (REEMBED_META[0], model, REEMBED_META[1], str(dimension)),
    )


def drop(conn: apsw.Connection) -> None:
    """Remove an unfinished re-embedding's triggers, twin tables and meta rows (the live index stays)."""
    for trigger in ("memory_text", "memory_delete", "entity_delete"):
        conn.execute(f"DROP TRIGGER IF EXISTS {REEMBED_PREFIX}{trigger}")
    for table in ("memory_vectors", "entity_vectors"):
        conn.execute(f"DROP TABLE IF EXISTS {REEMBED_PREFIX}{table}")
    conn.execute(f"DELETE FROM meta WHERE key IN ({','.join('?' * len(REEMBED_META))})", REEMBED_META)


REEMBED_SOURCES = {
    "memory_vectors": ("memory_rowid", "memories", "rowid", "text"),
    "entity_vectors": ("entity_id", "entities", "id", "normalized"),
}
"""Each vector table: its key column, and the table, key and text column its vectors embed."""


def to_reembed(conn: apsw.Connection, table: str, limit: int) -> list[tuple[int, str]]:
    """(key, text) of the memories (``table`` "memory_vectors") or entities ("entity_vectors")
    without a new vector yet, in key order."""
    column, source, source_key, text_column = REEMBED_SOURCES[table]
    return conn.execute(
        f"SELECT {source_key}, {text_column} FROM {source} "
        f"WHERE {source_key} NOT IN (SELECT {column} FROM {REEMBED_PREFIX}{table}) ORDER BY {source_key} LIMIT ?",
        (limit,),
    ).fetchall()


def put_reembedded(conn: apsw.Connection, table: str, key: int, text: str, embedding: np.ndarray) -> None:
    """File the new vector of a memory (``table`` "memory_vectors") or an entity ("entity_vectors")
    in its scope, only if that row still has the text embedded: another process may have changed
    or deleted it while the model ran (an entity id may then name another entity)."""
    column, source, source_key, text_column = REEMBED_SOURCES[table]
    conn.execute(f"DELETE FROM {REEMBED_PREFIX}{table} WHERE {column} = ?", (key,))
    conn.execute(
        f"INSERT INTO {REEMBED_PREFIX}{table}({column}, embedding, user_id, agent_id, run_id) "
        f"SELECT {source_key}, ?, user_id, agent_id, run_id FROM {source} WHERE {source_key} = ? AND {text_column} = ?",
        (vector_blob(embedding), key, text),
    )


REEMBED_CHECKS: dict[str, str] = {
    "memories without a new vector":
        f"SELECT count(*) FROM memories WHERE rowid NOT IN (SELECT memory_rowid FROM {REEMBED_PREFIX}memory_vectors)",
    "new vectors of no memory":
        f"SELECT count(*) FROM {REEMBED_PREFIX}memory_vectors WHERE memory_rowid NOT IN (SELECT rowid FROM memories)",
    "entities without a new vector":
        f"SELECT count(*) FROM entities WHERE id NOT IN (SELECT entity_id FROM {REEMBED_PREFIX}entity_vectors)",
    "new vectors of no entity":
        f"SELECT count(*) FROM {REEMBED_PREFIX}entity_vectors WHERE entity_id NOT IN (SELECT id FROM entities)",
}
"""What must be zero before the twins replace the live tables; each counts offending rows."""


def count_pending(conn: apsw.Connection) -> int:
    """Memories and entities that still lack a new vector."""
    pending = ("memories without a new vector", "entities without a new vector")
    return sum(conn.execute(REEMBED_CHECKS[name]).fetchone()[0] for name in pending)


def problems(conn: apsw.Connection) -> dict[str, int]:
    """Each ``REEMBED_CHECKS`` count that is not zero."""
    found = {name: conn.execute(sql).fetchone()[0] for name, sql in REEMBED_CHECKS.items()}
    return {name: count for name, count in found.items() if count}


def first_memory(conn: apsw.Connection) -> tuple[str, list[str]] | None:
    """The text and scope (user, agent, run) of the memory with the lowest rowid, if any."""
    row = conn.execute("SELECT text, user_id, agent_id, run_id FROM memories ORDER BY rowid LIMIT 1").fetchone()
    return None if row is None else (row[0], list(row[1:]))


def nearest_reembedded(conn: apsw.Connection, embedding: np.ndarray, scope: list[str]) -> float | None:
    """The cosine distance of the nearest new memory vector in exactly this scope (a KNN search)."""
    row = conn.execute(
        f"SELECT distance FROM {REEMBED_PREFIX}memory_vectors WHERE embedding MATCH ? AND k = 1 "
        "AND user_id = ? AND agent_id = ? AND run_id = ?",
        (vector_blob(embedding), *scope),
    ).fetchone()
    return None if row is None else row[0]


def swap_in_reembedded(conn: apsw.Connection, model: str, dimension: int) -> None:
    """Replace the live vector tables with the twins and record the new model (inside the
    caller's write transaction, so every other connection sees the old index or the new one)."""
    conn.execute("DROP TABLE memory_vectors")
    conn.execute("DROP TABLE entity_vectors")
    conn.execute(migrations.vector_tables_sql(dimension))
    for table, (key, *_) in REEMBED_SOURCES.items():
        conn.execute(
            f"INSERT INTO {table}({key}, embedding, user_id, agent_id, run_id) "
            f"SELECT {key}, embedding, user_id, agent_id, run_id FROM {REEMBED_PREFIX}{table}"
        )
    # every vector changed: a process holding a user's vectors reads them again (held_vectors)
    conn.execute("INSERT OR REPLACE INTO vector_changes(user_id, memory_rowid) SELECT user_id, rowid FROM memories")
    drop(conn)
    conn.execute(
        "UPDATE meta SET value = CASE key WHEN 'embedding_model' THEN ? ELSE ? END "
        "WHERE key IN ('embedding_model', 'embedding_dimension')",
        (model, str(dimension)),
    )
