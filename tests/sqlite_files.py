"""For the SQLite-only tests: the engine's database file opened beside it, as another process
(or a damaged disk) would, to look at its tables or change them behind the engine's back."""

from __future__ import annotations

from store import Engine
from store.sqlite import connection


def execute(engine: Engine, sql: str, bindings: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Run statements on the engine's file from a connection of their own, committed at once;
    the rows the last one returns."""
    conn = connection.connect(engine.backend.path)
    try:
        return conn.execute(sql, bindings).fetchall()
    finally:
        conn.close()
