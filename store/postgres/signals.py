"""The three retrieval signals over PostgreSQL: pgvector KNN, BM25 over trimem's postings,
entity links, and the neighbours and questions that keyword context reads."""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import Any

import numpy as np

from store.backend import Neighbourhood, keys_around, neighbours
from store.filters import Filter
from store.scope import Scope
from store.sql import signals as shared
from store.sql.keywords import query_terms
from store.sql.signals import UserPostings

from .keywords import BM25_SQL, EXPIRED_SQL, USER_POSTINGS_SQL
from .sql import DIALECT, Statements, user_sql, vector

EXACT_SCAN_ROWS = 10_000
"""Up to this many candidate rows, nearest neighbours are found by an exact scan (exactly the
nearest, as on SQLite, in a few milliseconds); beyond, by the HNSW index."""
HNSW_EF_SEARCH_MIN = 800
"""The HNSW candidate list is at least this long, and at least twice the neighbours asked for.
In one scope of 100,000 LoCoMo turns and their near-copies, with the graphs of migration 8, recall@10
against the exact KNN is 0.990 to 1.000 at 800 (4.0 to 4.3 ms) and 0.975 to 0.990 at 400, build to build."""


def kept(nearest: str, columns: tuple[str, ...], within: float | None) -> tuple[str, list[float]]:
    """``nearest``, a statement of rows of ``columns`` and their ``distance`` nearest first, cut to
    the nearest and the others at most ``within`` away (all of them when ``within`` is None), and
    the parameter that adds."""
    if within is None:
        return nearest, []
    bare = ", ".join(columns)
    return (f"SELECT {bare}, distance FROM (SELECT {bare}, distance, row_number() OVER (ORDER BY distance) AS place "
            f"FROM ({nearest}) nearest) kept WHERE place = 1 OR distance <= %s ORDER BY distance"), [within]


class SignalReads(shared.SignalReads, Statements):
    """What retrieval reads to rank memories."""

    expired_probe = EXPIRED_SQL

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        self._user_memories: dict[str, int] = {}
        """Each user's count of memories (its N) as this snapshot read it, by a keyword read or
        ``scope_count``, so neither reads it again."""
        self._user_live: dict[tuple[str, str | None], int] = {}
        """The same count, for a user none of whose memories has expired on the day (the key's
        second part): how many rows its whole scope's KNN passes, so it need not count them."""

    def _nearest(self, table: str, columns: tuple[str, ...], embeddings: np.ndarray, where: str, params: list,
                 limit: int, passing: int | None = None, within: float | None = None) -> list[list[tuple]]:
        """For each of ``embeddings``, the ``limit`` rows of ``table`` (alias ``m``) passing
        ``where`` nearest to it; with ``within``, of those only the nearest and the others at most
        that far (``kept``).

        When few rows pass, they are scanned exactly, for every embedding at once, each row's
        distance computed as it is read (``OFFSET 0`` keeps the planner from the index, so a filter
        never leaves fewer than ``limit``; carrying the vectors out of the scan to compare them
        after took 29 ms at 10,000 rows instead of 17). How many pass is ``passing`` when the
        caller knows it, else a bounded count in the same statement (1.3 ms of a search in one
        scope of 100,000), which answers one row of index 0 when too many pass. Otherwise the HNSW
        index answers each embedding, with pgvector's iterative scan going on until ``limit`` rows
        pass."""
        if passing is None or passing <= EXACT_SCAN_ROWS:
            exact = self._scanned(table, columns, embeddings, where, params, limit, within, counted=passing is None)
            if not exact or exact[0][0] != 0:
                found: list[list[tuple]] = [[] for _ in embeddings]
                for i, *row in exact:
                    found[i - 1].append(tuple(row))
                return found
        qualified = ", ".join(f"m.{column}" for column in columns)
        self.conn.execute(f"SET LOCAL hnsw.ef_search = {max(HNSW_EF_SEARCH_MIN, 2 * limit)}")
        self.conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
        nearest, kept_params = kept(
            f"SELECT {qualified}, m.embedding <=> %s AS distance FROM {table} m WHERE {where} ORDER BY distance LIMIT %s",
            columns, within,
        )
        return [self.rows_planned_for(nearest, (vector(embedding), *params, limit, *kept_params))
                for embedding in embeddings]

    def _scanned(self, table: str, columns: tuple[str, ...], embeddings: np.ndarray, where: str, params: list,
                 limit: int, within: float | None, *, counted: bool) -> list[tuple]:
        """The exact scan of ``_nearest``: rows of (embedding's index from 1, *columns, distance). When
        ``counted``, the rows passing are counted first (at most ``EXACT_SCAN_ROWS + 1`` of them), and
        too many answer one row of index 0 instead."""
        bare, qualified = ", ".join(columns), ", ".join(f"m.{column}" for column in columns)
        few, bounded, many, count_params = "", "", "", []
        if counted:
            nulls = ", ".join(["NULL"] * (len(columns) + 1))
            few = (f"WITH few AS MATERIALIZED (SELECT count(*) AS n FROM (SELECT 1 FROM {table} m WHERE {where} "
                   "LIMIT %s) f) ")
            bounded = f" AND (SELECT n FROM few) <= {EXACT_SCAN_ROWS}"
            many = f" UNION ALL SELECT 0, {nulls} FROM few WHERE n > {EXACT_SCAN_ROWS}"
            count_params = [*params, EXACT_SCAN_ROWS + 1]
        nearest, kept_params = kept(
            f"SELECT {bare}, distance FROM (SELECT {qualified}, m.embedding <=> q.embedding AS distance FROM {table} m "
            f"WHERE {where}{bounded} OFFSET 0) scoped ORDER BY distance LIMIT %s",
            columns, within,
        )
        return self.rows(  # %b: the vectors go as their floats (binary), not as their text
            f"{few}SELECT q.i, s.* FROM unnest(%b::vector[]) WITH ORDINALITY AS q(embedding, i) CROSS JOIN LATERAL ("
            f"{nearest}) s{many} ORDER BY 1, {len(columns) + 2}",
            (*count_params, [vector(embedding) for embedding in embeddings], *params, limit, *kept_params),
        )

    def knn_memories(
        self, embedding: np.ndarray, scope: Scope, limit: int, filters: Filter | None, on: str | None
    ) -> list[tuple[int, float]]:
        where, params = DIALECT.scope_sql(scope, "m")
        live, live_params = DIALECT.live_sql(filters, on)
        whole = filters is None and scope.named().keys() == {"user_id"}
        (nearest,) = self._nearest("memories", ("rowid",), np.asarray([embedding]), f"{where} AND ({live})",
                                   [*params, *live_params], limit,
                                   self._user_live.get((scope.user_id, on)) if whole else None)
        return nearest

    def distances_for(self, embedding: np.ndarray, rowids: Sequence[int], scope: Scope) -> list[tuple[int, float]]:
        if not rowids:
            return []
        user, params = user_sql(scope)
        return self.rows(f"SELECT rowid, embedding <=> %s FROM memories WHERE {user} AND rowid = ANY(%s)",
                         (vector(embedding), *params, list(rowids)))

    def scope_bm25(
        self, terms: Sequence[str], scope: Scope, limit: int, filters: Filter | None, on: str | None
    ) -> list[tuple[int, float]]:
        corpus, corpus_params = user_sql(scope, "c")
        postings, postings_params = user_sql(scope, "p")
        where, params = DIALECT.scope_sql(scope, "m")
        live, live_params = DIALECT.live_sql(filters, on)
        sql = BM25_SQL.format(corpus=corpus, postings=postings, scope=where, live=live)
        folded = query_terms(terms)
        return self._counted(scope.user_id, self.rows_planned_for(
            sql, (folded, *corpus_params, *postings_params, folded, *params, *live_params, limit)
        ))

    def user_postings(self, terms: Sequence[str], user_id: str, on: str | None) -> UserPostings:
        """``USER_POSTINGS_SQL``: every posting of the terms, so ``term_postings`` is never asked. Here
        a posting found by its memory costs about 50 read in turn (4 against 0.08 µs, an index probe
        against an index-only scan), and reading common terms as far as the top needs (as SQLite
        does) made a search in one scope of 100,000 1.3 ms slower. The user's N is remembered for
        ``scope_count``."""
        scope = Scope(user_id)
        corpus, corpus_params = user_sql(scope, "c")
        postings, postings_params = user_sql(scope, "p")
        expired, expired_params = self.user_expired_sql(user_id, on)
        read = self.conn.execute(
            USER_POSTINGS_SQL.format(expired=expired, corpus=corpus, postings=postings),
            (*expired_params, *corpus_params, *postings_params, list(terms)), binary=True,
        ).fetchall()
        ((documents, tokens, any_expired),) = [(row[1], row[2], row[6]) for row in read if row[0] is None]
        self._user_memories[user_id] = int(documents)
        if not any_expired:
            self._user_live[user_id, on] = int(documents)
        postings = [
            (term, np.frombuffer(rowids, ">i8"), np.frombuffer(frequencies, ">i4"), np.frombuffer(lengths, ">i4"))
            for term, _, _, rowids, frequencies, lengths, _ in read if term is not None
        ]
        return UserPostings(documents, tokens, any_expired, {term: len(rowids) for term, rowids, _, _ in postings}, postings)

    def _counted(self, user_id: str, found: list[tuple]) -> list[tuple]:
        """A keyword read's rows without their last column, the user's N, which is remembered
        for ``scope_count``."""
        if user_id and found:
            self._user_memories[user_id] = int(found[0][-1])
        return [row[:-1] for row in found]

    def _rows_sized_for(self, user_id: str) -> Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]:
        """How to run a read whose best plan depends on the user's size: prepared (``rows``) for a
        user this snapshot has counted at no more than ``EXACT_SCAN_ROWS`` memories, where one plan
        suits every user and planning each call cost about 0.7 ms of a search; planned for each
        call (``rows_planned_for``) for a heavier user, or one not counted."""
        known = self._user_memories.get(user_id)
        return self.rows if known is not None and known <= EXACT_SCAN_ROWS else self.rows_planned_for

    def scope_count(self, scope: Scope) -> int:
        """A user's whole scope: the N a keyword read of this snapshot found, else its kept count."""
        if scope.named().keys() != {"user_id"}:
            return super().scope_count(scope)
        if scope.user_id not in self._user_memories:
            (counted,) = self.row("SELECT coalesce(sum(memories), 0) FROM keyword_counts WHERE user_id = %s",
                                  (scope.user_id,))
            self._user_memories[scope.user_id] = int(counted)
        return self._user_memories[scope.user_id]

    def knn_entities(
        self, embeddings: np.ndarray, scope: Scope, limit: int, within: float
    ) -> list[list[tuple[int, str, float]]]:
        if not len(embeddings):
            return []
        where, params = DIALECT.scope_sql(scope, "m")
        return self._nearest("entities", ("id", "text"), embeddings, where, params, limit, within=within)

    def entity_links(
        self, entity_ids: Sequence[int], scope: Scope, filters: Filter | None, on: str | None,
        memory_rowids: Sequence[int] | None = None,
    ) -> tuple[dict[int, int], list[tuple[int, int]], bool]:
        """As on SQLite: the count uses every link, only the links returned are filtered."""
        if not entity_ids:
            return {}, [], False
        ids = list(entity_ids)
        user, user_params = user_sql(scope, "l")
        live, live_params = DIALECT.live_sql(filters, on)
        joined = (
            "FROM memory_entities l JOIN memories m ON m.user_id = l.user_id AND m.rowid = l.memory_rowid "
            f"WHERE {user} AND l.entity_id = ANY(%s) AND ({live})"
        )
        among, among_params = "", []
        if memory_rowids is not None:
            among, among_params = " AND l.memory_rowid = ANY(%s)", [list(memory_rowids)]
        params = (*user_params, ids, *live_params)
        linked: dict[int, int] = {}
        links: list[tuple[int, int]] = []
        for is_link, entity_id, value in self._rows_sized_for(scope.user_id)(  # the counts and the links, at once
            f"SELECT false, entity_id, count(*) FROM memory_entities l WHERE {user} AND entity_id = ANY(%s) "
            f"GROUP BY entity_id UNION ALL SELECT true, l.entity_id, l.memory_rowid {joined}{among}",
            (*user_params, ids, *params, *among_params),
        ):
            if is_link:
                links.append((entity_id, value))
            else:
                linked[entity_id] = value
        exists = bool(links) or (memory_rowids is not None and self.row(f"SELECT EXISTS (SELECT 1 {joined})", params)[0])
        return linked, links, exists

    def neighbourhood(
        self, rowids: Sequence[int], embedding: np.ndarray, known: Container[int], scope: Scope,
        filters: Filter | None, on: str | None,
    ) -> Neighbourhood:
        """One statement for what the shared reads take four round trips to read: the rows one
        place around the candidates, each with its distance to the query, whether it asks, and
        its text."""
        if not rowids:
            return Neighbourhood({}, {}, set(), {})
        where, params = DIALECT.scope_sql(scope, "m")
        live, live_params = DIALECT.live_sql(filters, on)
        asks, asks_params = DIALECT.asks_sql("m.text")
        read = self.rows(
            f"SELECT m.rowid, m.created_at, m.text, {asks}, m.embedding <=> %s FROM memories m "
            f"WHERE m.rowid = ANY(%s) AND {where} AND ({live})",
            (*asks_params, vector(embedding), keys_around(rowids), *params, *live_params),
        )
        adjacent = neighbours(rowids, {row[0]: row[1] for row in read}, 0)
        around = {n for ns in adjacent.values() for n in ns}
        return Neighbourhood(
            adjacent,
            {rowid: distance for rowid, _, _, _, distance in read if rowid in around and rowid not in known},
            {rowid for rowid, _, _, question, _ in read if question} & set(rowids),
            {rowid: text for rowid, _, text, _, _ in read},
        )

    def questions_among(self, rowids: Sequence[int], scope: Scope) -> set[int]:
        """The turns that ask (``Dialect.asks_sql``)."""
        if not rowids:
            return set()
        user, params = user_sql(scope)
        asks, asks_params = DIALECT.asks_sql("text")
        return {row[0] for row in self.rows(f"SELECT rowid FROM memories WHERE {user} AND rowid = ANY(%s) AND {asks}",
                                            (*params, list(rowids), *asks_params))}
