"""The retrieval reads both SQL backends run alike, written once against their ``Dialect``."""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import ClassVar, NamedTuple

import numpy as np

from store.backend import Neighbourhood, keys_around, neighbours
from store.filters import Filter
from store.scope import Scope

from .dialect import Sql
from .keywords import Posting, best_by_postings, bounded_postings, query_terms
from .statements import Statements

PREFIX_LENGTH = 4
"""A word this long or longer also counts as written when a longer word starts with it (``words_written``):
shorter ones would reach unrelated words ("ana" in "analysis")."""


class UserPostings(NamedTuple):
    """What the keyword signal over a user's whole scope reads first: the user's N and total
    length, whether any of its memories has expired on the day asked about, how many memories hold
    each query term, and the postings of those terms, or of the rarer ones only (SQLite's
    ``WHOLE_POSTINGS``): the others are read as far as the top needs (``bounded_postings``)."""

    documents: float
    tokens: float
    expired: bool
    counts: dict[str, int]
    postings: list[Posting]


class SignalReads(Statements):
    """What retrieval reads around the signals: the keyword signal's choice of statement, the
    scope's size and a memory's neighbours."""

    def first_signals(
        self, embedding: Callable[[], np.ndarray], terms: Sequence[str], scope: Scope, limit: int,
        filters: Filter | None, on: str | None,
    ) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
        """``bm25_memories`` while the query may still embed (about 1 ms of a search on PostgreSQL),
        then ``knn_memories``."""
        found = self.bm25_memories(terms, scope, limit, filters, on)
        return self.knn_memories(embedding(), scope, limit, filters, on), found

    def bm25_memories(
        self, terms: Sequence[str], scope: Scope, limit: int, filters: Filter | None, on: str | None
    ) -> list[tuple[int, float]]:
        """The ``limit`` best memories by BM25 within the scope and filters, with their scores.

        A search in a user's whole scope first ranks the user's postings alone (``user_bm25``),
        without reading a memory per posting: when every memory of that top passes the expiry
        check, it is also the top of the memories that pass (they are a subset, ranked by the same
        scores): in one scope of 100,000 chat turns, about half (SQLite) and a quarter (PostgreSQL)
        of the time the read through the memories takes (``bench/backends.py``). Otherwise, and for
        a narrower scope or with filters, each posting meets its memory (``scope_bm25``)."""
        if not terms:
            return []
        if filters is None and scope.named().keys() == {"user_id"}:
            top = self.user_bm25(terms, scope.user_id, limit, on)
            if all(live for _, _, live in top):
                return [(rowid, score) for rowid, score, _ in top]
        return self.scope_bm25(terms, scope, limit, filters, on)

    def scope_bm25(
        self, terms: Sequence[str], scope: Scope, limit: int, filters: Filter | None, on: str | None
    ) -> list[tuple[int, float]]:
        """The keyword signal over the memories within the scope that pass the filters."""
        raise NotImplementedError

    def user_bm25(self, terms: Sequence[str], user_id: str, limit: int, on: str | None) -> list[tuple[int, float, bool]]:
        """The ``limit`` best memories of a user by BM25 from the postings alone, each with whether
        it is live on ``on``: the postings of the query's terms (``user_postings``) are summed in
        the process (``best_by_postings``), where a statement's join and sum per memory took two to
        three times as long when common terms have tens of thousands of postings. A term that
        ``user_postings`` counted without reading it is read only as far as the top needs
        (``bounded_postings``): on SQLite, in one scope of 100,000 chat turns, a question's terms
        have about 22,000 postings, of which about 3,300 are read. Which of the best are live is
        read only when some memory of the user has expired."""
        folded = query_terms(terms)
        read = self.user_postings(folded, user_id, on)
        postings = bounded_postings(folded, read.documents, read.tokens, read.counts, read.postings, limit,
                                    lambda more, among: self.term_postings(more, user_id, among), self.lookup_cost)
        best = best_by_postings(folded, postings, read.documents, read.tokens, limit, read.counts)
        if not read.expired or not best:
            return [(rowid, score, True) for rowid, score in best]
        among, among_params = self.dialect.in_sql("m.rowid", [rowid for rowid, _ in best])
        # Off the scope's index (SQLite), as in ``adjacent_memories``: rowid lookups, not the user's walk.
        user, user_params = self.dialect.scope_sql(Scope(user_id), f"{self.dialect.index_off}m")
        live, live_params = self.dialect.live_sql(None, on)
        alive = {row[0] for row in self.rows(f"SELECT m.rowid FROM memories m WHERE {user} AND {among} AND ({live})",
                                             (*user_params, *among_params, *live_params))}
        return [(rowid, score, rowid in alive) for rowid, score in best]

    def user_postings(self, terms: Sequence[str], user_id: str, on: str | None) -> UserPostings:
        """In one statement: a user's statistics, the count of memories holding each of the folded
        ``terms``, and the postings of those terms, or of the rarer ones only."""
        raise NotImplementedError

    def term_postings(self, terms: Sequence[str], user_id: str, among: np.ndarray | None) -> list[Posting]:
        """A user's postings of the folded ``terms``: all of them, or those of the memories ``among``.
        Asked only of a backend whose ``user_postings`` leaves terms unread."""
        raise NotImplementedError

    lookup_cost: ClassVar[float] = 1.0
    """What ``term_postings`` pays for a posting found by its memory, in postings of a term read in
    turn: ``bounded_postings`` reads a term whole and cuts it when that costs less."""

    expired_probe: ClassVar[str]
    """The backend's SQL for "a memory of the user ``{user}`` (on ``e``) has ``{expired}``",
    through its index of dated memories."""

    def user_expired_sql(self, user_id: str, on: str | None) -> Sql:
        """Whether a memory of the user has expired on ``on`` (``expired_probe``); FALSE when no day
        is asked about."""
        if not on:
            return "FALSE", []
        user, params = self.dialect.scope_sql(Scope(user_id), "e")
        return self.expired_probe.format(user=user, expired=self.dialect.expired_sql("e")), [*params, on]

    def words_written(self, words: Sequence[str], scope: Scope) -> list[bool]:
        """For each of the folded ``words``, whether a memory of the scope holds it, or (a word of
        ``PREFIX_LENGTH`` letters or more) a longer word that starts with it ("postgres" in
        "postgresql"): read from the keyword index, one statement, a column a word."""
        if not words:
            return []
        user = f"p.user_id = {self.dialect.placeholder} AND " if scope.user_id else ""
        narrower = {key: value for key, value in scope.named().items() if key != "user_id"}
        within, within_params = self.dialect.scope_sql(Scope(**narrower), "m") if narrower else ("", [])
        memory = f" AND EXISTS (SELECT 1 FROM memories m WHERE m.rowid = p.memory_rowid AND {within})" if within else ""
        columns, params = [], []
        for word in words:
            low, high = word, word if len(word) < PREFIX_LENGTH else word[:-1] + chr(ord(word[-1]) + 1)
            bound = "p.term = {0}" if low == high else "p.term >= {0} AND p.term < {0}"
            columns.append(f"EXISTS (SELECT 1 FROM memory_terms p WHERE {user}"
                           f"{bound.format(self.dialect.placeholder)}{memory})")
            params += [*([scope.user_id] if user else []), *([low] if low == high else [low, high]), *within_params]
        return [bool(held) for held in self.row(f"SELECT {', '.join(columns)}", params) or ()]

    def scope_count(self, scope: Scope) -> int:
        where, params = self.dialect.scope_sql(scope)
        return self.row(f"SELECT count(*) FROM memories WHERE {where}", params)[0]

    def adjacent_memories(
        self, rowids: Sequence[int], scope: Scope, filters: Filter | None, on: str | None,
        within_seconds: float = 0, reach: int = 1,
    ) -> dict[int, list[int]]:
        """The turns around each memory when a conversation is added in order, by insertion
        sequence. A key taken by another scope, or deleted, is no neighbour."""
        if not rowids:
            return {}
        around = keys_around(rowids, reach)
        keys, key_params = self.dialect.in_sql("m.rowid", around)
        # Off the scope's index (SQLite): the planner stays on the rowid lookups instead of
        # walking the whole scope (5 ms instead of 0.2 at 10,000 memories).
        where, params = self.dialect.scope_sql(scope, f"{self.dialect.index_off}m")
        live, live_params = self.dialect.live_sql(filters, on)
        stored = dict(self.rows(
            f"SELECT m.rowid, m.created_at FROM memories m WHERE {keys} AND {where} AND ({live})",
            (*key_params, *params, *live_params),
        ))
        return neighbours(rowids, stored, within_seconds, reach)

    def neighbourhood(
        self, rowids: Sequence[int], embedding: np.ndarray, known: Container[int], scope: Scope,
        filters: Filter | None, on: str | None,
    ) -> Neighbourhood:
        """Four reads, each cheap in the process (SQLite); PostgreSQL reads them in one statement."""
        adjacent = self.adjacent_memories(rowids, scope, filters, on)
        around = list(dict.fromkeys(n for ns in adjacent.values() for n in ns))
        distances = dict(self.distances_for(embedding, [rowid for rowid in around if rowid not in known], scope))
        texts = self.texts_by_rowid(list(dict.fromkeys([*rowids, *around])), scope)
        return Neighbourhood(adjacent, distances, self.questions_among(rowids, scope), texts)
