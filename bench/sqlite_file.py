"""A benchmark's SQLite file: read directly, for what ``store.backend.Snapshot`` does not offer;
its size on disk; and removed with its WAL before and after a run.

Some benchmarks need rows the engine never reads whole (every stored vector, every memory's
lemmas, the entity links of a scope) or a floor that is bare SQL. They open a connection of
their own to the engine's file, as another process would, so the engine's connections are
left alone; the engine's own statements run over it too (``SQLiteSnapshot``), so a bench's
SQL and the engine's reads see one state of the file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from store.sqlite import connection
from store.sqlite.statements import SQLiteSnapshot


@contextlib.contextmanager
def reading(path: Path) -> Iterator[SQLiteSnapshot]:
    """One read transaction on the file at ``path``: the engine's reads as methods, and the
    bench's own SQL on ``.conn``."""
    conn = connection.connect(path)
    try:
        with connection.read_transaction(conn):
            yield SQLiteSnapshot(conn)
    finally:
        conn.close()


def file_bytes(path: Path) -> int:
    """The database file and its WAL, if any."""
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def remove_db(path: Path) -> None:
    """Delete a benchmark database file and its WAL and shared-memory files."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
