"""Memory rows, their keyword postings and their history: reads, writes and export
(``memories``, ``memory_terms`` and ``history``)."""

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

from .sql import DIALECT, Statements, user_sql, vector

_CANDIDATES_SQL = {
    "memories": "SELECT id, text, count(*) OVER () FROM memories WHERE left(id, %s) = %s AND {where} "
                "ORDER BY id LIMIT %s",
    "history": "SELECT memory_id, text, count(*) OVER () FROM ("
               "SELECT DISTINCT ON (memory_id) memory_id, coalesce(new_text, old_text) AS text FROM history "
               "WHERE left(memory_id, %s) = %s AND {where} ORDER BY memory_id, id DESC) latest "
               "ORDER BY memory_id LIMIT %s",
}

MEMORY_COLUMNS = {
    "rowid": "int8", "id": "text", "text": "text", "text_lemmatized": "text", "terms": "int4", "hash": "text",
    "user_id": "text", "agent_id": "text", "run_id": "text", "actor_id": "text", "role": "text",
    "metadata": "jsonb", "created_at": "text", "updated_at": "text", "expiration_date": "text",
    "embedding": "vector", "analysis_degraded": "bool",
}
"""The columns a new memory fills, with their types for a binary COPY."""
POSTING_COLUMNS = ("user_id", "term", "memory_rowid", "frequency", "length")
"""The columns of a keyword posting (``length``: its memory's length in terms)."""

EXPORT_BATCH = 500
"""Rows fetched at a time by an export's server-side cursor."""
KEYWORD_SLOTS = 64
"""The rows each user's keyword counts are spread over (``keyword_counts``): a write transaction
adds to the row of its server session's slot, so writers of the same user meet on one row only
when their sessions share a slot."""
KEYWORD_COUNTS_SQL = f"""
INSERT INTO keyword_counts AS k (user_id, slot, memories, terms)
SELECT changed.user_id, pg_backend_pid() %% {KEYWORD_SLOTS}, changed.memories, changed.terms
FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) AS changed(user_id, memories, terms) ORDER BY changed.user_id
ON CONFLICT (user_id, slot) DO UPDATE SET memories = k.memories + excluded.memories, terms = k.terms + excluded.terms
"""
"""Each user's change of N and of total length in terms, added to the session's slot of it."""


class MemoryReads(shared.MemoryReads, Statements):
    """Memory rows, history and counts as a snapshot reads them."""

    def ids_with_prefix(
        self, source: IdSource, prefix: str, scope: Scope, limit: int
    ) -> tuple[list[IdCandidate], int]:
        """``left`` compares literally, unlike ``LIKE``, for which ``%`` or ``_`` would be wildcards."""
        where, params = DIALECT.scope_sql(scope)
        rows = self.rows(_CANDIDATES_SQL[source].format(where=where), (len(prefix), prefix, *params, limit))
        return [IdCandidate(row[0], row[1]) for row in rows], rows[0][2] if rows else 0

    def memories_by_rowid(self, rowids: Sequence[int], scope: Scope) -> dict[int, MemoryRow]:
        if not rowids:
            return {}
        user, params = user_sql(scope)
        rows = self.rows(f"SELECT {memory_columns()} FROM memories WHERE {user} AND rowid = ANY(%s) "
                         f"ORDER BY rowid{self.ROW_LOCK}", (*params, list(rowids)))
        return {row[0]: DIALECT.memory_row(row) for row in rows}

    def texts_by_rowid(self, rowids: Sequence[int], scope: Scope) -> dict[int, str]:
        if not rowids:
            return {}
        user, params = user_sql(scope)
        return dict(self.rows(f"SELECT rowid, text FROM memories WHERE {user} AND rowid = ANY(%s)", (*params, list(rowids))))

    def last_deletion(self, memory_id: str, scope: Scope) -> DeletedMemory | str | None:
        """The creation time is the first event's."""
        where, params = DIALECT.scope_sql(scope)
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

    def counts(self) -> dict[str, int]:
        """A memory's and an entity's vector are columns of their rows, so they count once each."""
        (memories, entities, links, events, postings) = self.row(
            "SELECT (SELECT count(*) FROM memories), (SELECT count(*) FROM entities), "
            "(SELECT count(*) FROM memory_entities), (SELECT count(*) FROM history), "
            "(SELECT count(*) FROM memory_terms)"
        )
        return {"memories": memories, "memory_vectors": memories, "entities": entities, "entity_vectors": entities,
                "memory_entities": links, "history": events, "memory_terms": postings}

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
                yield DIALECT.memory_row(row)

class MemoryWrites(shared.MemoryWrites, Statements):
    """Memory rows, their postings and history as a transaction writes them."""

    keyword_changes: dict[str, list[int]]
    """Each user's change of N and of total length in terms that this transaction made, written
    by ``write_keyword_counts``."""

    def _count_keywords(self, user_id: str, memories: int, terms: int) -> None:
        change = self.keyword_changes.setdefault(user_id, [0, 0])
        change[0] += memories
        change[1] += terms

    def write_keyword_counts(self) -> None:
        """The transaction's changes of each user's counts, added to ``keyword_counts`` as its last
        statement, so a row stays locked only while the transaction commits; users in order, so two
        transactions sharing a slot never wait on each other's rows in turn."""
        changed = sorted((user_id, *change) for user_id, change in self.keyword_changes.items() if any(change))
        self.keyword_changes.clear()
        if changed:
            users, memories, terms = ([row[i] for row in changed] for i in range(3))
            self.conn.execute(KEYWORD_COUNTS_SQL, (users, memories, terms))

    def insert_memories(self, memories: Sequence[NewMemory]) -> list[int]:
        """Keys drawn from the sequence first, in one statement (one more before each memory kept
        apart from the one before), then the rows and their postings each in one COPY."""
        if not memories:
            return []
        drawn = iter(sorted(row[0] for row in self.rows(
            "SELECT nextval('memory_keys') FROM generate_series(1, %s)",
            (len(memories) + sum(memory.gap_before for memory in memories),),
        )))
        keys = [(next(drawn), next(drawn))[1] if memory.gap_before else next(drawn) for memory in memories]
        frequencies = [term_frequencies(memory.text_lemmatized) for memory in memories]
        self.write_rows("memories", list(MEMORY_COLUMNS), [
            (
                key, memory.id, memory.text, memory.text_lemmatized, counts.total(), memory.hash,
                *memory.scope.values(), memory.actor_id, memory.role, DIALECT.json_param(memory.metadata),
                memory.created_at, memory.updated_at, memory.expiration_date, vector(memory.embedding),
                memory.analysis_degraded,
            )
            for key, memory, counts in zip(keys, memories, frequencies)
        ], list(MEMORY_COLUMNS.values()))
        self.write_rows("memory_terms", POSTING_COLUMNS, [
            (memory.scope.user_id, term, key, frequency, counts.total())
            for key, memory, counts in zip(keys, memories, frequencies) for term, frequency in counts.items()
        ])
        for memory, counts in zip(memories, frequencies):
            self._count_keywords(memory.scope.user_id, 1, counts.total())
        return keys

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
        for (before,) in self.rows(
            "WITH old AS (SELECT terms FROM memories WHERE user_id = %s AND rowid = %s) "
            "UPDATE memories SET text_lemmatized = %s, terms = %s WHERE user_id = %s AND rowid = %s "
            "RETURNING (SELECT terms FROM old)",
            (scope.user_id, rowid, text_lemmatized, frequencies.total(), scope.user_id, rowid),
        ):
            self._count_keywords(scope.user_id, 0, frequencies.total() - before)
        self.conn.execute("DELETE FROM memory_terms WHERE user_id = %s AND memory_rowid = %s", (scope.user_id, rowid))
        self.write_rows("memory_terms", POSTING_COLUMNS,
                        [(scope.user_id, term, rowid, frequency, frequencies.total())
                         for term, frequency in frequencies.items()])

    def set_analysis_degraded(self, rowid: int, scope: Scope, degraded: bool) -> None:
        self.conn.execute("UPDATE memories SET analysis_degraded = %s WHERE user_id = %s AND rowid = %s",
                          (degraded, scope.user_id, rowid))

    def set_metadata(self, rowid: int, scope: Scope, metadata: dict[str, Any], updated_at: str) -> None:
        self.conn.execute("UPDATE memories SET metadata = %s, updated_at = %s WHERE user_id = %s AND rowid = %s",
                          (DIALECT.json_param(metadata), updated_at, scope.user_id, rowid))

    def set_expiration(self, rowid: int, scope: Scope, expiration_date: str | None, updated_at: str) -> None:
        self.conn.execute(
            "UPDATE memories SET expiration_date = %s, updated_at = %s WHERE user_id = %s AND rowid = %s",
            (expiration_date, updated_at, scope.user_id, rowid),
        )

    def delete_memory(self, rowid: int, scope: Scope) -> None:
        """Its postings and links go by cascade; the entities it leaves unlinked are remembered
        for ``delete_orphan_entities``."""
        self.unlink_entities(rowid, scope)
        for (terms,) in self.rows("DELETE FROM memories WHERE user_id = %s AND rowid = %s RETURNING terms",
                                  (scope.user_id, rowid)):
            self._count_keywords(scope.user_id, -1, -terms)
