"""Entities, their vectors and their links to memories (``entities``, ``memory_entities``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from store.backend import MemoryRow, NewEntity
from store.scope import Scope
from store.sql import entities as shared
from store.sql.text import memory_columns

from .sql import DIALECT, Statements, user_sql, vector


def _columns(rows: Sequence[tuple[object, ...]]) -> list[list[object]]:
    """Rows (at least one) as column lists, each bound as one array."""
    return [list(column) for column in zip(*rows)]


class EntityReads(shared.EntityReads, Statements):
    """Entities as linking and the entity views read them."""

    def find_entities(self, names: Sequence[tuple[Scope, str]]) -> dict[tuple[Scope, str], int]:
        """Every name in one statement, the names as arrays."""
        if not names:
            return {}
        rows = self.rows(
            "SELECT e.user_id, e.agent_id, e.run_id, e.normalized, e.id FROM entities e "
            "JOIN unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS q(user_id, agent_id, run_id, normalized) "
            "USING (user_id, agent_id, run_id, normalized)",
            _columns([(*scope.values(), name) for scope, name in names]),
        )
        return {(Scope(user, agent, run), name): entity_id for user, agent, run, name, entity_id in rows}

    def nearest_entities(self, queries: Sequence[tuple[Scope, np.ndarray]]) -> list[tuple[int, float] | None]:
        """Every query in one statement: for each, an exact scan of its scope's entities (one
        scope holds few)."""
        if not queries:
            return []
        rows = self.rows(  # %b: the vectors go as their floats (binary), not as their text
            "SELECT q.i, e.id, e.distance FROM unnest(%s::text[], %s::text[], %s::text[], %b::vector[]) "
            "WITH ORDINALITY AS q(user_id, agent_id, run_id, embedding, i) CROSS JOIN LATERAL ("
            "SELECT id, embedding <=> q.embedding AS distance FROM entities WHERE user_id = q.user_id "
            "AND agent_id = q.agent_id AND run_id = q.run_id ORDER BY distance, id LIMIT 1) e",
            _columns([(*scope.values(), vector(embedding)) for scope, embedding in queries]),
        )
        nearest: list[tuple[int, float] | None] = [None] * len(queries)
        for i, entity_id, distance in rows:
            nearest[i - 1] = (entity_id, distance)
        return nearest

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

    def insert_entities(self, entities: Sequence[NewEntity]) -> list[int]:
        """Every entity in one statement, in the order given. Another server may have created the
        same entity since this one looked: then it is that one."""
        if not entities:
            return []
        self.conn.execute(
            "INSERT INTO entities (user_id, agent_id, run_id, text, normalized, entity_type, embedding) "
            "SELECT user_id, agent_id, run_id, text, normalized, entity_type, embedding "
            "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %b::vector[]) "
            "WITH ORDINALITY AS q(user_id, agent_id, run_id, text, normalized, entity_type, embedding, i) "
            "ORDER BY i ON CONFLICT (user_id, agent_id, run_id, normalized) DO NOTHING",
            _columns([(*entity.scope.values(), entity.text, entity.normalized, entity.entity_type,
                       vector(entity.embedding)) for entity in entities]),
        )
        ids = self.find_entities([(entity.scope, entity.normalized) for entity in entities])
        return [ids[(entity.scope, entity.normalized)] for entity in entities]

    def insert_links(self, links: Sequence[tuple[int, int, Scope]]) -> None:
        """One statement for them all: the links as three arrays."""
        if links:
            self.conn.execute(
                "INSERT INTO memory_entities (user_id, memory_rowid, entity_id) "
                "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) ON CONFLICT DO NOTHING",
                _columns([(scope.user_id, rowid, entity_id) for rowid, entity_id, scope in links]),
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
