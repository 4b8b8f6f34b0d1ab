"""The one migration runner of both SQL backends: read the schema's version, and when it is
behind, take the backend's lock, read it again, run the numbered migrations it lacks, and record
the version and the embedding model.

Each backend keeps its own numbered migrations (never edited once released), its lock (SQLite:
its write transaction; PostgreSQL: an advisory lock, so several servers migrate once) and its
messages; what a current schema is, and the order of the steps, are decided here. A current
schema is only read, so a read-only file or role opens it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from store.errors import SchemaMismatch

from .dialect import Dialect

Migration = Callable[[Any, int], None]
"""One numbered step: it changes the schema over a connection, given the embedding dimension."""


@dataclass(frozen=True)
class Migrations:
    """One backend's migrations and how it reads, locks and names its database."""

    steps: tuple[Migration, ...]
    dialect: Dialect
    database: str
    """How messages name the database: "this database", or where it is."""
    state: Callable[[Any], tuple[int, dict[str, str]]]
    """The schema version (0 for a new database) and the ``meta`` rows."""
    reading: Callable[[Any], AbstractContextManager[Any]]
    """A read transaction, in which the state is read first."""
    locked: Callable[[Any], AbstractContextManager[Any]]
    """The write transaction under the backend's lock, in which the state is read again and migrated."""
    missing: Callable[[Any], Exception]
    """What opening without ``create`` raises when there is no schema yet."""
    model_mismatch: Callable[[str, str, str], str]
    """The message refusing another model: given the recorded one, a note on its size ("" when
    that is the same) and the configured one, it names the way out on this backend."""

    @property
    def version(self) -> int:
        return len(self.steps)

    def ensure(self, conn: Any, model_name: str, dimension: int, *, check_model: bool = True,
               create: bool = True) -> None:
        """Create or upgrade the schema, and refuse a database built for another embedding model
        (unless ``check_model`` is false: only to re-embed it with that model). Without
        ``create`` a database holding no schema yet is refused (``missing``), and none is written."""
        with self.reading(conn):
            version, stored = self.state(conn)
        if version == 0 and not create:
            raise self.missing(conn)
        if version == self.version and stored:
            if check_model:
                self._check_model(stored, model_name, dimension)
            return
        mark = self.dialect.placeholder
        with self.locked(conn):
            version, stored = self.state(conn)  # again under the lock: another process may have begun
            if version > self.version:
                raise SchemaMismatch(
                    f"{self.database} has schema version {version}, newer than this trimem understands "
                    f"({self.version}); upgrade trimem"
                )
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            for number in range(version, self.version):
                self.steps[number](conn, dimension)
            if version < self.version:
                conn.execute("DELETE FROM schema_version")
                conn.execute(f"INSERT INTO schema_version (version) VALUES ({mark})", (self.version,))
            if not stored:
                conn.execute(
                    f"INSERT INTO meta (key, value) VALUES ('embedding_model', {mark}), ('embedding_dimension', {mark})",
                    (model_name, str(dimension)),
                )
            elif check_model:
                self._check_model(stored, model_name, dimension)

    def _check_model(self, stored: dict[str, str], model_name: str, dimension: int) -> None:
        """Refuse the vectors of another model than the configured one: they live in another
        space, so distances mean nothing, even at the same size."""
        recorded, size = stored["embedding_model"], stored["embedding_dimension"]
        if recorded == model_name and int(size) == dimension:
            return
        sizes = "" if int(size) == dimension else f" ({size}-dimensional vectors, the configured model makes {dimension})"
        raise SchemaMismatch(self.model_mismatch(recorded, sizes, model_name))
