"""What every statement module of the PostgreSQL backend shares: its ``Dialect``, the scope's
user alone, and the vector type.

Values are always bound parameters (psycopg's ``%s``); the only text spliced into SQL is
identifiers chosen in this package and filter SQL from ``store.postgres.filters``, which binds
its values too. Every condition on a scope names ``user_id`` when the scope does, so each
statement of one user's reads and writes stays on that user's rows (``docs/postgres.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from psycopg.types.json import Jsonb

from store.scope import Scope
from store.sql import statements
from store.sql.dialect import Dialect, Sql

from .filters import filter_sql


def _json_param(value: dict[str, Any] | None) -> Jsonb | None:
    return None if value is None else Jsonb(value)


DIALECT = Dialect(
    placeholder="%s", binds_arrays=True, index_off="", find="strpos", filter_sql=filter_sql,
    json_param=_json_param, json_value=lambda value: value,  # psycopg decodes jsonb itself
)
"""PostgreSQL's SQL through psycopg: ``%s``, a list bound as one array, JSON as ``Jsonb``."""


def user_sql(scope: Scope, alias: str = "") -> Sql:
    """The scope's user alone (``TRUE`` when it names none): what a lookup by key adds, so the
    statement stays on that user's rows (one shard, when the tables are distributed by user)."""
    return DIALECT.scope_sql(Scope(scope.user_id), alias)


def vector(embedding: np.ndarray) -> np.ndarray:
    """An embedding as float32, the type pgvector's adapter writes as ``vector``."""
    return np.asarray(embedding, dtype=np.float32)


class Statements(statements.Statements):
    """A connection inside a read or write transaction, which the statement mixins query."""

    dialect = DIALECT

    def rows_planned_for(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of a statement whose best plan depends on how many rows its user has,
        planned for these parameters on every call. psycopg prepares a statement run often, and
        PostgreSQL then reuses a plan made for any user, sized for the average one: asked for
        the user who holds nine in ten memories of a store shared with 1,000 small users, it
        scanned all 100,000 of that user's vectors instead of the HNSW index (112 ms instead
        of 11; docs/benchmarks.md)."""
        return self.conn.execute(sql, params, prepare=False).fetchall()

    def write_rows(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], types: Sequence[str] = ()
    ) -> None:
        """``COPY … FROM STDIN``: every row in one stream, one round trip, rather than one each.
        Given the columns' ``types``, in PostgreSQL's binary format, which writes a vector as its
        floats rather than as their text."""
        if not rows:
            return
        binary = " (FORMAT BINARY)" if types else ""
        with self.conn.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN{binary}") as copy:
            if types:
                copy.set_types(types)
            for row in rows:
                copy.write_row(row)
