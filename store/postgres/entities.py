"""Entities, their vectors and their links to memories (``entities``, ``memory_entities``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from store.backend import MemoryRow
from store.scope import Scope
from store.sql import entities as shared
from store.sql.text import memory_columns

from .sql import DIALECT, Statements, user_sql, vector


class EntityReads(shared.EntityReads, Statements):
    """Entities as linking and the entity views read them."""

    def nearest_entity(self, scope: Scope, embedding: np.ndarray) -> tuple[int, float] | None:
        """An exact scan of the scope's entities: one scope holds few."""
        row = self.row(
            f"SELECT id, embedding <=> %s AS distance FROM entities WHERE {DIALECT.exact_scope_sql()} "
            "ORDER BY distance, id LIMIT 1",
            (vector(embedding), *scope.values()),
        )
        return (row[0], row[1]) if row else None

    def memory_entity_names(self, rowid: int, scope: Scope) -> list[str]:
        user, params = user_sql(scope, "l")
        return [
            row[0]
            for row in self.rows(
                "SELECT e.normalized FROM memory_entities l JOIN entities e ON e.user_id = l.user_id "
                f"AND e.id = l.entity_id WHERE {user} AND l.memory_rowid = %s ORDER BY e.normalized",
                (*params, rowid),
            )
        ]

    def memories_with_entity(self, normalized: str, scope: Scope, limit: int) -> list[MemoryRow]:
        """An entity row belongs to its memories' exact scope, so one name may be several rows."""
        where, params = DIALECT.scope_sql(scope, "m")
        sql = (
            f"SELECT {memory_columns('m')} FROM entities e "
            "JOIN memory_entities l ON l.user_id = e.user_id AND l.entity_id = e.id "
            "JOIN memories m ON m.user_id = l.user_id AND m.rowid = l.memory_rowid "
            f"WHERE e.normalized = %s AND {where} ORDER BY m.created_at DESC, m.rowid DESC LIMIT %s"
        )
        return [DIALECT.memory_row(row) for row in self.rows(sql, (normalized, *params, limit))]


class EntityWrites(Statements):
    """Entities and links as a transaction writes them. The entities a transaction unlinks are
    remembered, so ``delete_orphan_entities`` looks at those alone, not at every entity."""

    unlinked: set[tuple[str, int]]

    def insert_entity(
        self, scope: Scope, text: str, normalized: str, entity_type: str, embedding: np.ndarray
    ) -> int:
        """Another server may have created the same entity since this one looked: then it is that one."""
        row = self.row(
            "INSERT INTO entities (user_id, agent_id, run_id, text, normalized, entity_type, embedding) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (user_id, agent_id, run_id, normalized) DO NOTHING "
            "RETURNING id",
            (*scope.values(), text, normalized, entity_type, vector(embedding)),
        )
        return row[0] if row else self.find_entity_exact(scope, normalized)

    def insert_links(self, links: Sequence[tuple[int, int, Scope]]) -> None:
        """One statement for them all: the links as three arrays."""
        if links:
            self.conn.execute(
                "INSERT INTO memory_entities (user_id, memory_rowid, entity_id) "
                "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) ON CONFLICT DO NOTHING",
                ([scope.user_id for _, _, scope in links], [rowid for rowid, _, _ in links],
                 [entity_id for _, entity_id, _ in links]),
            )

    def unlink_entities(self, rowid: int, scope: Scope) -> None:
        self.unlinked.update(
            (scope.user_id, row[0])
            for row in self.rows("DELETE FROM memory_entities WHERE user_id = %s AND memory_rowid = %s "
                                 "RETURNING entity_id", (scope.user_id, rowid))
        )

    def delete_orphan_entities(self) -> None:
        if self.unlinked:
            users, ids = zip(*sorted(self.unlinked))
            self.conn.execute(
                "DELETE FROM entities e USING unnest(%s::text[], %s::bigint[]) AS gone(user_id, id) "
                "WHERE e.user_id = gone.user_id AND e.id = gone.id AND NOT EXISTS "
                "(SELECT 1 FROM memory_entities l WHERE l.user_id = e.user_id AND l.entity_id = e.id)",
                (list(users), list(ids)),
            )
            self.unlinked.clear()
