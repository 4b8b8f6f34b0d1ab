"""A PostgreSQL database with pgvector as a trimem backend: its sessions and capabilities.

Each process holds a small pool of connections. A snapshot is a repeatable-read, read-only
transaction (several reads, one state); a write is one read-committed transaction. Several
servers share one database: the schema migrates once under an advisory lock, and the
transaction's locks keep deduplication and ids whole across them
(``store.postgres.statements``). A role without the right to write opens the store read-only.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

from psycopg import IsolationLevel

from store.analysis.nlp import NLP
from store.backend import Capability
from store.config import database_location
from store.errors import DatabaseUnavailable, TrimemError
from store.records import Violation

from . import connection, maintenance, schema
from .statements import PostgresSnapshot, PostgresTransaction


class PostgresBackend:
    """``store.backend.Backend`` over one PostgreSQL database."""

    capabilities: frozenset[Capability] = frozenset({"check"})

    def __init__(self, url: str, model: str, dimension: int, *, pool_size: int, check_model: bool = True,
                 create: bool = True) -> None:
        self.location = database_location(url)
        self._model = model
        with connection.connect(url, self.location) as conn, connection.translated(self.location):
            schema.ensure_schema(conn, model, dimension, self.location, check_model=check_model, create=create)
            self.read_only = not conn.execute(
                "SELECT has_table_privilege('memories', 'INSERT') AND NOT pg_is_in_recovery()"
            ).fetchone()[0]
        self._pool = connection.Pool(url, self.location, pool_size)
        self._model_checked: weakref.WeakSet[Any] = weakref.WeakSet()
        """The pooled connections whose database was found to record this process's model."""

    def refuse_write(self) -> TrimemError:
        return DatabaseUnavailable(
            f"{self.location} can only be read by this role (or is a standby server); writes need a role with "
            f"INSERT, UPDATE and DELETE on the trimem tables, named in {connection.SETTING}"
        )

    def close(self) -> None:
        self._pool.close()

    @contextlib.contextmanager
    def _session(self, *, write: bool) -> Iterator[Any]:
        with connection.translated(self.location), self._pool.connection() as conn:
            conn.isolation_level = IsolationLevel.READ_COMMITTED if write else IsolationLevel.REPEATABLE_READ
            conn.read_only = not write
            with conn.transaction():
                self._require_model(conn)
                yield conn

    def _require_model(self, conn: Any) -> None:
        """Refuse a database that records another embedding model, asked once a connection: on
        PostgreSQL nothing changes the model of a database in place (``trimem reembed`` is SQLite's
        alone), and a database dropped and made again at the same address ends every connection to
        the old one, so each connection to the new one asks again. One round trip fewer a call."""
        if conn not in self._model_checked:
            schema.require_model(conn, self._model, self.location)
            self._model_checked.add(conn)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[PostgresSnapshot]:
        with self._session(write=False) as conn:
            yield PostgresSnapshot(conn)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[PostgresTransaction]:
        with self._session(write=True) as conn:
            transaction = PostgresTransaction(conn)
            yield transaction
            transaction.write_keyword_counts()

    def status(self) -> dict[str, Any]:
        with self._session(write=False) as conn:
            return {"database": self.location, "binding": "psycopg", **maintenance.versions(conn), **schema.meta(conn),
                    "counts": PostgresSnapshot(conn).counts()}

    def size_bytes(self) -> int:
        with self._session(write=False) as conn:
            return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]

    # --- capabilities ------------------------------------------------------------------

    def check(self, nlp: NLP | None) -> list[Violation]:
        with self._session(write=False) as conn:
            return maintenance.check(conn)
