"""The vectors of a process's heaviest users, held in its memory and searched there.

vec0 compares a query with each of a user's vectors in plain C: 62 ms for one user of 100,000
memories, where numpy's product over the same vectors held in memory takes about 8. So a
user with ``HELD_FROM`` memories or more has its vectors held by each process that searches
it, at most ``budget`` bytes in all, and its KNN runs there; smaller users stay with vec0,
whose scan of their own chunks costs little.

Held vectors follow the file through ``vector_changes`` (migration 12): triggers number anew
every memory whose row is inserted, deleted, rewritten or moved, so bringing a user's vectors
up to date reads only the memories numbered after the last one seen, within the caller's own
snapshot. A snapshot older than the held vectors searches with vec0 instead, and a user whose
held count differs from its count of memories is loaded again (or, if the file disagrees with
itself until ``trimem doctor --repair``, left to vec0). A user that does not fit in what the
budget leaves free is not held, and only a user idle for ``IDLE_SECONDS`` gives its room up:
users searched in turn never load each other out.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import apsw
import numpy as np

from store.scope import Scope

HELD_FROM = 10_000
"""Memories of a user from which its vectors are held: vec0 scans 10,000 in about 6 ms."""
IDLE_SECONDS = 600.0
"""A held user not searched for this long gives its room up to a user that needs it."""
RELOAD_SHARE = 0.25
"""Past this share of a user's memories changed at once, its vectors are read again whole."""

T = TypeVar("T")


def similarities(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each row of ``matrix`` times ``query``, on this thread: einsum's vector loop reads 100,000
    rows of 384 in 6.5 ms, where the matrix product (8 ms) hands them to OpenBLAS threads that
    then spin on both cores for a while, slowing the models of the next search by 6 ms."""
    return np.einsum("ij,j->i", matrix, query)


def best_first(similarity: np.ndarray, k: int) -> np.ndarray:
    """The places of the ``k`` largest of ``similarity`` (at most all of them), largest first."""
    k = min(k, len(similarity))
    if k <= 0:
        return np.zeros(0, dtype=np.intp)
    best = np.argpartition(similarity, len(similarity) - k)[len(similarity) - k:]
    return best[np.argsort(-similarity[best], kind="stable")]


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


class UserVectors:
    """One user's unit vectors, a row each, with each row's memory and the codes of its agent
    and run; a free row has rowid -1. Changed only under ``HeldVectors``'s lock."""

    def __init__(self, dimension: int, seq: int, rows: Sequence[tuple[int, bytes, str, str]]) -> None:
        self.seq = seq
        self.dimension = dimension
        self.used_at = time.monotonic()
        self.codes: dict[str, int] = {"": 0}
        count = len(rows)
        self.rowids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=count)
        self.matrix = np.frombuffer(b"".join(row[1] for row in rows), dtype=np.float32).reshape(count, dimension)
        norms = np.linalg.norm(self.matrix, axis=1, keepdims=True)
        self.matrix = self.matrix / np.where(norms > 0, norms, 1.0)
        self.agents = np.fromiter((self._code(row[2]) for row in rows), dtype=np.int32, count=count)
        self.runs = np.fromiter((self._code(row[3]) for row in rows), dtype=np.int32, count=count)
        self.slots: dict[int, int] = {int(rowid): slot for slot, rowid in enumerate(self.rowids)}
        self.free: list[int] = []

    @property
    def nbytes(self) -> int:
        return self.matrix.nbytes + self.rowids.nbytes + self.agents.nbytes + self.runs.nbytes

    @property
    def held(self) -> int:
        return len(self.slots)

    def _code(self, value: str) -> int:
        return self.codes.setdefault(value, len(self.codes))

    def put(self, rowid: int, embedding: bytes, agent_id: str, run_id: str) -> None:
        slot = self.slots.get(rowid)
        if slot is None:
            if not self.free:
                self._grow()
            slot = self.slots[rowid] = self.free.pop()
        self.matrix[slot] = _unit(np.frombuffer(embedding, dtype=np.float32))
        self.rowids[slot] = rowid
        self.agents[slot], self.runs[slot] = self._code(agent_id), self._code(run_id)

    def drop(self, rowid: int) -> None:
        slot = self.slots.pop(rowid, None)
        if slot is not None:
            self.rowids[slot] = -1
            self.matrix[slot] = 0.0
            self.free.append(slot)

    def _grow(self) -> None:
        old = len(self.rowids)
        new = max(16, old + old // 2)
        self.rowids = np.concatenate([self.rowids, np.full(new - old, -1, dtype=np.int64)])
        self.matrix = np.concatenate([self.matrix, np.zeros((new - old, self.dimension), dtype=np.float32)])
        self.agents = np.concatenate([self.agents, np.zeros(new - old, dtype=np.int32)])
        self.runs = np.concatenate([self.runs, np.zeros(new - old, dtype=np.int32)])
        self.free.extend(range(new - 1, old - 1, -1))

    def distances(self, embedding: np.ndarray, rowids: Sequence[int]) -> list[tuple[int, float]]:
        """(rowid, cosine distance) for each of ``rowids`` held here, in their order."""
        found = [(rowid, slot) for rowid in rowids if (slot := self.slots.get(rowid)) is not None]
        query = _unit(np.asarray(embedding, dtype=np.float32))
        similarity = similarities(self.matrix[[slot for _, slot in found]], query)
        return [(rowid, float(1.0 - value)) for (rowid, _), value in zip(found, similarity)]

    def nearest(self, embedding: np.ndarray, scope: Scope, k: int) -> list[tuple[int, float]]:
        """The ``k`` rows of ``scope`` nearest to ``embedding``, nearest first, as (rowid, cosine
        distance)."""
        similarity = similarities(self.matrix, _unit(np.asarray(embedding, dtype=np.float32)))
        if self.free or scope.agent_id or scope.run_id:
            within = self.rowids >= 0
            for ids, value in ((self.agents, scope.agent_id), (self.runs, scope.run_id)):
                if value:
                    within &= ids == self.codes.get(value, -1)
            similarity[~within] = -np.inf
            k = min(k, int(np.count_nonzero(within)))
        return [(int(self.rowids[slot]), float(1.0 - similarity[slot])) for slot in best_first(similarity, k)]


@dataclass(frozen=True)
class Ready:
    """A user's held vectors as one snapshot brought them up to date (``HeldVectors.ready``)."""

    vectors: UserVectors
    seq: int


class HeldVectors:
    """The vectors a process holds, by user (least recently searched first), within ``budget``
    bytes; one lock guards them all, and a search holds it while it computes."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._users: OrderedDict[str, UserVectors] = OrderedDict()
        self._disagreed: dict[str, int] = {}
        """Users whose vectors the file counted otherwise than their memories, at which ``seq``:
        not read again until something of theirs changes."""
        self._lock = threading.Lock()
        self._beside = ThreadPoolExecutor(1, thread_name_prefix="trimem-beside-held")

    def users(self) -> dict[str, int]:
        """Each held user's count of vectors."""
        with self._lock:
            return {user: vectors.held for user, vectors in self._users.items()}

    def ready(self, conn: apsw.Connection, user: str, count: int) -> Ready | None:
        """The vectors of ``user``, who has ``count`` memories, brought up to the snapshot on
        ``conn`` (read whole, or only what changed since), or None when this user is not held: too
        small, too large for the budget, or held as a newer snapshot saw it. Then vec0 answers."""
        if count < HELD_FROM:
            if user in self._users:
                with self._lock:
                    self._users.pop(user, None)
            return None
        (seq,) = conn.execute("SELECT coalesce(max(seq), 0) FROM vector_changes WHERE user_id = ?", (user,)).fetchone()
        with self._lock:
            vectors = self._current(conn, user, seq, count)
            return None if vectors is None else Ready(vectors, seq)

    def nearest(self, ready: Ready, embedding: np.ndarray, scope: Scope, k: int) -> list[tuple[int, float]] | None:
        """``UserVectors.nearest`` as ``ready`` found them; None if another search has brought them
        past that snapshot since (then vec0 answers)."""
        with self._lock:
            vectors = self._as_ready(ready, embedding)
            if vectors is None:
                return None
            vectors.used_at = time.monotonic()
            if self._users.get(scope.user_id) is vectors:  # not read again, nor let go, meanwhile
                self._users.move_to_end(scope.user_id)
            return vectors.nearest(embedding, scope, k)

    def distances(self, ready: Ready, embedding: np.ndarray, rowids: Sequence[int]) -> list[tuple[int, float]] | None:
        """``UserVectors.distances`` as ``ready`` found them, or None as for ``nearest``."""
        with self._lock:
            vectors = self._as_ready(ready, embedding)
            return None if vectors is None else vectors.distances(embedding, rowids)

    @staticmethod
    def _as_ready(ready: Ready, embedding: np.ndarray) -> UserVectors | None:
        """``ready``'s vectors if they are still as it found them (under the lock) and of the
        query's dimension."""
        vectors = ready.vectors
        return vectors if vectors.seq == ready.seq and vectors.dimension == len(embedding) else None

    def beside(self, read: Callable[..., T], *args: Any) -> Future[T]:
        """``read(*args)`` on this process's thread for reads beside a held product: the keyword
        read, on the snapshot's connection, while this thread computes."""
        return self._beside.submit(read, *args)

    def close(self) -> None:
        self._beside.shutdown(wait=True)

    def _current(self, conn: apsw.Connection, user: str, seq: int, count: int) -> UserVectors | None:
        """The user's vectors as of ``seq``: held already, brought up to date, or loaded."""
        vectors = self._users.get(user)
        if vectors is not None and vectors.seq > seq:
            return None  # held as a newer snapshot saw them
        if vectors is not None and vectors.seq < seq and not self._catch_up(conn, user, vectors, seq):
            vectors = None
        if vectors is not None and vectors.held != count:
            vectors = None
        if vectors is None:
            self._users.pop(user, None)
            if self._disagreed.get(user) == seq:
                return None
            vectors = self._load(conn, user, seq, count)
        return vectors

    def _catch_up(self, conn: apsw.Connection, user: str, vectors: UserVectors, seq: int) -> bool:
        """Apply the changes numbered after the held ones; False when so many changed that
        reading the user again is quicker."""
        changed = [rowid for (rowid,) in conn.execute(
            "SELECT memory_rowid FROM vector_changes WHERE user_id = ? AND seq > ? AND seq <= ?",
            (user, vectors.seq, seq),
        )]
        if len(changed) > RELOAD_SHARE * max(vectors.held, 1):
            return False
        for rowid in changed:
            found = conn.execute(
                "SELECT embedding, user_id, agent_id, run_id FROM memory_vectors WHERE memory_rowid = ?", (rowid,)
            ).fetchone()
            if found is not None and found[1] == user:
                vectors.put(rowid, found[0], found[2], found[3])
            else:
                vectors.drop(rowid)
        vectors.seq = seq
        return True

    def _load(self, conn: apsw.Connection, user: str, seq: int, count: int) -> UserVectors | None:
        """Read the user's vectors whole, if the budget has room for them (made by letting idle
        users go); None if not, or if the file holds another count of them than of memories."""
        first = conn.execute("SELECT embedding FROM memory_vectors WHERE user_id = ? LIMIT 1", (user,)).fetchone()
        dimension = len(first[0]) // 4 if first else 0
        if not dimension or not self._make_room(count * (dimension * 4 + 16)):
            return None
        rows = conn.execute(
            "SELECT memory_rowid, embedding, agent_id, run_id FROM memory_vectors WHERE user_id = ?", (user,)
        ).fetchall()
        if len(rows) != count:
            self._disagreed[user] = seq
            return None
        self._disagreed.pop(user, None)
        vectors = UserVectors(dimension, seq, rows)
        self._users[user] = vectors
        return vectors

    def _make_room(self, needed: int) -> bool:
        """Whether ``needed`` bytes fit, after letting go of users idle for ``IDLE_SECONDS``."""
        if needed > self.budget:
            return False
        used = sum(vectors.nbytes for vectors in self._users.values())
        idle_before = time.monotonic() - IDLE_SECONDS
        for user in [user for user, vectors in self._users.items() if vectors.used_at < idle_before]:
            if used + needed <= self.budget:
                break
            used -= self._users.pop(user).nbytes
        return used + needed <= self.budget
