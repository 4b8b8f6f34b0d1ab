"""Every row and query statement trimem runs: memories, entities, history, signals, probes.

Opening files, connection settings, transactions and the schema live in
``store.connection``; nothing outside these two modules writes SQL. Values are always bound parameters; the only
text spliced into SQL is identifiers chosen here and filter SQL from ``store.filters``,
which binds its values too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import apsw
import numpy as np

from .errors import InvalidArgument
from .validation import SCOPE_KEYS

KNN_LIMIT = 4096
"""sqlite-vec refuses k above 4096."""

MEMORY_COLUMNS = (
    "rowid, id, text, hash, user_id, agent_id, run_id, actor_id, role, metadata, "
    "created_at, updated_at, expiration_date"
)


# --- rows ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryRow:
    """One ``memories`` row as stored (scope ids are '' when unset)."""

    rowid: int
    id: str
    text: str
    hash: str
    user_id: str
    agent_id: str
    run_id: str
    actor_id: str | None
    role: str | None
    metadata: dict[str, Any]
    created_at: str
    updated_at: str
    expiration_date: str | None


def _memory_row(values: Sequence[Any]) -> MemoryRow:
    *head, metadata, created_at, updated_at, expiration = values
    return MemoryRow(*head, json.loads(metadata), created_at, updated_at, expiration)


def vector_blob(vector: np.ndarray) -> bytes:
    """float32 bytes, the layout sqlite-vec reads."""
    return np.asarray(vector, dtype=np.float32).tobytes()


def scope_sql(scope: dict[str, str], alias: str = "") -> tuple[str, list[str]]:
    """Equality on each scope key the caller named; unnamed keys match anything."""
    prefix = f"{alias}." if alias else ""
    clauses = [f"{prefix}{key} = ?" for key in SCOPE_KEYS if scope.get(key)]
    return " AND ".join(clauses) or "1", [scope[key] for key in SCOPE_KEYS if scope.get(key)]


# --- memory writes --------------------------------------------------------------------


@dataclass(frozen=True)
class NewMemory:
    """Everything one insert needs, computed before the transaction starts."""

    id: str
    text: str
    text_lemmatized: str
    hash: str
    scope: dict[str, str]
    actor_id: str | None
    role: str | None
    metadata: dict[str, Any]
    created_at: str
    expiration_date: str | None
    embedding: np.ndarray
    updated_at: str | None = None
    """``None``: the same as ``created_at`` (a new memory); an import keeps its own."""
    gap_before: bool = False
    """Leave one rowid free before it, so it is no neighbour (``adjacent_memories``) of the
    memory stored just before: an import keeps apart memories that were apart."""


def find_by_hash(conn: apsw.Connection, scope: dict[str, str], text_hash: str) -> MemoryRow | None:
    """The memory with this normalised-text hash in exactly this scope, if any."""
    row = conn.execute(
        f"SELECT {MEMORY_COLUMNS} FROM memories "
        "WHERE user_id = ? AND agent_id = ? AND run_id = ? AND hash = ?",
        (*(scope.get(key, "") for key in SCOPE_KEYS), text_hash),
    ).fetchone()
    return _memory_row(row) if row else None


def insert_memory(conn: apsw.Connection, memory: NewMemory) -> int:
    """Insert the memory row (its FTS row follows by trigger) and its vector; return the rowid."""
    scope = [memory.scope.get(key, "") for key in SCOPE_KEYS]
    rowid = conn.execute("SELECT coalesce(max(rowid), 0) + 2 FROM memories").fetchone()[0] if memory.gap_before else None
    conn.execute(
        "INSERT INTO memories(rowid, id, text, text_lemmatized, hash, user_id, agent_id, run_id, actor_id, "
        "role, metadata, created_at, updated_at, expiration_date) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            rowid,
            memory.id,
            memory.text,
            memory.text_lemmatized,
            memory.hash,
            *scope,
            memory.actor_id,
            memory.role,
            json.dumps(memory.metadata, ensure_ascii=False),
            memory.created_at,
            memory.updated_at or memory.created_at,
            memory.expiration_date,
        ),
    )
    rowid = conn.last_insert_rowid()
    put_memory_vector(conn, rowid, memory.embedding, memory.scope)
    return rowid


def delete_memory_vector(conn: apsw.Connection, rowid: int) -> None:
    """Drop one memory vector (orphaned, or about to be rewritten)."""
    conn.execute("DELETE FROM memory_vectors WHERE memory_rowid = ?", (rowid,))


def put_memory_vector(conn: apsw.Connection, rowid: int, embedding: np.ndarray, scope: dict[str, str]) -> None:
    """Insert or replace a memory's vector (vec0 has no upsert, so delete first)."""
    delete_memory_vector(conn, rowid)
    conn.execute(
        "INSERT INTO memory_vectors(memory_rowid, embedding, user_id, agent_id, run_id) VALUES (?, ?, ?, ?, ?)",
        (rowid, vector_blob(embedding), *(scope.get(key, "") for key in SCOPE_KEYS)),
    )


def update_memory_text(
    conn: apsw.Connection, rowid: int, *, text: str, text_lemmatized: str, text_hash: str, updated_at: str
) -> None:
    """Rewrite a memory's text; the FTS trigger re-indexes the lemmatized text."""
    conn.execute(
        "UPDATE memories SET text = ?, text_lemmatized = ?, hash = ?, updated_at = ? WHERE rowid = ?",
        (text, text_lemmatized, text_hash, updated_at, rowid),
    )


def update_memory_metadata(conn: apsw.Connection, rowid: int, metadata: dict[str, Any], updated_at: str) -> None:
    """Replace a memory's metadata; leaves the text and its index alone."""
    conn.execute(
        "UPDATE memories SET metadata = ?, updated_at = ? WHERE rowid = ?",
        (json.dumps(metadata, ensure_ascii=False), updated_at, rowid),
    )


def update_memory_expiration(conn: apsw.Connection, rowid: int, expiration_date: str | None, updated_at: str) -> None:
    """Set or clear (``None``) a memory's expiration date."""
    conn.execute(
        "UPDATE memories SET expiration_date = ?, updated_at = ? WHERE rowid = ?", (expiration_date, updated_at, rowid)
    )


def delete_memory_row(conn: apsw.Connection, rowid: int) -> None:
    """Delete a memory, its vector, its FTS row (trigger) and links (cascade).

    Entities it leaves unlinked stay until the caller runs ``delete_orphan_entities``,
    once per transaction: a scan per deleted row made ``delete_all`` O(rows × entities).
    """
    delete_memory_vector(conn, rowid)
    conn.execute("DELETE FROM memories WHERE rowid = ?", (rowid,))


def add_history(
    conn: apsw.Connection,
    memory: MemoryRow | NewMemory,
    event: str,
    *,
    old_text: str | None,
    new_text: str | None,
    old_metadata: dict[str, Any] | None,
    new_metadata: dict[str, Any] | None,
    at: str,
) -> None:
    """Record one ADD / UPDATE / DELETE / RESTORE, with the scope so history stays scoped after a delete."""
    scope = memory.scope if isinstance(memory, NewMemory) else {k: getattr(memory, k) for k in SCOPE_KEYS}
    conn.execute(
        "INSERT INTO history(memory_id, event, old_text, new_text, old_metadata, new_metadata, "
        "user_id, agent_id, run_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            memory.id,
            event,
            old_text,
            new_text,
            None if old_metadata is None else json.dumps(old_metadata, ensure_ascii=False),
            None if new_metadata is None else json.dumps(new_metadata, ensure_ascii=False),
            *(scope.get(key, "") for key in SCOPE_KEYS),
            at,
        ),
    )


# --- entities -------------------------------------------------------------------------


def find_entity_exact(conn: apsw.Connection, scope: dict[str, str], normalized: str) -> int | None:
    """The id of the entity with this normalised text in exactly this scope."""
    row = conn.execute(
        "SELECT id FROM entities WHERE user_id = ? AND agent_id = ? AND run_id = ? AND normalized = ?",
        (*(scope.get(key, "") for key in SCOPE_KEYS), normalized),
    ).fetchone()
    return row[0] if row else None


def nearest_entity(conn: apsw.Connection, scope: dict[str, str], embedding: np.ndarray) -> tuple[int, float] | None:
    """The closest entity in exactly this scope and its cosine distance."""
    row = conn.execute(
        "SELECT entity_id, distance FROM entity_vectors WHERE embedding MATCH ? AND k = 1 "
        "AND user_id = ? AND agent_id = ? AND run_id = ?",
        (vector_blob(embedding), *(scope.get(key, "") for key in SCOPE_KEYS)),
    ).fetchone()
    return (row[0], row[1]) if row else None


def insert_entity(
    conn: apsw.Connection, scope: dict[str, str], text: str, normalized: str, entity_type: str, embedding: np.ndarray
) -> int:
    """Create an entity and its vector in a scope; return its id."""
    values = [scope.get(key, "") for key in SCOPE_KEYS]
    conn.execute(
        "INSERT INTO entities(user_id, agent_id, run_id, text, normalized, entity_type) VALUES (?, ?, ?, ?, ?, ?)",
        (*values, text, normalized, entity_type),
    )
    entity_id = conn.last_insert_rowid()
    put_entity_vector(conn, entity_id, embedding)
    return entity_id


def delete_entity_vector(conn: apsw.Connection, entity_id: int) -> None:
    """Drop one entity vector (orphaned, or about to be rewritten)."""
    conn.execute("DELETE FROM entity_vectors WHERE entity_id = ?", (entity_id,))


def put_entity_vector(conn: apsw.Connection, entity_id: int, embedding: np.ndarray) -> None:
    """Write an entity's vector with the entity's own scope."""
    delete_entity_vector(conn, entity_id)
    conn.execute(
        "INSERT INTO entity_vectors(entity_id, embedding, user_id, agent_id, run_id) "
        "SELECT id, ?, user_id, agent_id, run_id FROM entities WHERE id = ?",
        (vector_blob(embedding), entity_id),
    )


def link_entity(conn: apsw.Connection, memory_rowid: int, entity_id: int) -> None:
    """Link a memory to an entity (idempotent)."""
    conn.execute(
        "INSERT OR IGNORE INTO memory_entities(memory_rowid, entity_id) VALUES (?, ?)", (memory_rowid, entity_id)
    )


def unlink_entities(conn: apsw.Connection, memory_rowid: int) -> None:
    """Drop a memory's entity links (the caller then runs ``delete_orphan_entities`` once)."""
    conn.execute("DELETE FROM memory_entities WHERE memory_rowid = ?", (memory_rowid,))


def delete_orphan_entities(conn: apsw.Connection) -> None:
    """Entities with no linked memory would keep boosting nothing: remove them and their vectors.

    One pass over the entities (each probe is an index lookup on ``memory_entities``);
    run it once per write transaction, after every row is deleted or unlinked.
    """
    orphans = [
        row[0]
        for row in conn.execute(
            "SELECT id FROM entities WHERE NOT EXISTS (SELECT 1 FROM memory_entities l WHERE l.entity_id = entities.id)"
        )
    ]
    for lo in range(0, len(orphans), 500):
        chunk = orphans[lo : lo + 500]
        marks = ",".join("?" * len(chunk))
        conn.execute(f"DELETE FROM entity_vectors WHERE entity_id IN ({marks})", chunk)
        conn.execute(f"DELETE FROM entities WHERE id IN ({marks})", chunk)


# --- memory reads -----------------------------------------------------------------------


def get_memory(conn: apsw.Connection, memory_id: str, scope: dict[str, str]) -> MemoryRow | None:
    """A memory by public id, only if it lies in the caller's scope."""
    where, params = scope_sql(scope)
    row = conn.execute(
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ? AND {where}", (memory_id, *params)
    ).fetchone()
    return _memory_row(row) if row else None


def id_taken(conn: apsw.Connection, memory_id: str) -> bool:
    """Whether any memory, in any scope, has this id, or had it before a delete: ids are unique in
    the whole file, and a deleted memory's id stays its own (its history keeps it, and ``restore``
    brings it back under it), so no other memory's history is ever mixed into it."""
    return conn.execute(
        "SELECT EXISTS (SELECT 1 FROM memories WHERE id = ?) OR EXISTS (SELECT 1 FROM history WHERE memory_id = ?)",
        (memory_id, memory_id),
    ).fetchone()[0] == 1


ID_PREFIX_MIN_CHARS = 4
"""A shorter start of an id is too likely to name the wrong memory to stand for it."""


class IdCandidate(NamedTuple):
    """A memory id that starts with a given prefix, with its text to recognise it by."""

    id: str
    text: str


_CANDIDATES_SQL = {
    "memories": "SELECT id, text, count(*) OVER () FROM memories WHERE substr(id, 1, ?) = ? AND {where} "
                "ORDER BY id LIMIT ?",
    # The bare columns take their values from the row of max(id): the memory's latest event.
    "history": "SELECT memory_id, coalesce(new_text, old_text), count(*) OVER (), max(id) FROM history "
               "WHERE substr(memory_id, 1, ?) = ? AND {where} GROUP BY memory_id ORDER BY memory_id LIMIT ?",
}


def ids_with_prefix(
    conn: apsw.Connection, table: str, prefix: str, scope: dict[str, str], limit: int
) -> tuple[list[IdCandidate], int]:
    """The first ``limit`` memory ids of ``memories`` or ``history`` (kept after a delete) that
    start with ``prefix`` within the scope, each with its (latest) text, and how many there are
    in all. ``substr`` compares literally, unlike ``LIKE`` or ``GLOB``, for which ``%``, ``_``
    or ``*`` in the prefix would be wildcards."""
    where, params = scope_sql(scope)
    rows = conn.execute(_CANDIDATES_SQL[table].format(where=where), (len(prefix), prefix, *params, limit)).fetchall()
    return [IdCandidate(row[0], row[1]) for row in rows], rows[0][2] if rows else 0


def memories_by_rowid(conn: apsw.Connection, rowids: Sequence[int]) -> dict[int, MemoryRow]:
    """Rows for a set of rowids (already scope-checked by the query that found them)."""
    if not rowids:
        return {}
    marks = ",".join("?" * len(rowids))
    rows = conn.execute(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE rowid IN ({marks})", tuple(rowids))
    return {row[0]: _memory_row(row) for row in rows}


def list_memories_sql(
    scope: dict[str, str], filter_sql: str, filter_params: list[Any], today: str | None
) -> tuple[str, list[Any]]:
    """Newest first; ``today`` set means expired memories are hidden."""
    where, params = scope_sql(scope, "m")
    expiry = " AND (m.expiration_date IS NULL OR m.expiration_date >= ?)" if today else ""
    sql = (
        f"SELECT {', '.join('m.' + c.strip() for c in MEMORY_COLUMNS.split(','))} FROM memories m "
        f"WHERE {where} AND ({filter_sql}){expiry} ORDER BY m.created_at DESC, m.rowid DESC LIMIT ? OFFSET ?"
    )
    return sql, [*params, *filter_params, *([today] if today else [])]


def list_memories(
    conn: apsw.Connection,
    scope: dict[str, str],
    filter_sql: str,
    filter_params: list[Any],
    today: str | None,
    limit: int,
    offset: int,
) -> list[MemoryRow]:
    """A page of the scope's memories, newest first."""
    sql, params = list_memories_sql(scope, filter_sql, filter_params, today)
    return [_memory_row(row) for row in conn.execute(sql, (*params, limit, offset))]


def export_where_sql(scope: dict[str, str], filter_sql: str, filter_params: list[Any]) -> tuple[str, list[Any]]:
    """Which memories an export takes (over alias ``m``): the scope's (every memory for an empty
    scope) that pass the filters, expired ones too."""
    where, params = scope_sql(scope, "m")
    return f"{where} AND ({filter_sql})", [*params, *filter_params]


def export_memories(
    conn: apsw.Connection, scope: dict[str, str], filter_sql: str, filter_params: list[Any]
) -> Iterator[MemoryRow]:
    """The exported memories in the order they were stored (rowid), which keeps neighbours
    neighbours on import; read one by one from the cursor, never all at once."""
    where, params = export_where_sql(scope, filter_sql, filter_params)
    columns = ", ".join("m." + c.strip() for c in MEMORY_COLUMNS.split(","))
    for row in conn.execute(f"SELECT {columns} FROM memories m WHERE {where} ORDER BY m.rowid", params):
        yield _memory_row(row)


def export_counts(
    conn: apsw.Connection, scope: dict[str, str], filter_sql: str, filter_params: list[Any]
) -> tuple[int, int]:
    """How many memories ``export_memories`` yields, and how many history events they have."""
    where, params = export_where_sql(scope, filter_sql, filter_params)
    ids = f"SELECT m.id FROM memories m WHERE {where}"
    return tuple(conn.execute(
        f"SELECT (SELECT count(*) FROM ({ids})), (SELECT count(*) FROM history WHERE memory_id IN ({ids}))",
        [*params, *params],
    ).fetchone())


def scope_rowids(conn: apsw.Connection, scope: dict[str, str]) -> list[int]:
    """Every memory rowid in a scope (for delete_all)."""
    where, params = scope_sql(scope)
    return [row[0] for row in conn.execute(f"SELECT rowid FROM memories WHERE {where}", params)]


def history(conn: apsw.Connection, memory_id: str, scope: dict[str, str]) -> list[tuple[Any, ...]]:
    """A memory's events, oldest first, only within the caller's scope (metadata decoded)."""
    where, params = scope_sql(scope)
    rows = conn.execute(
        "SELECT memory_id, event, old_text, new_text, old_metadata, new_metadata, created_at "
        f"FROM history WHERE memory_id = ? AND {where} ORDER BY id",
        (memory_id, *params),
    )
    return [
        (*row[:4], *(None if value is None else json.loads(value) for value in row[4:6]), row[6]) for row in rows
    ]


class DeletedMemory(NamedTuple):
    """What history keeps of a deleted memory: enough to bring it back."""

    id: str
    text: str
    metadata: dict[str, Any]
    scope: dict[str, str]
    created_at: str


def last_deletion(conn: apsw.Connection, memory_id: str, scope: dict[str, str]) -> DeletedMemory | None | str:
    """The memory as its latest event, a DELETE, left it (with its first event's time as its
    creation time); the latest event's kind when that is not a DELETE; ``None`` without history."""
    where, params = scope_sql(scope)
    last = conn.execute(
        "SELECT event, old_text, old_metadata, user_id, agent_id, run_id FROM history "
        f"WHERE memory_id = ? AND {where} ORDER BY id DESC LIMIT 1",
        (memory_id, *params),
    ).fetchone()
    if last is None:
        return None
    event, text, metadata, *own_scope = last
    if event != "DELETE":
        return event
    created_at = conn.execute(
        "SELECT created_at FROM history WHERE memory_id = ? ORDER BY id LIMIT 1", (memory_id,)
    ).fetchone()[0]
    return DeletedMemory(memory_id, text, json.loads(metadata or "{}"), dict(zip(SCOPE_KEYS, own_scope)), created_at)


def scope_counts(conn: apsw.Connection, today: str) -> list[tuple[str, str, str, int, int]]:
    """Every scope holding memories: (user_id, agent_id, run_id, memories, expired before ``today``)."""
    return conn.execute(
        "SELECT user_id, agent_id, run_id, count(*), "
        "coalesce(sum(expiration_date IS NOT NULL AND expiration_date < ?), 0) "
        "FROM memories GROUP BY user_id, agent_id, run_id ORDER BY user_id, agent_id, run_id",
        (today,),
    ).fetchall()


def counts(conn: apsw.Connection) -> dict[str, int]:
    """Row counts of every table, for ``doctor``."""
    tables = ("memories", "memory_vectors", "entities", "entity_vectors", "memory_entities", "history")
    return {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in tables}


# --- retrieval signals ------------------------------------------------------------------


def live_sql(filter_sql: str, filter_params: list[Any], on: str | None) -> tuple[str, list[Any]]:
    """The metadata filter SQL (over alias ``m``) and, when ``on`` is a day, "not expired before it"."""
    if on is None:
        return filter_sql, filter_params
    return f"({filter_sql}) AND (m.expiration_date IS NULL OR m.expiration_date >= ?)", [*filter_params, on]


def count_expired(conn: apsw.Connection, scope: dict[str, str], on: str) -> int:
    """Memories of the scope that expired before ``on`` (the partial expiry index finds them)."""
    # Unary + keeps the planner on the partial expiry index (the dated memories only):
    # through the scope index it would walk the whole scope (200 ms at 100,000 memories).
    where, params = scope_sql(scope, "+m")
    return conn.execute(
        f"SELECT count(*) FROM memories m WHERE m.expiration_date < ? AND {where}", (on, *params)
    ).fetchone()[0]


def knn_memories(
    conn: apsw.Connection,
    embedding: np.ndarray,
    scope: dict[str, str],
    limit: int,
    filter_sql: str,
    filter_params: list[Any],
    on: str | None,
) -> list[tuple[int, float]]:
    """Nearest live memories in scope as (rowid, cosine distance), nearest first; with ``on``
    (a UTC day) memories expired before it are skipped, and never take a slot.

    Without metadata filters vec0 filters the scope during its own scan, asking for
    ``limit`` more neighbours than the scope has expired memories, which are then dropped:
    exactly the ``limit`` nearest live ones. With filters (or too many expired memories
    for vec0's k), a post-filtered KNN could return fewer than ``limit`` rows, so we scan
    exactly the filtered rows instead: same result set semantics, a different plan.
    """
    blob = vector_blob(embedding)
    limit = min(limit, KNN_LIMIT)
    expired = count_expired(conn, scope, on) if on is not None else 0
    if filter_sql == "1" and limit + expired <= KNN_LIMIT:
        where, params = scope_sql(scope)
        knn = f"SELECT memory_rowid, distance FROM memory_vectors WHERE embedding MATCH ? AND k = ? AND {where}"
        if not expired:
            return conn.execute(knn, (blob, limit, *params)).fetchall()
        return conn.execute(
            f"SELECT knn.memory_rowid, knn.distance FROM ({knn}) knn JOIN memories m ON m.rowid = knn.memory_rowid "
            "WHERE m.expiration_date IS NULL OR m.expiration_date >= ? ORDER BY knn.distance LIMIT ?",
            (blob, limit + expired, *params, on, limit),
        ).fetchall()
    filter_sql, filter_params = live_sql(filter_sql, filter_params, on)
    where, params = scope_sql(scope, "m")
    return conn.execute(
        "SELECT m.rowid, vec_distance_cosine(v.embedding, ?) AS distance FROM memories m "
        f"JOIN memory_vectors v ON v.memory_rowid = m.rowid WHERE {where} AND ({filter_sql}) "
        "ORDER BY distance LIMIT ?",
        (blob, *params, *filter_params, limit),
    ).fetchall()


def distances_for(conn: apsw.Connection, embedding: np.ndarray, rowids: Sequence[int]) -> list[tuple[int, float]]:
    """Exact cosine distances for chosen memories (keyword or entity hits outside the KNN)."""
    if not rowids:
        return []
    marks = ",".join("?" * len(rowids))
    # Driven from memories, vec0 gets one rowid lookup per memory; ``memory_rowid IN (…)``
    # on vec0 itself scans its chunks and takes about twice as long at 10,000 memories.
    return conn.execute(
        "SELECT v.memory_rowid, vec_distance_cosine(v.embedding, ?) FROM memories m "
        f"JOIN memory_vectors v ON v.memory_rowid = m.rowid WHERE m.rowid IN ({marks})",
        (vector_blob(embedding), *rowids),
    ).fetchall()


def fts_match_expression(terms: Sequence[str]) -> str:
    """An FTS5 query that ORs the terms, each as a quoted string.

    User text is never FTS5 syntax: quoting (with inner quotes doubled) turns
    ``NEAR(``, ``AND``, ``*``, ``-`` and ``:`` into plain tokens.
    """
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def bm25_memories(
    conn: apsw.Connection,
    terms: Sequence[str],
    scope: dict[str, str],
    limit: int,
    filter_sql: str,
    filter_params: list[Any],
) -> list[tuple[int, float]]:
    """Keyword hits in scope as (rowid, raw BM25 ≥ 0), best first.

    FTS5 ``bm25()`` is negative with lower meaning better, so the raw score is its negation.
    """
    if not terms:
        return []
    where, params = scope_sql(scope, "m")
    return conn.execute(
        "SELECT m.rowid, -bm25(memory_fts) AS score FROM memory_fts JOIN memories m ON m.rowid = memory_fts.rowid "
        f"WHERE memory_fts MATCH ? AND {where} AND ({filter_sql}) ORDER BY bm25(memory_fts) LIMIT ?",
        (fts_match_expression(terms), *params, *filter_params, limit),
    ).fetchall()


def knn_entities(
    conn: apsw.Connection, embedding: np.ndarray, scope: dict[str, str], limit: int
) -> list[tuple[int, str, float]]:
    """Nearest stored entities in scope as (entity id, text, cosine distance)."""
    where, params = scope_sql(scope)
    hits = conn.execute(
        f"SELECT entity_id, distance FROM entity_vectors WHERE embedding MATCH ? AND k = ? AND {where}",
        (vector_blob(embedding), min(limit, KNN_LIMIT), *params),
    ).fetchall()
    if not hits:
        return []
    texts = dict(
        conn.execute(
            f"SELECT id, text FROM entities WHERE id IN ({','.join('?' * len(hits))})", [h[0] for h in hits]
        ).fetchall()
    )
    return [(entity_id, texts[entity_id], distance) for entity_id, distance in hits]


def entity_links(
    conn: apsw.Connection,
    entity_ids: Sequence[int],
    filter_sql: str,
    filter_params: list[Any],
    memory_rowids: Sequence[int] | None = None,
) -> tuple[dict[int, int], list[tuple[int, int]], bool]:
    """For matched entities: how many memories each links to, the (entity, memory) links that
    pass the metadata filters, and whether any such link exists at all.

    The count uses every link (Mem0 weights by the entity's whole spread); only the
    links are filtered, so a filtered-out memory never receives a boost. With
    ``memory_rowids`` only links to those memories are fetched: a speaker's name can
    link to tens of thousands of memories, of which only the candidates can be ranked.
    """
    if not entity_ids:
        return {}, [], False
    marks = ",".join("?" * len(entity_ids))
    linked = dict(
        conn.execute(
            f"SELECT entity_id, count(*) FROM memory_entities WHERE entity_id IN ({marks}) GROUP BY entity_id",
            tuple(entity_ids),
        ).fetchall()
    )
    among, among_params = "", []
    if memory_rowids is not None:
        among = f" AND l.memory_rowid IN ({','.join('?' * len(memory_rowids))})"
        among_params = list(memory_rowids)
    joined = (
        "FROM memory_entities l JOIN memories m ON m.rowid = l.memory_rowid "
        f"WHERE l.entity_id IN ({marks}) AND ({filter_sql})"
    )
    links = conn.execute(
        f"SELECT l.entity_id, l.memory_rowid {joined}{among}", (*entity_ids, *filter_params, *among_params)
    ).fetchall()
    exists = bool(links) or (
        memory_rowids is not None
        and conn.execute(f"SELECT EXISTS (SELECT 1 {joined})", (*entity_ids, *filter_params)).fetchone()[0] == 1
    )
    return linked, links, exists


def memory_entity_names(conn: apsw.Connection, memory_rowid: int) -> list[str]:
    """The normalised names of the entities linked to one memory, alphabetically."""
    return [
        row[0]
        for row in conn.execute(
            "SELECT e.normalized FROM memory_entities l JOIN entities e ON e.id = l.entity_id "
            "WHERE l.memory_rowid = ? ORDER BY e.normalized",
            (memory_rowid,),
        )
    ]


def memories_with_entity_sql(scope: dict[str, str]) -> str:
    """Memories of the scope linked to an entity of that normalised name, newest first (an
    entity row belongs to its memories' exact scope, so one name may be several rows)."""
    where, _ = scope_sql(scope, "m")
    return (
        f"SELECT {', '.join('m.' + c.strip() for c in MEMORY_COLUMNS.split(','))} FROM entities e "
        "JOIN memory_entities l ON l.entity_id = e.id JOIN memories m ON m.rowid = l.memory_rowid "
        f"WHERE e.normalized = ? AND {where} ORDER BY m.created_at DESC, m.rowid DESC LIMIT ?"
    )


def memories_with_entity(conn: apsw.Connection, normalized: str, scope: dict[str, str], limit: int) -> list[MemoryRow]:
    _, params = scope_sql(scope, "m")
    return [_memory_row(row) for row in conn.execute(memories_with_entity_sql(scope), (normalized, *params, limit))]


def scope_count(conn: apsw.Connection, scope: dict[str, str]) -> int:
    """How many memories the scope holds (the N of the entity rarity weight)."""
    where, params = scope_sql(scope)
    return conn.execute(f"SELECT count(*) FROM memories WHERE {where}", params).fetchone()[0]


def adjacent_memories(
    conn: apsw.Connection,
    rowids: Sequence[int],
    scope: dict[str, str],
    filter_sql: str,
    filter_params: list[Any],
) -> dict[int, list[int]]:
    """For each memory, the memories stored just before and after it (rowid ± 1) that are in
    the same scope and pass the filters: the turns around it when a conversation is added
    in order. A rowid taken by another scope, or deleted, is no neighbour."""
    if not rowids:
        return {}
    around = sorted({rowid + step for rowid in rowids for step in (-1, 1)})
    # Unary + keeps the planner on the rowid lookups: through the scope index it would
    # walk the whole scope (5 ms instead of 0.2 at 10,000 memories).
    where, params = scope_sql(scope, "+m")
    found = {
        row[0]
        for row in conn.execute(
            f"SELECT m.rowid FROM memories m WHERE m.rowid IN ({','.join('?' * len(around))}) "
            f"AND {where} AND ({filter_sql})",
            (*around, *params, *filter_params),
        )
    }
    return {rowid: [rowid + step for step in (-1, 1) if rowid + step in found] for rowid in rowids}


def questions_among(conn: apsw.Connection, rowids: Sequence[int]) -> set[int]:
    """The memories among ``rowids`` whose text ends with a question mark (trailing
    whitespace aside): a turn that asks."""
    if not rowids:
        return set()
    return {
        row[0]
        for row in conn.execute(
            f"SELECT rowid FROM memories WHERE rowid IN ({','.join('?' * len(rowids))}) "
            "AND rtrim(text, ' ' || char(9, 10, 13)) LIKE '%?'",
            list(rowids),
        )
    }


# --- other applications' files ----------------------------------------------------------
# Read-only, as they are, for ``store.peers``: their schema is theirs, so columns are
# looked up first and only the ones named by the caller (identifiers chosen in code) read.


def foreign_rows(
    path: str, table: str, required: Sequence[str], optional: Sequence[str]
) -> tuple[int, Iterator[dict[str, Any]]]:
    """How many rows ``table`` of another application's SQLite file has, and the rows in rowid
    order as ``{"rowid": …, column: value}``: the ``required`` columns (refused without them)
    and those of the ``optional`` ones it has. A view or a table without rowids (no application
    whose files trimem reads makes either) is refused."""
    try:
        conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error as exc:
        raise InvalidArgument(f"cannot open {path} ({exc}); check the path") from None
    try:
        kind = conn.execute("SELECT type, wr FROM pragma_table_list(?) WHERE schema = 'main'", (table,)).fetchone()
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        total = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] if present else 0
    except apsw.Error as exc:
        conn.close()
        raise InvalidArgument(f"{path} is not a readable SQLite database ({exc})") from None
    if missing := [column for column in required if column not in present]:
        conn.close()
        raise InvalidArgument(f"{path} has no {table} table" if not present else
                              f"{path}'s {table} table has no {missing[0]} column")
    if tuple(kind) != ("table", 0):
        conn.close()
        what = {"view": "a view", "table": "a WITHOUT ROWID table"}.get(kind[0], f"a {kind[0]} table")
        raise InvalidArgument(f"{path}'s {table} is {what}, not the table of rows that format keeps; point at "
                              "its own database file")
    columns = [*required, *(column for column in optional if column in present)]

    def rows() -> Iterator[dict[str, Any]]:
        try:
            for values in conn.execute(f"SELECT rowid, {', '.join(columns)} FROM {table} ORDER BY rowid"):
                yield dict(zip(["rowid", *columns], values))
        finally:
            conn.close()

    return total, rows()


# --- maintenance ----------------------------------------------------------------------
# Read-only probes for ``store.maintenance.check`` and the few writes ``repair`` needs.
# Each probe names the rows that break one invariant; an empty result means it holds.

_SCOPE_DIFFERS = "{a}.user_id IS NOT {b}.user_id OR {a}.agent_id IS NOT {b}.agent_id OR {a}.run_id IS NOT {b}.run_id"

REQUIRED_TABLES = (
    "meta", "schema_version", "memories", "memory_vectors", "memory_fts", "memory_fts_docsize",
    "entities", "entity_vectors", "memory_entities", "history",
)

class Probe(NamedTuple):
    """One invariant: the SQL naming the rows that break it, and how each such row reads
    in a report (``str.format`` over the row's columns)."""

    sql: str
    message: str


INVARIANT_PROBES: dict[str, Probe] = {
    # every memory has exactly one vector, in its own scope
    "memory_without_vector": Probe(
        "SELECT rowid, id FROM memories WHERE rowid NOT IN (SELECT memory_rowid FROM memory_vectors)",
        "memory '{1}' (rowid {0}) has no vector",
    ),
    "vector_without_memory": Probe(
        "SELECT memory_rowid FROM memory_vectors WHERE memory_rowid NOT IN (SELECT rowid FROM memories)",
        "vector for rowid {0} belongs to no memory",
    ),
    "vector_scope": Probe(
        "SELECT m.rowid, m.id FROM memory_vectors v JOIN memories m ON m.rowid = v.memory_rowid "
        f"WHERE {_SCOPE_DIFFERS.format(a='v', b='m')}",
        "memory '{1}' (rowid {0}) has a vector filed under another scope",
    ),
    # every memory has exactly one FTS row (the docsize shadow table has one row per indexed document)
    "memory_without_fts": Probe(
        "SELECT rowid, id FROM memories WHERE rowid NOT IN (SELECT id FROM memory_fts_docsize)",
        "memory '{1}' (rowid {0}) has no keyword (FTS) row",
    ),
    "fts_without_memory": Probe(
        "SELECT id FROM memory_fts_docsize WHERE id NOT IN (SELECT rowid FROM memories)",
        "keyword (FTS) row {0} belongs to no memory",
    ),
    # links join a memory and an entity of the same scope (these two cover the only foreign keys)
    "link_without_memory": Probe(
        "SELECT memory_rowid, entity_id FROM memory_entities WHERE memory_rowid NOT IN (SELECT rowid FROM memories)",
        "entity link {0}→{1} points to no memory",
    ),
    "link_without_entity": Probe(
        "SELECT memory_rowid, entity_id FROM memory_entities WHERE entity_id NOT IN (SELECT id FROM entities)",
        "entity link {0}→{1} points to no entity",
    ),
    "link_scope": Probe(
        "SELECT l.memory_rowid, l.entity_id FROM memory_entities l JOIN memories m ON m.rowid = l.memory_rowid "
        f"JOIN entities e ON e.id = l.entity_id WHERE {_SCOPE_DIFFERS.format(a='m', b='e')}",
        "memory rowid {0} is linked to entity {1} of another scope",
    ),
    # every entity is linked and has exactly one vector, in its own scope
    "entity_without_links": Probe(
        "SELECT id, normalized FROM entities WHERE id NOT IN (SELECT entity_id FROM memory_entities)",
        "entity {0} ({1!r}) is linked to no memory",
    ),
    "entity_without_vector": Probe(
        "SELECT id, normalized FROM entities WHERE id NOT IN (SELECT entity_id FROM entity_vectors)",
        "entity {0} ({1!r}) has no vector",
    ),
    "entity_vector_without_entity": Probe(
        "SELECT entity_id FROM entity_vectors WHERE entity_id NOT IN (SELECT id FROM entities)",
        "entity vector {0} belongs to no entity",
    ),
    "entity_vector_scope": Probe(
        "SELECT e.id, e.normalized FROM entity_vectors v JOIN entities e ON e.id = v.entity_id "
        f"WHERE {_SCOPE_DIFFERS.format(a='v', b='e')}",
        "entity {0} ({1!r}) has a vector filed under another scope",
    ),
}


def missing_tables(conn: apsw.Connection) -> list[str]:
    """Tables (and the FTS5 shadow table the checks read) that this database lacks."""
    present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return [table for table in REQUIRED_TABLES if table not in present]


def integrity_check(conn: apsw.Connection) -> list[str]:
    """SQLite's own page, index and constraint check: ``['ok']`` when healthy."""
    return [row[0] for row in conn.execute("PRAGMA integrity_check")]


def fts_content_check_sql() -> str:
    """FTS5's check of the index against the content table; rank 1 adds the content comparison
    that plain ``integrity-check`` (and ``PRAGMA integrity_check``) skip for external content."""
    return "INSERT INTO memory_fts(memory_fts, rank) VALUES ('integrity-check', 1)"


def fts_content_check(conn: apsw.Connection) -> str | None:
    """None when the FTS index matches ``memories.text_lemmatized`` (or the file is read-only,
    so the comparison cannot run), else SQLite's message.

    It is written as an INSERT, so it waits for the write lock like any writer.
    """
    try:
        conn.execute(fts_content_check_sql())
    except apsw.CorruptError as exc:
        return str(exc)
    except apsw.ReadOnlyError:
        pass
    return None


def probe(conn: apsw.Connection, name: str) -> list[tuple[Any, ...]]:
    """The rows that break the invariant ``INVARIANT_PROBES[name]``."""
    return conn.execute(INVARIANT_PROBES[name].sql).fetchall()


def memories_without_links(conn: apsw.Connection) -> list[MemoryRow]:
    """Memories linked to no entity (most have none to link; a check or repair re-reads them)."""
    return [
        _memory_row(row)
        for row in conn.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE rowid NOT IN (SELECT memory_rowid FROM memory_entities)"
        )
    ]


def delete_link(conn: apsw.Connection, memory_rowid: int, entity_id: int) -> None:
    """Drop one memory–entity link."""
    conn.execute(
        "DELETE FROM memory_entities WHERE memory_rowid = ? AND entity_id = ?", (memory_rowid, entity_id)
    )


def memory_rows(conn: apsw.Connection, rowids: Sequence[int]) -> list[MemoryRow]:
    """Rows for rowids, in rowid order (missing ones skipped)."""
    return [row for _, row in sorted(memories_by_rowid(conn, rowids).items())]


def entity_names(conn: apsw.Connection, entity_ids: Sequence[int]) -> dict[int, str]:
    """Normalised text of entities by id (what their vectors embed)."""
    if not entity_ids:
        return {}
    marks = ",".join("?" * len(entity_ids))
    return dict(conn.execute(f"SELECT id, normalized FROM entities WHERE id IN ({marks})", tuple(entity_ids)))


def rebuild_fts(conn: apsw.Connection) -> None:
    """Re-index every memory's ``text_lemmatized`` from the content table."""
    conn.execute("INSERT INTO memory_fts(memory_fts) VALUES ('rebuild')")


# --- re-embedding -----------------------------------------------------------------------
# ``store.reembed`` fills the ``reembed_`` twins of the two vector tables beside the live
# ones, then swaps them in. sqlite-vec's vec0 cannot be renamed (its shadow tables keep
# the old name), so the swap copies the new vectors into freshly created canonical tables.

REEMBED_PREFIX = "reembed_"
REEMBED_META = ("reembed_model", "reembed_dimension")
"""``meta`` keys naming the model an unfinished re-embedding is building tables for."""


def vector_tables_sql(dimension: int, prefix: str = "") -> str:
    """The two vec0 tables at ``dimension``: the live ones (as migration m001 made them, which
    is never edited) or, with ``REEMBED_PREFIX``, the twins a re-embedding fills."""
    return f"""
        CREATE VIRTUAL TABLE {prefix}memory_vectors USING vec0(
            memory_rowid INTEGER PRIMARY KEY,
            embedding float[{dimension}] distance_metric=cosine,
            user_id TEXT, agent_id TEXT, run_id TEXT
        );
        CREATE VIRTUAL TABLE {prefix}entity_vectors USING vec0(
            entity_id INTEGER PRIMARY KEY,
            embedding float[{dimension}] distance_metric=cosine,
            user_id TEXT, agent_id TEXT, run_id TEXT
        );
    """


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


def reembed_target(conn: apsw.Connection) -> tuple[str, int] | None:
    """The model and dimension an unfinished re-embedding was building for, if any."""
    stored = dict(conn.execute(
        f"SELECT key, value FROM meta WHERE key IN ({','.join('?' * len(REEMBED_META))})", REEMBED_META
    ).fetchall())
    if len(stored) < len(REEMBED_META):
        return None
    return stored["reembed_model"], int(stored["reembed_dimension"])


def begin_reembed(conn: apsw.Connection, model: str, dimension: int) -> None:
    """Create the twin tables and the triggers that follow other writers, and record the target."""
    conn.execute(vector_tables_sql(dimension, REEMBED_PREFIX) + REEMBED_TRIGGERS_SQL)
    conn.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?), (?, ?)",
        (REEMBED_META[0], model, REEMBED_META[1], str(dimension)),
    )


def drop_reembed(conn: apsw.Connection) -> None:
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


def count_to_reembed(conn: apsw.Connection) -> int:
    """Memories and entities that still lack a new vector."""
    pending = ("memories without a new vector", "entities without a new vector")
    return sum(conn.execute(REEMBED_CHECKS[name]).fetchone()[0] for name in pending)


def reembed_problems(conn: apsw.Connection) -> dict[str, int]:
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
    conn.execute(vector_tables_sql(dimension))
    for table, (key, *_) in REEMBED_SOURCES.items():
        conn.execute(
            f"INSERT INTO {table}({key}, embedding, user_id, agent_id, run_id) "
            f"SELECT {key}, embedding, user_id, agent_id, run_id FROM {REEMBED_PREFIX}{table}"
        )
    drop_reembed(conn)
    conn.execute(
        "UPDATE meta SET value = CASE key WHEN 'embedding_model' THEN ? ELSE ? END "
        "WHERE key IN ('embedding_model', 'embedding_dimension')",
        (model, str(dimension)),
    )
