"""The base of every statement mixin of both SQL backends: a connection inside a transaction,
and the backend's ``Dialect`` that shared statements are written against."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from .dialect import Dialect


class Statements:
    """A connection inside a read or write transaction, which the statement mixins query.

    Both drivers' connections answer ``execute(sql, params)`` with a cursor that fetches; each
    backend's subclass names its ``dialect``."""

    dialect: ClassVar[Dialect]

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of one statement."""
        return self.conn.execute(sql, params).fetchall()

    def row(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row of one statement, if any."""
        return self.conn.execute(sql, params).fetchone()

    def write_rows(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], types: Sequence[str] = ()
    ) -> None:
        """Append rows of ``columns`` to ``table`` in one go, the way the backend loads many rows
        fastest (each backend's subclass says how); ``types``, the columns' SQL types, lets a
        backend send the values in a binary format."""
        raise NotImplementedError
