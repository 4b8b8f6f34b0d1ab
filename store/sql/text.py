"""What the SQL backends share: the columns of a memory row, and the scope and live-memory conditions written
with each driver's placeholder (``?`` for SQLite, ``%s`` for psycopg)."""

from __future__ import annotations

import dataclasses
from typing import Any

from store.backend import MemoryRow, TokenRow
from store.scope import SCOPE_KEYS, Scope

MEMORY_COLUMNS = tuple(field.name for field in dataclasses.fields(MemoryRow))
"""The columns every backend stores a ``MemoryRow`` in, in its order."""
TOKEN_COLUMNS = tuple(field.name for field in dataclasses.fields(TokenRow))
"""The columns of the ``tokens`` table, in the order of ``TokenRow``."""


def memory_columns(alias: str = "") -> str:
    """The columns of a ``MemoryRow``, in its order, optionally over a table alias."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + column for column in MEMORY_COLUMNS)


DEGRADED_MEMORIES_SQL = f"SELECT {memory_columns('m')} FROM memories m WHERE m.analysis_degraded ORDER BY m.rowid"
"""Every memory the language model failed on (``NewMemory.analysis_degraded``), in key order; its
condition is the partial index ``memories_analysis_degraded``'s, word for word, so it reads only
the marked rows on both backends."""
DEGRADED_COUNT_SQL = (
    "SELECT n FROM (SELECT count(*) AS n FROM memories WHERE analysis_degraded) AS marked WHERE n > 0"
)
"""How many memories are marked, as one row, or no row when none is (a probe of ``doctor --check``)."""


def scope_condition(scope: Scope, placeholder: str, alias: str = "") -> tuple[str, list[str]]:
    """A scope read as *within*: equality on each id it names; unnamed ones match anything."""
    prefix = f"{alias}." if alias else ""
    named = scope.named()
    return " AND ".join(f"{prefix}{key} = {placeholder}" for key in named) or "TRUE", list(named.values())


def exact_scope_condition(placeholder: str) -> str:
    """A scope read as *exact* (bound to ``Scope.values()``): where one memory or entity is filed."""
    return " AND ".join(f"{key} = {placeholder}" for key in SCOPE_KEYS)


def live_condition(
    filtered: tuple[str, list[Any]], on: str | None, placeholder: str, alias: str = "m"
) -> tuple[str, list[Any]]:
    """A compiled metadata filter over ``alias`` and, when ``on`` is a day, "not expired before it"."""
    where, params = filtered
    if on is None:
        return where, params
    return (f"({where}) AND ({alias}.expiration_date IS NULL OR {alias}.expiration_date >= {placeholder})",
            [*params, on])
