"""Every row and query statement trimem runs: memories, entities, history, signals, probes.

Opening files, connection settings, transactions and the schema live in
``store.connection``; nothing outside these two modules writes SQL. Values are always bound parameters; the only
text spliced into SQL is identifiers chosen here and filter SQL from ``store.filters``,
which binds its values too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import apsw
import numpy as np

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
    conn.execute(
        "INSERT INTO memories(id, text, text_lemmatized, hash, user_id, agent_id, run_id, actor_id, "
        "role, metadata, created_at, updated_at, expiration_date) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            memory.id,
            memory.text,
            memory.text_lemmatized,
            memory.hash,
            *scope,
            memory.actor_id,
            memory.role,
            json.dumps(memory.metadata, ensure_ascii=False),
            memory.created_at,
            memory.created_at,
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
    """Record one ADD / UPDATE / DELETE, with the scope so history stays scoped after a delete."""
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


ID_PREFIX_MIN_CHARS = 4
"""A shorter prefix is too likely to name the wrong memory to be accepted at all."""


def ids_with_prefix_sql(table: str, scope: dict[str, str]) -> tuple[str, list[str]]:
    """Distinct memory ids of ``memories`` or ``history`` (kept after a delete) starting with a
    prefix, within the scope; ``substr`` compares literally, unlike ``LIKE`` or ``GLOB``, for
    which ``%``, ``_`` or ``*`` in the prefix would be wildcards. At most three: two already
    make a prefix ambiguous, and a third says "several"."""
    column = {"memories": "id", "history": "memory_id"}[table]
    where, params = scope_sql(scope)
    return f"SELECT DISTINCT {column} FROM {table} WHERE substr({column}, 1, ?) = ? AND {where} LIMIT 3", params


def ids_with_prefix(conn: apsw.Connection, table: str, prefix: str, scope: dict[str, str]) -> list[str]:
    sql, params = ids_with_prefix_sql(table, scope)
    return [row[0] for row in conn.execute(sql, (len(prefix), prefix, *params))]


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
