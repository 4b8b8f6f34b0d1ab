"""The PostgreSQL snapshot and transaction: the statement mixins over one connection."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import psycopg

from store.backend import MemoryRow
from store.scope import Scope
from store.sql.tokens import TokenReads, TokenWrites

from .entities import EntityReads, EntityWrites
from .memories import MemoryReads, MemoryWrites
from .signals import SignalReads


class PostgresSnapshot(MemoryReads, EntityReads, SignalReads, TokenReads):
    """``store.backend.Snapshot`` over a connection inside a repeatable-read, read-only transaction."""


class PostgresTransaction(PostgresSnapshot, MemoryWrites, EntityWrites, TokenWrites):
    """``store.backend.Transaction`` over a connection inside a read-committed transaction.

    Several servers write at once, so the two reads a write decides on take a transaction
    lock on what they look up first: a second writer of the same text in the same scope (or
    of the same memory id) waits for the first to commit, then sees its memory. So
    deduplication and ids hold across processes, as the single SQLite writer makes them hold.

    A write that changes stored rows reads them first (an update merges metadata into the
    stored object, a delete records what it removes): those reads lock the rows they return
    (``FOR UPDATE``, in key order), so a second writer of the same memory waits for the first
    to commit and then reads what it wrote. Read committed alone would let both read the same
    old row and the second overwrite the first's change.

    A user's entities change under a transaction lock of that user, taken at the first lookup
    of an entity to link or the first link removed, and held to the commit: the writers that
    link and unlink one user's entities take turns from there. Without it, two writers each
    removing one of an entity's last two links saw the other's link and both kept the entity,
    linked to nothing; and an entity deleted as unlinked while another writer linked it took
    the new link with it (the cascade reads the latest rows).
    """

    ROW_LOCK = " FOR UPDATE"

    def __init__(self, conn: psycopg.Connection) -> None:
        super().__init__(conn)
        self.unlinked = set()
        self.keyword_changes = {}
        self._entity_users: set[str] = set()

    def _lock(self, *key: str) -> None:
        self.conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("\x1f".join(key),))

    def _lock_entities(self, user_ids: Iterable[str]) -> None:
        """The users' entity locks this transaction does not hold yet, in order."""
        for user_id in sorted(set(user_ids) - self._entity_users):
            self._lock("entities", user_id)
            self._entity_users.add(user_id)

    def find_entities(self, names: Sequence[tuple[Scope, str]]) -> dict[tuple[Scope, str], int]:
        self._lock_entities(scope.user_id for scope, _ in names)
        return super().find_entities(names)

    def unlink_entities(self, rowid: int, scope: Scope) -> None:
        self._lock_entities([scope.user_id])
        super().unlink_entities(rowid, scope)

    def find_by_hash(self, scope: Scope, text_hash: str) -> MemoryRow | None:
        self._lock("hash", *scope.values(), text_hash)
        return super().find_by_hash(scope, text_hash)

    def id_taken(self, memory_id: str, *, by_history: bool = True) -> bool:
        self._lock("id", memory_id)
        return super().id_taken(memory_id, by_history=by_history)
