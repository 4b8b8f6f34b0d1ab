"""What really differs between the SQL of the two backends, as one value each backend makes once:
the driver's placeholder, how a list of values is bound, how JSON crosses the driver, how the
planner is kept off an index, and the backend's filter compiler.

Every statement that differs only by these is written once, against a ``Dialect``, and each
condition on a scope, on expiry or on a question is built here, so both backends apply one
rule. No driver is imported: each backend builds its instance from its own functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from store.backend import MemoryRow
from store.filters import Filter
from store.scope import SCOPE_KEYS, Scope

Sql = tuple[str, list[Any]]
"""A SQL fragment and its parameters, in the order of its placeholders."""

TRAILING_SPACE = " \t\n\r"
"""What a turn may end in after its question mark and still ask: spaces, tabs and line ends."""


def is_expired(expiration_date: str | None, on: str) -> bool:
    """A memory expires after its expiration day: it is left out from the day after
    (``expired_sql`` is the same rule in SQL)."""
    return expiration_date is not None and expiration_date < on


@dataclass(frozen=True)
class Dialect:
    """One backend's SQL: its placeholder and the few forms that differ around it."""

    placeholder: str
    """Where a bound value goes: ``?`` (SQLite) or ``%s`` (psycopg)."""
    binds_arrays: bool
    """Whether a list binds as one array parameter (``= ANY(%s)``) rather than one per value (``IN (?, ?)``)."""
    index_off: str
    """Put before a column to keep the planner off its index (SQLite's unary ``+``); ``""`` where none is needed."""
    find: str
    """The function giving where a text first holds another, 0 when it does not (``instr``, ``strpos``)."""
    filter_sql: Callable[[Filter | None, str], Sql]
    """The backend's compiler of a parsed metadata filter over a table alias."""
    json_param: Callable[[dict[str, Any] | None], Any]
    """A JSON object as the driver binds it."""
    json_value: Callable[[Any], dict[str, Any] | None]
    """A stored JSON object as the driver returns it, decoded."""

    def holds_words_sql(self, column: str, words: Sequence[str]) -> Sql:
        """``column``, a normalised name (lower case, one space between words), holds every one of
        ``words`` as a whole word: "atlas" in "project atlas", not in "atlases"."""
        if not words:
            return "FALSE", []
        spaced = f"' ' || {column} || ' '"
        return " AND ".join(f"{self.find}({spaced}, {self.placeholder}) > 0" for _ in words), [f" {w} " for w in words]

    def marks(self, count: int) -> str:
        """``count`` placeholders, for ``VALUES (…)``."""
        return ", ".join([self.placeholder] * count)

    def memory_row(self, values: Sequence[Any]) -> MemoryRow:
        """A ``MemoryRow`` from the values of ``store.sql.text.memory_columns``, its metadata decoded."""
        *head, metadata, created_at, updated_at, expiration = values
        return MemoryRow(*head, self.json_value(metadata), created_at, updated_at, expiration)

    def in_sql(self, column: str, values: Sequence[Any]) -> Sql:
        """``column`` is one of ``values``."""
        if self.binds_arrays:
            return f"{column} = ANY({self.placeholder})", [list(values)]
        return f"{column} IN ({','.join([self.placeholder] * len(values))})", list(values)

    def scope_sql(self, scope: Scope, alias: str = "") -> Sql:
        """A scope read as *within*: equality on each id it names; unnamed ones match anything."""
        prefix = f"{alias}." if alias else ""
        named = scope.named()
        return " AND ".join(f"{prefix}{key} = {self.placeholder}" for key in named) or "TRUE", list(named.values())

    def exact_scope_sql(self) -> str:
        """A scope read as *exact* (bound to ``Scope.values()``): where one memory or entity is filed."""
        return " AND ".join(f"{key} = {self.placeholder}" for key in SCOPE_KEYS)

    def expired_sql(self, alias: str = "m") -> str:
        """``is_expired`` in SQL, over ``alias``'s expiration day (``""``: the bare column) and the
        day bound after it."""
        column = f"{alias}.expiration_date" if alias else "expiration_date"
        return f"({column} IS NOT NULL AND {column} < {self.placeholder})"

    def live_sql(self, filters: Filter | None, on: str | None, alias: str = "m") -> Sql:
        """The metadata filter over ``alias`` and, when ``on`` is a day, "not expired before it"."""
        where, params = self.filter_sql(filters, alias)
        if on is None:
            return where, params
        return f"({where}) AND NOT {self.expired_sql(alias)}", [*params, on]

    def asks_sql(self, column: str) -> Sql:
        """The text in ``column`` asks a question: its last character but trailing space is ``?``."""
        return f"rtrim({column}, {self.placeholder}) LIKE {self.placeholder}", [TRAILING_SPACE, "%?"]
