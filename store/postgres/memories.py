"""Memory rows, their keyword postings and their history: reads, writes and export
(``memories``, ``memory_terms`` and ``history``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from psycopg.types.json import Jsonb

from store.backend import DeletedMemory, IdCandidate, IdSource, MemoryRow, NewMemory
from store.filters import Filter
from store.records import HistoryEvent
from store.scope import Scope
from store.sql.keywords import term_frequencies
from store.sql.text import DEGRADED_MEMORIES_SQL, memory_columns

from .sql import EXACT_SCOPE_SQL, Statements, live_sql, memory_row, scope_sql, user_sql, vector

_CANDIDATES_SQL = {
    "memories": "SELECT id, text, count(*) OVER () FROM memories WHERE left(id, %s) = %s AND {where} "
                "ORDER BY id LIMIT %s",
    "history": "SELECT memory_id, text, count(*) OVER () FROM ("
               "SELECT DISTINCT ON (memory_id) memory_id, coalesce(new_text, old_text) AS text FROM history "
               "WHERE left(memory_id, %s) = %s AND {where} ORDER BY memory_id, id DESC) latest "
               "ORDER BY memory_id LIMIT %s",
}

EXPORT_BATCH = 500
"""Rows fetched at a time by an export's server-side cursor."""


def _json(value: dict[str, Any] | None) -> Jsonb | None:
    return None if value is None else Jsonb(value)


class MemoryReads(Statements):
    """Memory rows, history and counts as a snapshot reads them."""

    ROW_LOCK = ""
    """What the reads of whole rows by id or key add: nothing in a snapshot; in a write, a lock
    on the rows read (``PostgresTransaction``), since a write decides from them."""

    def get_memory(self, memory_id: str, scope: Scope) -> MemoryRow | None:
        where, params = scope_sql(scope)
        row = self.row(f"SELECT {memory_columns()} FROM memories WHERE id = %s AND {where}{self.ROW_LOCK}",
                       (memory_id, *params))
        return memory_row(row) if row else None

    def find_by_hash(self, scope: Scope, text_hash: str) -> MemoryRow | None:
        row = self.row(f"SELECT {memory_columns()} FROM memories WHERE {EXACT_SCOPE_SQL} AND hash = %s",
                       (*scope.values(), text_hash))
        return memory_row(row) if row else None

    def id_taken(self, memory_id: str, *, by_history: bool = True) -> bool:
        sql = "SELECT EXISTS (SELECT 1 FROM memories WHERE id = %s)"
        if by_history:
            sql += " OR EXISTS (SELECT 1 FROM history WHERE memory_id = %s)"
        return self.row(sql, (memory_id,) * (1 + by_history))[0]

    def ids_with_prefix(
        self, source: IdSource, prefix: str, scope: Scope, limit: int
    ) -> tuple[list[IdCandidate], int]:
        """``left`` compares literally, unlike ``LIKE``, for which ``%`` or ``_`` would be wildcards."""
        where, params = scope_sql(scope)
        rows = self.rows(_CANDIDATES_SQL[source].format(where=where), (len(prefix), prefix, *params, limit))
        return [IdCandidate(row[0], row[1]) for row in rows], rows[0][2] if rows else 0

    def memories_by_rowid(self, rowids: Sequence[int], scope: Scope) -> dict[int, MemoryRow]:
        if not rowids:
            return {}
        user, params = user_sql(scope)
        rows = self.rows(f"SELECT {memory_columns()} FROM memories WHERE {user} AND rowid = ANY(%s) "
                         f"ORDER BY rowid{self.ROW_LOCK}", (*params, list(rowids)))
        return {row[0]: memory_row(row) for row in rows}

    def list_memories(
        self, scope: Scope, filters: Filter | None, on: str | None, limit: int, offset: int
    ) -> list[MemoryRow]:
        where, params = scope_sql(scope, "m")
        live, live_params = live_sql(filters, on)
        sql = (
            f"SELECT {memory_columns('m')} FROM memories m WHERE {where} AND ({live}) "
            "ORDER BY m.created_at DESC, m.rowid DESC LIMIT %s OFFSET %s"
        )
        return [memory_row(row) for row in self.rows(sql, (*params, *live_params, limit, offset))]

    def scope_rowids(self, scope: Scope) -> list[int]:
        where, params = scope_sql(scope)
        return [row[0] for row in self.rows(f"SELECT rowid FROM memories WHERE {where}", params)]

    def history(self, memory_id: str, scope: Scope) -> list[HistoryEvent]:
        where, params = scope_sql(scope)
        rows = self.rows(
            "SELECT memory_id, event, old_text, new_text, old_metadata, new_metadata, created_at "
            f"FROM history WHERE memory_id = %s AND {where} ORDER BY id",
            (memory_id, *params),
        )
        return [HistoryEvent(*row) for row in rows]

    def last_deletion(self, memory_id: str, scope: Scope) -> DeletedMemory | str | None:
        """The creation time is the first event's."""
        where, params = scope_sql(scope)
        last = self.row(
            "SELECT event, old_text, old_metadata, user_id, agent_id, run_id FROM history "
            f"WHERE memory_id = %s AND {where} ORDER BY id DESC LIMIT 1",
            (memory_id, *params),
        )
        if last is None:
            return None
        event, text, metadata, *own_scope = last
        if event != "DELETE":
            return event
        (created_at,) = self.row(
            "SELECT created_at FROM history WHERE memory_id = %s AND user_id = %s ORDER BY id LIMIT 1",
            (memory_id, own_scope[0]),
        )
        return DeletedMemory(memory_id, text, metadata or {}, Scope(*own_scope), created_at)

    def scope_counts(self, on: str) -> list[tuple[Scope, int, int]]:
        rows = self.rows(
            "SELECT user_id, agent_id, run_id, count(*), "
            "count(*) FILTER (WHERE expiration_date IS NOT NULL AND expiration_date < %s) "
            "FROM memories GROUP BY user_id, agent_id, run_id ORDER BY user_id, agent_id, run_id",
            (on,),
        )
        return [(Scope(user, agent, run), count, expired) for user, agent, run, count, expired in rows]

    def counts(self) -> dict[str, int]:
        """A memory's and an entity's vector are columns of their rows, so they count once each."""
        (memories, entities, links, events, postings) = self.row(
            "SELECT (SELECT count(*) FROM memories), (SELECT count(*) FROM entities), "
            "(SELECT count(*) FROM memory_entities), (SELECT count(*) FROM history), "
            "(SELECT count(*) FROM memory_terms)"
        )
        return {"memories": memories, "memory_vectors": memories, "entities": entities, "entity_vectors": entities,
                "memory_entities": links, "history": events, "memory_terms": postings}

    def _export_where(self, scope: Scope, filters: Filter | None) -> tuple[str, list[Any]]:
        """Which memories an export takes (over alias ``m``): the scope's that pass the filters,
        expired ones too."""
        where, params = scope_sql(scope, "m")
        fsql, fparams = live_sql(filters, None)
        return f"{where} AND ({fsql})", [*params, *fparams]

    def export_counts(self, scope: Scope, filters: Filter | None) -> tuple[int, int]:
        where, params = self._export_where(scope, filters)
        memories, events = self.row(
            f"SELECT count(*), coalesce(sum((SELECT count(*) FROM history h WHERE h.user_id = m.user_id "
            f"AND h.memory_id = m.id)), 0) FROM memories m WHERE {where}",
            params,
        )
        return memories, int(events)

    def export_memories(self, scope: Scope, filters: Filter | None) -> Iterator[MemoryRow]:
        """Read in batches from a server-side cursor, never all at once."""
        where, params = self._export_where(scope, filters)
        with self.conn.cursor(name="trimem_export") as cursor:
            cursor.itersize = EXPORT_BATCH
            cursor.execute(f"SELECT {memory_columns('m')} FROM memories m WHERE {where} ORDER BY m.rowid", params)
            for row in cursor:
                yield memory_row(row)

    def analysis_version(self) -> int:
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'analysis_version'").fetchone()
        return int(row[0]) if row else 1

    def degraded_memories(self) -> list[MemoryRow]:
        return [memory_row(row) for row in self.rows(DEGRADED_MEMORIES_SQL)]


class MemoryWrites(Statements):
    """Memory rows, their postings and history as a transaction writes them."""

    def insert_memory(self, memory: NewMemory) -> int:
        if memory.gap_before:
            self.conn.execute("SELECT nextval('memory_keys')")
        frequencies = term_frequencies(memory.text_lemmatized)
        (rowid,) = self.row(
            "INSERT INTO memories (id, text, text_lemmatized, terms, hash, user_id, agent_id, run_id, actor_id, "
            "role, metadata, created_at, updated_at, expiration_date, embedding, analysis_degraded) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING rowid",
            (
                memory.id, memory.text, memory.text_lemmatized, frequencies.total(), memory.hash,
                *memory.scope.values(), memory.actor_id, memory.role, _json(memory.metadata), memory.created_at,
                memory.updated_at, memory.expiration_date, vector(memory.embedding), memory.analysis_degraded,
            ),
        )
        self._post_terms(memory.scope.user_id, rowid, frequencies)
        return rowid

    def _post_terms(self, user_id: str, rowid: int, frequencies: dict[str, int]) -> None:
        if frequencies:
            self.conn.execute(
                "INSERT INTO memory_terms (user_id, term, memory_rowid, frequency) "
                "SELECT %s, term, %s, frequency FROM unnest(%s::text[], %s::integer[]) AS t(term, frequency)",
                (user_id, rowid, list(frequencies), list(frequencies.values())),
            )

    def rewrite_text(
        self, rowid: int, *, text: str, text_lemmatized: str, text_hash: str, embedding: np.ndarray,
        scope: Scope, updated_at: str,
    ) -> None:
        self.conn.execute(
            "UPDATE memories SET text = %s, hash = %s, updated_at = %s, embedding = %s WHERE user_id = %s AND rowid = %s",
            (text, text_hash, updated_at, vector(embedding), scope.user_id, rowid),
        )
        self.set_terms(rowid, scope, text_lemmatized)

    def set_terms(self, rowid: int, scope: Scope, text_lemmatized: str) -> None:
        frequencies = term_frequencies(text_lemmatized)
        self.conn.execute(
            "UPDATE memories SET text_lemmatized = %s, terms = %s WHERE user_id = %s AND rowid = %s",
            (text_lemmatized, frequencies.total(), scope.user_id, rowid),
        )
        self.conn.execute("DELETE FROM memory_terms WHERE user_id = %s AND memory_rowid = %s", (scope.user_id, rowid))
        self._post_terms(scope.user_id, rowid, frequencies)

    def set_analysis_version(self, version: int) -> None:
        self.conn.execute(
            "INSERT INTO meta (key, value) VALUES ('analysis_version', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(version),),
        )

    def set_analysis_degraded(self, rowid: int, scope: Scope, degraded: bool) -> None:
        self.conn.execute("UPDATE memories SET analysis_degraded = %s WHERE user_id = %s AND rowid = %s",
                          (degraded, scope.user_id, rowid))

    def set_metadata(self, rowid: int, scope: Scope, metadata: dict[str, Any], updated_at: str) -> None:
        self.conn.execute("UPDATE memories SET metadata = %s, updated_at = %s WHERE user_id = %s AND rowid = %s",
                          (_json(metadata), updated_at, scope.user_id, rowid))

    def set_expiration(self, rowid: int, scope: Scope, expiration_date: str | None, updated_at: str) -> None:
        self.conn.execute(
            "UPDATE memories SET expiration_date = %s, updated_at = %s WHERE user_id = %s AND rowid = %s",
            (expiration_date, updated_at, scope.user_id, rowid),
        )

    def delete_memory(self, rowid: int, scope: Scope) -> None:
        """Its postings and links go by cascade; the entities it leaves unlinked are remembered
        for ``delete_orphan_entities``."""
        self.unlink_entities(rowid, scope)
        self.conn.execute("DELETE FROM memories WHERE user_id = %s AND rowid = %s", (scope.user_id, rowid))

    def add_history(self, memory_id: str, scope: Scope, event: HistoryEvent) -> None:
        """Filed with the scope, so history stays scoped after a delete."""
        self.conn.execute(
            "INSERT INTO history (memory_id, event, old_text, new_text, old_metadata, new_metadata, "
            "user_id, agent_id, run_id, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                memory_id, event.event, event.old_text, event.new_text, _json(event.old_metadata),
                _json(event.new_metadata), *scope.values(), event.created_at,
            ),
        )
