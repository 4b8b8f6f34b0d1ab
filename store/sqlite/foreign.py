"""Another application's SQLite file, read as it is, for the peers reader (``store.exchange.peers``).

Its schema is its own: columns are looked up first, and only the ones the caller names
(identifiers chosen in code) are read. The file is opened read-only and never changed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import apsw

from store.errors import InvalidArgument


def foreign_rows(
    path: str, table: str, required: Sequence[str], optional: Sequence[str]
) -> tuple[int, Iterator[dict[str, Any]]]:
    """How many rows ``table`` of another application's SQLite file has, and the rows in rowid
    order as ``{"rowid": …, column: value}``: the ``required`` columns (refused without them)
    and those of the ``optional`` ones it has. A view or a table without rowids (no application
    whose files trimem reads makes either) is refused."""
    try:
        conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error as exc:
        raise InvalidArgument(f"cannot open {path} ({exc}); check the path") from None
    try:
        kind = conn.execute("SELECT type, wr FROM pragma_table_list(?) WHERE schema = 'main'", (table,)).fetchone()
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        total = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] if present else 0
    except apsw.Error as exc:
        conn.close()
        raise InvalidArgument(f"{path} is not a readable SQLite database ({exc})") from None
    if missing := [column for column in required if column not in present]:
        conn.close()
        raise InvalidArgument(f"{path} has no {table} table" if not present else
                              f"{path}'s {table} table has no {missing[0]} column")
    if tuple(kind) != ("table", 0):
        conn.close()
        what = {"view": "a view", "table": "a WITHOUT ROWID table"}.get(kind[0], f"a {kind[0]} table")
        raise InvalidArgument(f"{path}'s {table} is {what}, not the table of rows that format keeps; point at "
                              "its own database file")
    columns = [*required, *(column for column in optional if column in present)]

    def rows() -> Iterator[dict[str, Any]]:
        try:
            for values in conn.execute(f"SELECT rowid, {', '.join(columns)} FROM {table} ORDER BY rowid"):
                yield dict(zip(["rowid", *columns], values))
        finally:
            conn.close()

    return total, rows()
