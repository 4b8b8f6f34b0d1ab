"""The SQLite snapshot and transaction: the statement mixins over one connection."""

from __future__ import annotations

from store.sql.tokens import TokenReads, TokenWrites

from .entities import EntityReads, EntityWrites
from .memories import MemoryReads, MemoryWrites
from .signals import SignalReads


class SQLiteSnapshot(MemoryReads, EntityReads, SignalReads, TokenReads):
    """``store.backend.Snapshot`` over a connection inside a read transaction."""


class SQLiteTransaction(SQLiteSnapshot, MemoryWrites, EntityWrites, TokenWrites):
    """``store.backend.Transaction`` over a connection inside a write transaction."""
