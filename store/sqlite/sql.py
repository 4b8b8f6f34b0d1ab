"""What every statement module of the SQLite backend shares: the memory row's decoding, the
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

from store.backend import MemoryRow
from store.filters import Filter
from store.scope import Scope
from store.sql.text import exact_scope_condition, live_condition, scope_condition

from .filters import filter_sql


def memory_row(values: Sequence[Any]) -> MemoryRow:
    """A ``MemoryRow`` from the values of ``memory_columns``, its metadata decoded."""
    *head, metadata, created_at, updated_at, expiration = values
    return MemoryRow(*head, json.loads(metadata), created_at, updated_at, expiration)


def vector_blob(vector: np.ndarray) -> bytes:
    """float32 bytes, the layout sqlite-vec reads."""
    return np.asarray(vector, dtype=np.float32).tobytes()


def scope_sql(scope: Scope, alias: str = "") -> tuple[str, list[str]]:
    """A scope read as *within* (``store.sql.text.scope_condition``)."""
    return scope_condition(scope, "?", alias)


EXACT_SCOPE_SQL = exact_scope_condition("?")
"""A scope read as *exact* (bound to ``Scope.values()``): where one memory or entity is filed."""


def live_sql(filters: Filter | None, on: str | None, alias: str = "m") -> tuple[str, list[Any]]:
    """The metadata filter over ``alias`` and, when ``on`` is a day, "not expired before it"."""
    return live_condition(filter_sql(filters, alias), on, "?", alias)


def marks(values: Sequence[Any]) -> str:
    """One ``?`` per value, for ``IN (…)``."""
    return ",".join("?" * len(values))


class Statements:
    """A connection inside a read or write transaction, which the statement mixins query."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn
