"""What every statement module of the PostgreSQL backend shares: the memory row's decoding and
the scope and live-memory conditions.

Values are always bound parameters (psycopg's ``%s``); the only text spliced into SQL is
identifiers chosen in this package and filter SQL from ``store.postgres.filters``, which binds
its values too. Every condition on a scope names ``user_id`` when the scope does, so each
statement of one user's reads and writes stays on that user's rows (``docs/postgres.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg

from store.backend import MemoryRow
from store.filters import Filter
from store.scope import Scope
from store.sql.text import exact_scope_condition, live_condition, scope_condition

from .filters import filter_sql


def memory_row(values: Sequence[Any]) -> MemoryRow:
    """A ``MemoryRow`` from the values of ``memory_columns`` (psycopg decodes the JSONB)."""
    return MemoryRow(*values)


def scope_sql(scope: Scope, alias: str = "") -> tuple[str, list[str]]:
    """A scope read as *within* (``store.sql.text.scope_condition``)."""
    return scope_condition(scope, "%s", alias)


def user_sql(scope: Scope, alias: str = "") -> tuple[str, list[str]]:
    """The scope's user alone (``TRUE`` when it names none): what a lookup by key adds, so the
    statement stays on that user's rows (one shard, when the tables are distributed by user)."""
    return scope_sql(Scope(scope.user_id), alias)


EXACT_SCOPE_SQL = exact_scope_condition("%s")
"""A scope read as *exact* (bound to ``Scope.values()``): where one memory or entity is filed."""


def live_sql(filters: Filter | None, on: str | None, alias: str = "m") -> tuple[str, list[Any]]:
    """The metadata filter over ``alias`` and, when ``on`` is a day, "not expired before it"."""
    return live_condition(filter_sql(filters, alias), on, "%s", alias)


def vector(embedding: np.ndarray) -> np.ndarray:
    """An embedding as float32, the type pgvector's adapter writes as ``vector``."""
    return np.asarray(embedding, dtype=np.float32)


class Statements:
    """A connection inside a read or write transaction, which the statement mixins query."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of one statement."""
        return self.conn.execute(sql, params).fetchall()

    def row(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row of one statement, if any."""
        return self.conn.execute(sql, params).fetchone()
