"""Memory rows and their history: reads, writes and export (``memories`` and ``history``).

A memory's vector and keyword postings are written here beside it; its user's keyword
statistics follow it by trigger, and its postings and links go with it by cascade.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from store.backend import DeletedMemory, IdCandidate, IdSource, MemoryRow, NewMemory
from store.filters import Filter
from store.scope import Scope
from store.sql import memories as shared
from store.sql.keywords import term_frequencies
from store.sql.text import memory_columns

from .keywords import post_terms
from .sql import DIALECT, Statements, vector_blob

_CANDIDATES_SQL = {
    "memories": "SELECT id, text, count(*) OVER () FROM memories WHERE substr(id, 1, ?) = ? AND {where} "
                "ORDER BY id LIMIT ?",
    # The bare columns take their values from the row of max(id): the memory's latest event.
    "history": "SELECT memory_id, coalesce(new_text, old_text), count(*) OVER (), max(id) FROM history "
               "WHERE substr(memory_id, 1, ?) = ? AND {where} GROUP BY memory_id ORDER BY memory_id LIMIT ?",
}

TABLES_COUNTED = (
    "memories", "memory_vectors", "entities", "entity_vectors", "memory_entities", "history", "memory_terms",
)


class MemoryReads(shared.MemoryReads, Statements):
    """Memory rows, history and counts as a snapshot reads them."""

    def ids_with_prefix(
        self, source: IdSource, prefix: str, scope: Scope, limit: int
    ) -> tuple[list[IdCandidate], int]:
        """``substr`` compares literally, unlike ``LIKE`` or ``GLOB``, for which ``%``, ``_`` or
        ``*`` in the prefix would be wildcards."""
        where, params = DIALECT.scope_sql(scope)
        rows = self.conn.execute(
            _CANDIDATES_SQL[source].format(where=where), (len(prefix), prefix, *params, limit)
        ).fetchall()
        return [IdCandidate(row[0], row[1]) for row in rows], rows[0][2] if rows else 0

    def memories_by_rowid(self, rowids: Sequence[int], scope: Scope) -> dict[int, MemoryRow]:
        if not rowids:
            return {}
        keys, params = DIALECT.in_sql("rowid", rowids)
        rows = self.conn.execute(f"SELECT {memory_columns()} FROM memories WHERE {keys}", params)
        return {row[0]: DIALECT.memory_row(row) for row in rows}

    def texts_by_rowid(self, rowids: Sequence[int], scope: Scope) -> dict[int, str]:
        if not rowids:
            return {}
        keys, params = DIALECT.in_sql("rowid", rowids)
        return dict(self.conn.execute(f"SELECT rowid, text FROM memories WHERE {keys}", params).fetchall())

    def last_deletion(self, memory_id: str, scope: Scope) -> DeletedMemory | str | None:
        """The creation time is the first event's."""
        where, params = DIALECT.scope_sql(scope)
        last = self.conn.execute(
            "SELECT event, old_text, old_metadata, user_id, agent_id, run_id FROM history "
            f"WHERE memory_id = ? AND {where} ORDER BY id DESC LIMIT 1",
            (memory_id, *params),
        ).fetchone()
        if last is None:
            return None
        event, text, metadata, *own_scope = last
        if event != "DELETE":
            return event
        created_at = self.conn.execute(
            "SELECT created_at FROM history WHERE memory_id = ? ORDER BY id LIMIT 1", (memory_id,)
        ).fetchone()[0]
        return DeletedMemory(memory_id, text, DIALECT.json_value(metadata) or {}, Scope(*own_scope), created_at)

    def counts(self) -> dict[str, int]:
        return {table: self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in TABLES_COUNTED}

    def export_counts(self, scope: Scope, filters: Filter | None) -> tuple[int, int]:
        where, params = self._export_where(scope, filters)
        ids = f"SELECT m.id FROM memories m WHERE {where}"
        memories, events = self.conn.execute(
            f"SELECT (SELECT count(*) FROM ({ids})), (SELECT count(*) FROM history WHERE memory_id IN ({ids}))",
            [*params, *params],
        ).fetchone()
        return memories, events

    def export_memories(self, scope: Scope, filters: Filter | None) -> Iterator[MemoryRow]:
        """Read one by one from the cursor, never all at once."""
        where, params = self._export_where(scope, filters)
        for row in self.conn.execute(f"SELECT {memory_columns('m')} FROM memories m WHERE {where} ORDER BY m.rowid",
                                     params):
            yield DIALECT.memory_row(row)



class MemoryWrites(shared.MemoryWrites, Statements):
    """Memory rows, their vectors, postings and history as a transaction writes them."""

    def insert_memories(self, memories: Sequence[NewMemory]) -> list[int]:
        """One at a time: each row's key comes from the insert itself."""
        return [self._insert_memory(memory) for memory in memories]

    def _insert_memory(self, memory: NewMemory) -> int:
        rowid = None
        if memory.gap_before:
            rowid = self.conn.execute("SELECT coalesce(max(rowid), 0) + 2 FROM memories").fetchone()[0]
        frequencies = term_frequencies(memory.text_lemmatized)
        self.conn.execute(
            "INSERT INTO memories(rowid, id, text, text_lemmatized, terms, hash, user_id, agent_id, run_id, "
            "actor_id, role, metadata, created_at, updated_at, expiration_date, analysis_degraded) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                rowid, memory.id, memory.text, memory.text_lemmatized, frequencies.total(), memory.hash,
                *memory.scope.values(), memory.actor_id, memory.role, DIALECT.json_param(memory.metadata),
                memory.created_at, memory.updated_at, memory.expiration_date, memory.analysis_degraded,
            ),
        )
        rowid = self.conn.last_insert_rowid()
        post_terms(self.conn, rowid, frequencies)
        self.put_memory_vector(rowid, memory.embedding, memory.scope)
        return rowid

    def note_vector_changed(self, rowid: int) -> None:
        """Log a memory whose vector changes while its row does not (a repair), under the user
        its vector is filed under: migration 12's triggers log every other change, for the
        processes that hold their users' vectors (``store.sqlite.held_vectors``)."""
        self.conn.execute(
            "INSERT OR REPLACE INTO vector_changes(user_id, memory_rowid) "
            "SELECT user_id, memory_rowid FROM memory_vectors WHERE memory_rowid = ?",
            (rowid,),
        )

    def delete_memory_vector(self, rowid: int) -> None:
        """Drop one memory vector (orphaned, or about to be rewritten)."""
        self.conn.execute("DELETE FROM memory_vectors WHERE memory_rowid = ?", (rowid,))

    def put_memory_vector(self, rowid: int, embedding: np.ndarray, scope: Scope) -> None:
        """Insert or replace a memory's vector (vec0 has no upsert, so delete first)."""
        self.delete_memory_vector(rowid)
        self.conn.execute(
            "INSERT INTO memory_vectors(memory_rowid, embedding, user_id, agent_id, run_id) VALUES (?, ?, ?, ?, ?)",
            (rowid, vector_blob(embedding), *scope.values()),
        )

    def rewrite_text(
        self, rowid: int, *, text: str, text_lemmatized: str, text_hash: str, embedding: np.ndarray,
        scope: Scope, updated_at: str,
    ) -> None:
        self.conn.execute("UPDATE memories SET text = ?, hash = ?, updated_at = ? WHERE rowid = ?",
                          (text, text_hash, updated_at, rowid))
        self.set_terms(rowid, scope, text_lemmatized)
        self.put_memory_vector(rowid, embedding, scope)

    def set_terms(self, rowid: int, scope: Scope, text_lemmatized: str) -> None:
        """Its postings again, and its length in terms, which the trigger moves into its user's."""
        frequencies = term_frequencies(text_lemmatized)
        self.conn.execute("UPDATE memories SET text_lemmatized = ?, terms = ? WHERE rowid = ?",
                          (text_lemmatized, frequencies.total(), rowid))
        post_terms(self.conn, rowid, frequencies)

    def set_analysis_degraded(self, rowid: int, scope: Scope, degraded: bool) -> None:
        self.conn.execute("UPDATE memories SET analysis_degraded = ? WHERE rowid = ?", (degraded, rowid))

    def set_metadata(self, rowid: int, scope: Scope, metadata: dict[str, Any], updated_at: str) -> None:
        self.conn.execute("UPDATE memories SET metadata = ?, updated_at = ? WHERE rowid = ?",
                          (DIALECT.json_param(metadata), updated_at, rowid))

    def set_expiration(self, rowid: int, scope: Scope, expiration_date: str | None, updated_at: str) -> None:
        self.conn.execute(
            "UPDATE memories SET expiration_date = ?, updated_at = ? WHERE rowid = ?",
            (expiration_date, updated_at, rowid),
        )

    def delete_memory(self, rowid: int, scope: Scope) -> None:
        """Its postings and links go by cascade, its user's keyword statistics by trigger. Entities
        it leaves unlinked stay until ``delete_orphan_entities``, once per transaction: a scan per
        deleted row made ``delete_all`` O(rows × entities)."""
        self.delete_memory_vector(rowid)
        self.conn.execute("DELETE FROM memories WHERE rowid = ?", (rowid,))
