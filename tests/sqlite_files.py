"""For the SQLite-only tests: the engine's database file opened beside it, as another process
(or a damaged disk) would, to look at its tables or change them behind the engine's back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import apsw

from store import Engine
from store.sqlite import connection


@contextlib.contextmanager
def reading(engine: Engine) -> Iterator[apsw.Connection]:
    """A connection of its own to the engine's file, inside one read transaction."""
    conn = connection.connect(engine.backend.path)
    try:
        with connection.read_transaction(conn):
            yield conn
    finally:
        conn.close()


def execute(engine: Engine, sql: str, bindings: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Run statements on the engine's file from a connection of their own, committed at once;
    the rows the last one returns."""
    conn = connection.connect(engine.backend.path)
    try:
        return conn.execute(sql, bindings).fetchall()
    finally:
        conn.close()
