"""What every statement module of the PostgreSQL backend shares: the memory row's columns and
the scope and live-memory conditions.

Values are always bound parameters (psycopg's ``%s``); the only text spliced into SQL is
identifiers chosen in this package and filter SQL from ``store.postgres.filters``, which binds
its values too. Every condition on a scope names ``user_id`` when the scope does, so each
statement of one user's reads and writes stays on that user's rows (``docs/postgres.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from ..backend import MemoryRow
from ..filters import Filter
from ..scope import SCOPE_KEYS, Scope
from .filters import filter_sql

MEMORY_COLUMNS = (
    "rowid", "id", "text", "hash", "user_id", "agent_id", "run_id", "actor_id", "role", "metadata",
    "created_at", "updated_at", "expiration_date",
)


def memory_columns(alias: str = "") -> str:
    """The columns of a ``MemoryRow``, in its order, optionally over a table alias."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + column for column in MEMORY_COLUMNS)


def memory_row(values: Sequence[Any]) -> MemoryRow:
    """A ``MemoryRow`` from the values of ``memory_columns`` (psycopg decodes the JSONB)."""
    return MemoryRow(*values)


def scope_sql(scope: Scope, alias: str = "") -> tuple[str, list[str]]:
    """A scope read as *within*: equality on each id it names; unnamed ones match anything."""
    prefix = f"{alias}." if alias else ""
    named = scope.named()
    return " AND ".join(f"{prefix}{key} = %s" for key in named) or "TRUE", list(named.values())


def user_sql(scope: Scope, alias: str = "") -> tuple[str, list[str]]:
    """The scope's user alone (``TRUE`` when it names none): what a lookup by key adds, so the
    statement stays on that user's rows (one shard, when the tables are distributed by user)."""
    return scope_sql(Scope(scope.user_id), alias)


EXACT_SCOPE_SQL = " AND ".join(f"{key} = %s" for key in SCOPE_KEYS)
"""A scope read as *exact* (bound to ``Scope.values()``): where one memory or entity is filed."""


def live_sql(filters: Filter | None, on: str | None, alias: str = "m") -> tuple[str, list[Any]]:
    """The metadata filter over ``alias`` and, when ``on`` is a day, "not expired before it"."""
    where, params = filter_sql(filters, alias)
    if on is None:
        return where, params
    return f"({where}) AND ({alias}.expiration_date IS NULL OR {alias}.expiration_date >= %s)", [*params, on]


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
