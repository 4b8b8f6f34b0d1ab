"""What every statement module of the SQLite backend shares: its ``Dialect`` and the vector layout.

Values are always bound parameters; the only text spliced into SQL is identifiers chosen in
this package and filter SQL from ``store.sqlite.filters``, which binds its values too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from store.sql import statements
from store.sql.dialect import Dialect

from .filters import filter_sql


def _json_param(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _json_value(value: str | None) -> dict[str, Any] | None:
    return None if value is None else json.loads(value)


DIALECT = Dialect(
    placeholder="?", binds_arrays=False, index_off="+", find="instr", filter_sql=filter_sql,
    json_param=_json_param, json_value=_json_value,
)
"""SQLite's SQL: ``?``, one placeholder per listed value, JSON as text, and the unary ``+`` that
keeps the planner on the lookup a statement means (through the scope index it walks the scope)."""


def vector_blob(vector: np.ndarray) -> bytes:
    """float32 bytes, the layout sqlite-vec reads."""
    return np.asarray(vector, dtype=np.float32).tobytes()


class Statements(statements.Statements):
    """A connection inside a read or write transaction, which the statement mixins query."""

    dialect = DIALECT

    def write_rows(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], types: Sequence[str] = ()
    ) -> None:
        """One prepared ``INSERT`` run for every row (the file is in this process: no round trips,
        and values are bound as they are, so ``types`` is not needed)."""
        if rows:
            self.conn.executemany(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({DIALECT.marks(len(columns))})", rows
            )
