"""Entities, their vectors and their links to memories (``entities``, ``entity_vectors``,
``memory_entities``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from store.backend import MemoryRow, NewEntity
from store.scope import Scope
from store.sql import entities as shared
from store.sql.text import memory_columns

from .sql import DIALECT, Statements, vector_blob

ORPHANS_PER_DELETE = 500
"""Entity ids per ``IN (…)`` delete, well under SQLite's bound-parameter limit."""


class EntityReads(shared.EntityReads, Statements):
    """Entities as linking and the entity views read them."""

    def nearest_entities(self, queries: Sequence[tuple[Scope, np.ndarray]]) -> list[tuple[int, float] | None]:
        """One vec0 KNN of one neighbour per query, in the user's partition."""
        sql = ("SELECT entity_id, distance FROM entity_vectors WHERE embedding MATCH ? AND k = 1 "
               f"AND {DIALECT.exact_scope_sql()}")
        rows = [self.conn.execute(sql, (vector_blob(embedding), *scope.values())).fetchone()
                for scope, embedding in queries]
        return [(row[0], row[1]) if row else None for row in rows]

    def memory_entity_names(self, rowid: int, scope: Scope) -> list[str]:
        return [
            row[0]
            for row in self.conn.execute(
                "SELECT e.normalized FROM memory_entities l JOIN entities e ON e.id = l.entity_id "
                "WHERE l.memory_rowid = ? ORDER BY e.normalized",
                (rowid,),
            )
        ]

    def memories_with_entity(self, normalized: str, scope: Scope, limit: int) -> list[MemoryRow]:
        """An entity row belongs to its memories' exact scope, so one name may be several rows."""
        where, params = DIALECT.scope_sql(scope, "m")
        sql = (
            f"SELECT {memory_columns('m')} FROM entities e "
            "JOIN memory_entities l ON l.entity_id = e.id JOIN memories m ON m.rowid = l.memory_rowid "
            f"WHERE e.normalized = ? AND {where} ORDER BY m.created_at DESC, m.rowid DESC LIMIT ?"
        )
        return [DIALECT.memory_row(row) for row in self.conn.execute(sql, (normalized, *params, limit))]


class EntityWrites(Statements):
    """Entities, their vectors and links as a transaction writes them."""

    def insert_entities(self, entities: Sequence[NewEntity]) -> list[int]:
        """One at a time (the single writer: no one else can have made them)."""
        ids = []
        for entity in entities:
            self.conn.execute(
                "INSERT INTO entities(user_id, agent_id, run_id, text, normalized, entity_type) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (*entity.scope.values(), entity.text, entity.normalized, entity.entity_type),
            )
            ids.append(self.conn.last_insert_rowid())
            self.put_entity_vector(ids[-1], entity.embedding)
        return ids

    def delete_entity_vector(self, entity_id: int) -> None:
        """Drop one entity vector (orphaned, or about to be rewritten)."""
        self.conn.execute("DELETE FROM entity_vectors WHERE entity_id = ?", (entity_id,))

    def put_entity_vector(self, entity_id: int, embedding: np.ndarray) -> None:
        """Write an entity's vector with the entity's own scope."""
        self.delete_entity_vector(entity_id)
        self.conn.execute(
            "INSERT INTO entity_vectors(entity_id, embedding, user_id, agent_id, run_id) "
            "SELECT id, ?, user_id, agent_id, run_id FROM entities WHERE id = ?",
            (vector_blob(embedding), entity_id),
        )

    def insert_links(self, links: Sequence[tuple[int, int, Scope]]) -> None:
        self.conn.executemany("INSERT OR IGNORE INTO memory_entities(memory_rowid, entity_id) VALUES (?, ?)",
                              [(rowid, entity_id) for rowid, entity_id, _ in links])

    def unlink_entities(self, rowid: int, scope: Scope) -> None:
        self.conn.execute("DELETE FROM memory_entities WHERE memory_rowid = ?", (rowid,))

    def delete_link(self, rowid: int, entity_id: int) -> None:
        """Drop one memory–entity link (repair)."""
        self.conn.execute("DELETE FROM memory_entities WHERE memory_rowid = ? AND entity_id = ?", (rowid, entity_id))

    def delete_orphan_entities(self) -> None:
        """One pass over the entities (each probe is an index lookup on ``memory_entities``)."""
        orphans = [
            row[0]
            for row in self.conn.execute(
                "SELECT id FROM entities WHERE NOT EXISTS "
                "(SELECT 1 FROM memory_entities l WHERE l.entity_id = entities.id)"
            )
        ]
        for lo in range(0, len(orphans), ORPHANS_PER_DELETE):
            chunk = orphans[lo : lo + ORPHANS_PER_DELETE]
            for table, column in (("entity_vectors", "entity_id"), ("entities", "id")):
                among, params = DIALECT.in_sql(column, chunk)
                self.conn.execute(f"DELETE FROM {table} WHERE {among}", params)
