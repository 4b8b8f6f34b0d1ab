"""What every statement module of the SQLite backend shares: the memory row's columns, the
scope and live-memory conditions, and the vector layout.

Values are always bound parameters; the only text spliced into SQL is identifiers chosen in
this package and filter SQL from ``store.sqlite.filters``, which binds its values too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import apsw
import numpy as np

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
    """A ``MemoryRow`` from the values of ``memory_columns``, its metadata decoded."""
    *head, metadata, created_at, updated_at, expiration = values
    return MemoryRow(*head, json.loads(metadata), created_at, updated_at, expiration)


def vector_blob(vector: np.ndarray) -> bytes:
    """float32 bytes, the layout sqlite-vec reads."""
    return np.asarray(vector, dtype=np.float32).tobytes()


def scope_sql(scope: Scope, alias: str = "") -> tuple[str, list[str]]:
    """A scope read as *within*: equality on each id it names; unnamed ones match anything."""
    prefix = f"{alias}." if alias else ""
    named = scope.named()
    return " AND ".join(f"{prefix}{key} = ?" for key in named) or "1", list(named.values())


EXACT_SCOPE_SQL = " AND ".join(f"{key} = ?" for key in SCOPE_KEYS)
"""A scope read as *exact* (bound to ``Scope.values()``): where one memory or entity is filed."""


def live_sql(filters: Filter | None, on: str | None, alias: str = "m") -> tuple[str, list[Any]]:
    """The metadata filter over ``alias`` and, when ``on`` is a day, "not expired before it"."""
    where, params = filter_sql(filters, alias)
    if on is None:
        return where, params
    return f"({where}) AND ({alias}.expiration_date IS NULL OR {alias}.expiration_date >= ?)", [*params, on]


def marks(values: Sequence[Any]) -> str:
    """One ``?`` per value, for ``IN (…)``."""
    return ",".join("?" * len(values))


class Statements:
    """A connection inside a read or write transaction, which the statement mixins query."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn
