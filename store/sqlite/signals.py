"""The three retrieval signals over SQLite: vec0 KNN, BM25 over trimem's postings, entity links,
and the neighbours and questions that keyword context reads."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import apsw
import numpy as np

from store.filters import Filter
from store.scope import Scope
from store.sql import signals as shared
from store.sql.keywords import Posting, query_terms
from store.sql.signals import UserPostings

from .held_vectors import HeldVectors, Ready
from .keywords import BM25_SQL, EXPIRED_SQL, TERM_POSTINGS_SQL, USER_POSTINGS_SQL, users_sql
from .sql import DIALECT, Statements, vector_blob

KNN_LIMIT = 4096
"""sqlite-vec refuses k above 4096."""


WHOLE_POSTINGS = 2_000
"""A query term of which a user has at most this many postings is read whole by the first keyword
statement (``user_postings``); a commoner one is counted there, then read as far as the top needs
(``store.sql.keywords.bounded_postings``)."""


class SignalReads(shared.SignalReads, Statements):
    """What retrieval reads to rank memories; a snapshot's KNN in a heavy user's scope is
    answered from the vectors this process holds (``held``), a transaction's never: what it
    has written may yet be rolled back."""

    expired_probe = EXPIRED_SQL

    def __init__(self, conn: apsw.Connection, held: HeldVectors | None = None) -> None:
        super().__init__(conn)
        self.held = held
        self._readied: dict[str, Ready | None] = {}

    def _ready(self, scope: Scope) -> Ready | None:
        """The scope's user's held vectors as this snapshot sees them (asked once a snapshot)."""
        user = scope.user_id
        if self.held is None or not user or self.held.budget <= 0:
            return None
        if user not in self._readied:
            self._readied[user] = self.held.ready(self.conn, user, self.scope_count(Scope(user)))
        return self._readied[user]

    def count_expired(self, scope: Scope, on: str) -> int:
        """Memories within the scope that expired before ``on``, found through the partial expiry
        index (the user's dated memories only): through the scope index the planner would walk
        the whole scope (200 ms at 100,000 memories)."""
        where, params = DIALECT.scope_sql(scope, "m")
        return self.conn.execute(
            f"SELECT count(*) FROM memories m INDEXED BY memories_expiration WHERE {DIALECT.expired_sql()} AND {where}",
            (on, *params),
        ).fetchone()[0]

    def scope_count(self, scope: Scope) -> int:
        """A user's whole scope is counted already, in ``keyword_users`` (kept by triggers): one row
        read instead of the user's memories (8 ms at 100,000)."""
        if scope.named().keys() != {"user_id"}:
            return super().scope_count(scope)
        row = self.conn.execute("SELECT memories FROM keyword_users WHERE user_id = ?", (scope.user_id,)).fetchone()
        return row[0] if row else 0

    def knn_memories(
        self, embedding: np.ndarray, scope: Scope, limit: int, filters: Filter | None, on: str | None
    ) -> list[tuple[int, float]]:
        return self.first_signals(lambda: embedding, (), scope, limit, filters, on)[0]

    def first_signals(
        self, embedding: Callable[[], np.ndarray], terms: Sequence[str], scope: Scope, limit: int,
        filters: Filter | None, on: str | None,
    ) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
        """For a user whose vectors this process holds (``held_vectors``), the product runs on this
        thread while the keyword read runs on the connection on another (one scope of 100,000:
        8 and 15 ms become 12 together). The product needs no connection: SQLite runs one
        statement of a connection at a time, so any other read beside the keyword read would only
        wait for it. Otherwise the keyword read, while the query may still embed, then vec0."""
        k = min(limit, KNN_LIMIT)
        expired = self.count_expired(scope, on) if on is not None else 0
        ready = self._ready(scope) if filters is None else None
        if ready is None:
            hits = self.bm25_memories(terms, scope, limit, filters, on)
            return self._scanned(embedding(), scope, k, filters, on, expired), hits
        keywords = self.held.beside(self.bm25_memories, terms, scope, limit, filters, on) if terms else None
        try:
            found = self.held.nearest(ready, embedding(), scope, k + expired)
        finally:  # even when the product fails: the read must end before the snapshot's transaction
            hits = keywords.result() if keywords else []
        if found is None:
            return self._scanned(embedding(), scope, k, filters, on, expired), hits
        return self._live_within(found, scope, on)[:k], hits

    def _scanned(
        self, embedding: np.ndarray, scope: Scope, limit: int, filters: Filter | None, on: str | None, expired: int
    ) -> list[tuple[int, float]]:
        """Without metadata filters vec0 filters the scope during its own scan, asking for
        ``limit`` more neighbours than the scope has ``expired`` memories, which are then dropped:
        exactly the ``limit`` nearest live ones. With filters (or too many expired memories
        for vec0's k), a post-filtered KNN could return fewer than ``limit`` rows, so we scan
        exactly the filtered rows instead: same result set semantics, a different plan."""
        blob = vector_blob(embedding)
        if filters is None and limit + expired <= KNN_LIMIT:
            where, params = DIALECT.scope_sql(scope)
            knn = f"SELECT memory_rowid, distance FROM memory_vectors WHERE embedding MATCH ? AND k = ? AND {where}"
            if not expired:
                return self.conn.execute(knn, (blob, limit, *params)).fetchall()
            return self.conn.execute(
                f"SELECT knn.memory_rowid, knn.distance FROM ({knn}) knn "
                "JOIN memories m ON m.rowid = knn.memory_rowid "
                f"WHERE NOT {DIALECT.expired_sql()} ORDER BY knn.distance LIMIT ?",
                (blob, limit + expired, *params, on, limit),
            ).fetchall()
        live, live_params = DIALECT.live_sql(filters, on)
        where, params = DIALECT.scope_sql(scope, "m")
        return self.conn.execute(
            "SELECT m.rowid, vec_distance_cosine(v.embedding, ?) AS distance FROM memories m "
            f"JOIN memory_vectors v ON v.memory_rowid = m.rowid WHERE {where} AND ({live}) "
            "ORDER BY distance LIMIT ?",
            (blob, *params, *live_params, limit),
        ).fetchall()

    def _live_within(self, found: list[tuple[int, float]], scope: Scope, on: str | None) -> list[tuple[int, float]]:
        """``found`` without the memories that are not live within ``scope`` in this snapshot:
        the expired ones, and none else while the held vectors follow the file."""
        if not found:
            return []
        keys, keys_params = DIALECT.in_sql("m.rowid", [rowid for rowid, _ in found])
        off = f"{DIALECT.index_off}m"  # found by rowid, not through the scope or expiry index
        where, params = DIALECT.scope_sql(scope, off)
        live, live_params = (f"NOT {DIALECT.expired_sql(off)}", [on]) if on is not None else ("TRUE", [])
        kept = {rowid for (rowid,) in self.conn.execute(
            f"SELECT m.rowid FROM memories m WHERE {keys} AND {where} AND {live}", (*keys_params, *params, *live_params)
        )}
        return [(rowid, distance) for rowid, distance in found if rowid in kept]

    def distances_for(self, embedding: np.ndarray, rowids: Sequence[int], scope: Scope) -> list[tuple[int, float]]:
        """From the held vectors where the user's are held (each vec0 row costs 18 µs), else from vec0."""
        if not rowids:
            return []
        ready = self._ready(scope)
        held = self.held.distances(ready, embedding, rowids) if ready is not None else None
        if held is not None and len(held) == len(rowids):
            return held
        # Driven from memories, vec0 gets one rowid lookup per memory; ``memory_rowid IN (…)``
        # on vec0 itself scans its chunks and takes about twice as long at 10,000 memories.
        keys, params = DIALECT.in_sql("m.rowid", rowids)
        return self.conn.execute(
            "SELECT v.memory_rowid, vec_distance_cosine(v.embedding, ?) FROM memories m "
            f"JOIN memory_vectors v ON v.memory_rowid = m.rowid WHERE {keys}",
            (vector_blob(embedding), *params),
        ).fetchall()

    def scope_bm25(
        self, terms: Sequence[str], scope: Scope, limit: int, filters: Filter | None, on: str | None
    ) -> list[tuple[int, float]]:
        """FTS5's BM25 with the statistics of the scope's user (``store.sql.keywords``): the terms
        are bound as one JSON array, never spliced into SQL."""
        users, postings, user_params = users_sql(scope.user_id)
        where, params = DIALECT.scope_sql(scope, "m")
        live, live_params = DIALECT.live_sql(filters, on)
        sql = BM25_SQL.format(users=users, postings=postings, scope=where, live=live)
        return self.rows(sql, (self._folded(terms), *user_params, *user_params, *user_params, *params,
                               *live_params, limit))

    def user_postings(self, terms: Sequence[str], user_id: str, on: str | None) -> UserPostings:
        """``USER_POSTINGS_SQL``: the user's statistics from ``keyword_users``, each term's count, and
        the postings of the terms held by at most ``WHOLE_POSTINGS`` memories, as JSON arrays."""
        users, postings, user_params = users_sql(user_id)
        expired, expired_params = self.user_expired_sql(user_id, on)
        read = self.rows(USER_POSTINGS_SQL.format(expired=expired, users=users, postings=postings),
                         (*user_params, json.dumps(list(terms), ensure_ascii=False), *expired_params, *user_params,
                          *user_params, WHOLE_POSTINGS))
        ((documents, tokens, any_expired),) = [(row[1], row[2], row[6]) for row in read if row[0] is None]
        return UserPostings(documents, tokens, bool(any_expired), {row[0]: row[7] for row in read if row[0] is not None},
                            [(row[0], *(json.loads(column) for column in row[3:6]))
                             for row in read if row[0] is not None and row[3] is not None])

    lookup_cost = 4.0
    """A posting found by its memory took 0.5–1 µs, one read in a term's range 0.2 µs (one scope of
    100,000 chat turns)."""

    def term_postings(self, terms: Sequence[str], user_id: str, among: np.ndarray | None) -> list[Posting]:
        """``TERM_POSTINGS_SQL``."""
        _, postings, user_params = users_sql(user_id)
        within, within_params = ("1", []) if among is None else (
            "p.memory_rowid IN (SELECT value FROM json_each(?))", [json.dumps(among.tolist())])
        read = self.rows(TERM_POSTINGS_SQL.format(postings=postings, among=within),
                         (*user_params, json.dumps(list(terms), ensure_ascii=False), *within_params))
        return [(term, *(json.loads(column) for column in columns)) for term, *columns in read]

    @staticmethod
    def _folded(terms: Sequence[str]) -> str:
        return json.dumps(query_terms(terms), ensure_ascii=False)

    def knn_entities(
        self, embeddings: np.ndarray, scope: Scope, limit: int, within: float
    ) -> list[list[tuple[int, str, float]]]:
        """vec0's KNN in the user's partition, then the texts of the entities kept alone."""
        where, params = DIALECT.scope_sql(scope)
        knn = f"SELECT entity_id, distance FROM entity_vectors WHERE embedding MATCH ? AND k = ? AND {where}"
        found = [
            [hit for place, hit in enumerate(self.conn.execute(
                knn, (vector_blob(embedding), min(limit, KNN_LIMIT), *params))) if place == 0 or hit[1] <= within]
            for embedding in embeddings
        ]
        ids = list(dict.fromkeys(hit[0] for hits in found for hit in hits))
        if not ids:
            return [[] for _ in found]
        among, among_params = DIALECT.in_sql("id", ids)
        texts = dict(self.conn.execute(f"SELECT id, text FROM entities WHERE {among}", among_params).fetchall())
        return [[(entity_id, texts[entity_id], distance) for entity_id, distance in hits] for hits in found]

    def entity_links(
        self, entity_ids: Sequence[int], scope: Scope, filters: Filter | None, on: str | None,
        memory_rowids: Sequence[int] | None = None,
    ) -> tuple[dict[int, int], list[tuple[int, int]], bool]:
        """The count uses every link (Mem0 weights by the entity's whole spread); only the links
        are filtered, so a filtered-out memory never receives a boost. With ``memory_rowids``
        only links to those memories are fetched: a speaker's name can link to tens of
        thousands of memories, of which only the candidates can be ranked."""
        if not entity_ids:
            return {}, [], False
        ids, id_params = DIALECT.in_sql("l.entity_id", entity_ids)
        linked = dict(
            self.conn.execute(
                f"SELECT entity_id, count(*) FROM memory_entities l WHERE {ids} GROUP BY entity_id", id_params
            ).fetchall()
        )
        live, live_params = DIALECT.live_sql(filters, on)
        among, among_params = "", []
        if memory_rowids is not None:
            among, among_params = DIALECT.in_sql("l.memory_rowid", memory_rowids)
            among = f" AND {among}"
        joined = (
            "FROM memory_entities l JOIN memories m ON m.rowid = l.memory_rowid "
            f"WHERE {ids} AND ({live})"
        )
        links = self.conn.execute(
            f"SELECT l.entity_id, l.memory_rowid {joined}{among}", (*id_params, *live_params, *among_params)
        ).fetchall()
        exists = bool(links) or (
            memory_rowids is not None
            and self.conn.execute(f"SELECT EXISTS (SELECT 1 {joined})", (*id_params, *live_params)).fetchone()[0] == 1
        )
        return linked, links, exists

    def questions_among(self, rowids: Sequence[int], scope: Scope) -> set[int]:
        """The turns that ask (``Dialect.asks_sql``)."""
        if not rowids:
            return set()
        keys, params = DIALECT.in_sql("rowid", rowids)
        asks, asks_params = DIALECT.asks_sql("text")
        return {row[0] for row in self.conn.execute(f"SELECT rowid FROM memories WHERE {keys} AND {asks}",
                                                    (*params, *asks_params))}
