"""One SQLite file as a trimem backend: its sessions and its capabilities.

One write connection guarded by a lock, and a pool of read connections, so a search never
waits behind a write that is itself waiting for another process's lock. Several processes
may open the same file (WAL, busy timeout, immediate transactions). A file this process
cannot write is opened read-only: reads work, writes are refused with a message.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw

from store import files
from store.analysis.embeddings import Embedder
from store.analysis.nlp import NLP
from store.backend import Capability, Progress
from store.errors import TrimemError
from store.records import ReembedReport, RepairReport, Violation

from . import connection, maintenance, reembed, schema
from .held_vectors import HeldVectors
from .statements import SQLiteSnapshot, SQLiteTransaction


class SQLiteBackend:
    """``store.backend.Backend`` over one SQLite file with sqlite-vec and keyword postings."""

    capabilities: frozenset[Capability] = frozenset(
        {"check", "deep_check", "repair", "reembed", "backup", "file_modes"}
    )

    def __init__(self, path: Path, model: str, dimension: int, *, check_model: bool = True,
                 create: bool = True, held_vector_bytes: int = 0) -> None:
        """``check_model`` false opens a file that records another embedding model, only to
        re-embed it: every snapshot and transaction is refused until that completes.
        ``held_vector_bytes``: the memory the vectors of heavy users may fill
        (``store.sqlite.held_vectors``), 0 for none."""
        self.path = Path(path)
        self.location = str(self.path)
        self._model, self._dimension = model, dimension
        self._lock = threading.RLock()
        self._conn = schema.open_database(self.path, model, dimension, check_model=check_model, create=create)
        # Read once, now: the write connection may only be touched under ``_lock``, and whether
        # the file opened read-only (and why) never changes while it is open.
        self._refusal = connection.write_refusal(self._conn) if self._conn.readonly("main") else None
        self.read_only = self._refusal is not None
        self._readers: list[apsw.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        self.held_vectors = HeldVectors(held_vector_bytes)

    def refuse_write(self) -> TrimemError:
        assert self._refusal is not None, "refuse_write is for a read-only store"
        return self._refusal()

    def close(self) -> None:
        """Close every connection (readers in use close when their read ends)."""
        with self._readers_lock:
            self._closed = True
            idle, self._readers = self._readers, []
        for conn in idle:
            conn.close()
        with self._lock:
            self._conn.close()
        self.held_vectors.close()

    @contextlib.contextmanager
    def _reader(self) -> Iterator[apsw.Connection]:
        """A read connection of the pool, inside one read transaction (one snapshot)."""
        with self._readers_lock:
            conn = self._readers.pop() if self._readers else None
        if conn is None:
            conn = connection.connect(self.path)
        try:
            with connection.read_transaction(conn):
                self._require_model(conn)
                yield conn
        finally:
            with self._readers_lock:
                keep = not self._closed
                if keep:
                    self._readers.append(conn)
            if not keep:
                conn.close()

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[SQLiteSnapshot]:
        with self._reader() as conn:
            yield SQLiteSnapshot(conn, self.held_vectors)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[SQLiteTransaction]:
        with self._lock, connection.write_transaction(self._conn):
            self._require_model(self._conn)
            yield SQLiteTransaction(self._conn)

    def _require_model(self, conn: apsw.Connection) -> None:
        """Refuse to read or write vectors of another model: another process may have re-embedded
        the file since it was opened here (one primary-key read of ``meta``)."""
        schema.require_model(conn, self._model, self._dimension)

    def status(self) -> dict[str, Any]:
        with self.snapshot() as view:
            return {"database": self.location, "binding": "apsw", **connection.versions(view.conn), **schema.meta(view.conn),
                    "counts": view.counts()}

    def size_bytes(self) -> int:
        files = [self.path, Path(f"{self.path}-wal")]
        return sum(f.stat().st_size for f in files if f.exists())

    # --- capabilities ------------------------------------------------------------------

    def check(self, nlp: NLP | None) -> list[Violation]:
        with self._lock:
            return maintenance.check(self._conn, nlp)

    def repair(self, embedder: Embedder, nlp: NLP) -> RepairReport:
        with self._lock:
            return maintenance.repair(self._conn, embedder, nlp)

    def reembed(self, embedder: Embedder, progress: Progress | None) -> ReembedReport:
        with self._lock:
            return reembed.reembed(self._conn, embedder, progress)

    def backup(self, destination: Path) -> None:
        with self._reader() as conn:
            maintenance.backup(conn, destination)

    def file_warnings(self) -> list[str]:
        """The database file, the files beside it and its folder, where others may read or write them."""
        return files.open_to_others([*connection.database_files(self.path), self.path.absolute().parent])

