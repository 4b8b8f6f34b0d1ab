"""The search pipeline, in its four steps: prepare → signals → fuse → assemble.

Mirrors Mem0's ``_search_vector_store`` and ``_compute_entity_boosts`` (commit 001c235):
semantic KNN over-fetch, FTS5 BM25 on the lemmatized query, entity boosts, the
semantic gate before fusion, the signal-count denominator. The default ranking
(``ranking = "trimem"``) keeps those formulas and changes what they see: the union
candidate pool, keyword context from adjacent memories and entity rarity; ``ranking =
"mem0"`` turns all three off (``SearchConfig.resolved``). ``prepare`` runs the
models and touches no database, so the engine can run it outside its database lock.
Nothing here catches and carries on: a signal that does not apply is a branch, and
the query analysis records which signals ran.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from . import db, scoring
from .config import SearchConfig
from .embeddings import Embedder
from .nlp import NLP
from .records import DroppedCandidate, EntityMatch, Explanation, Memory, QueryAnalysis, SearchHit


@dataclass(frozen=True)
class PreparedQuery:
    """The query as the signals need it: lemmatized terms, entities, and embeddings."""

    terms: list[str]
    entities: list[str]
    embedding: np.ndarray
    entity_embeddings: np.ndarray


@dataclass(frozen=True)
class SearchRequest:
    """One validated search: scope, limits, compiled filters and the signal switches."""

    scope: dict[str, str]
    top_k: int
    threshold: float
    filter_sql: str
    filter_params: list[Any]
    show_expired: bool
    options: SearchConfig

    def __post_init__(self) -> None:
        # Every signal reads the resolved options, so ``ranking = "mem0"`` cannot be half applied.
        object.__setattr__(self, "options", self.options.resolved())

    @property
    def internal_limit(self) -> int:
        return scoring.internal_limit(self.top_k, self.options.overfetch_factor, self.options.overfetch_minimum)


@dataclass
class Signals:
    """Raw signal values keyed by memory rowid, before any gating."""

    distances: dict[int, float]  # nearest first
    bm25_raw: dict[int, float]
    boosts: dict[int, float]
    entity_active: bool
    entity_matches: dict[int, EntityMatch] = field(default_factory=dict)


# --- 1. prepare -------------------------------------------------------------------------


def prepare(query: str, nlp: NLP, embedder: Embedder, options: SearchConfig) -> PreparedQuery:
    """Lemmatize, extract entities and embed the query (and its entities) in one batch."""
    analysis = nlp.analyze(query)
    entities: list[str] = []
    if options.use_entities:
        for entity in analysis.entities:
            if entity.normalized and entity.normalized not in entities:
                entities.append(entity.normalized)
        entities = entities[: scoring.MAX_QUERY_ENTITIES]
    vectors = embedder.embed_batch([query, *entities])
    return PreparedQuery(
        terms=analysis.lemmatized.split(),
        entities=entities,
        embedding=vectors[0],
        entity_embeddings=vectors[1:],
    )


# --- 2. signals -------------------------------------------------------------------------


def gather_signals(conn: apsw.Connection, prepared: PreparedQuery, request: SearchRequest) -> Signals:
    """Run the three signals over the caller's scope and filters."""
    limit = request.internal_limit
    scope, fsql, fparams = request.scope, request.filter_sql, request.filter_params
    distances = dict(db.knn_memories(conn, prepared.embedding, scope, limit, fsql, fparams))
    bm25_raw: dict[int, float] = {}
    if request.options.use_bm25:
        bm25_raw = dict(db.bm25_memories(conn, prepared.terms, scope, limit, fsql, fparams))
        bm25_raw = keyword_context(conn, bm25_raw, request)
    # The reference pool ranks only vector candidates, so only their links are needed; the
    # union pool adds the keyword hits and, like the other signals, up to ``limit`` memories
    # of the entity signal's own.
    union = request.options.candidate_pool == "union"
    reachable = list(dict.fromkeys([*distances, *bm25_raw])) if union else list(distances)
    boosts, matches, entity_active = entity_boosts(conn, prepared, request, reachable, limit if union else 0)
    if union:
        # Score keyword and entity hits that fell outside the vector over-fetch exactly,
        # instead of dropping them; they still face the semantic gate.
        missing = list(dict.fromkeys(rowid for rowid in (*bm25_raw, *boosts) if rowid not in distances))
        if missing and len(distances) >= limit:
            missing = reachable_outside_pool(conn, prepared, request, distances, missing, bm25_raw, boosts, entity_active)
        distances.update(db.distances_for(conn, prepared.embedding, missing))
    return Signals(distances, bm25_raw, boosts, entity_active, matches)


def reachable_outside_pool(
    conn: apsw.Connection,
    prepared: PreparedQuery,
    request: SearchRequest,
    distances: dict[int, float],
    outside: list[int],
    bm25_raw: dict[int, float],
    boosts: dict[int, float],
    entity_active: bool,
) -> list[int]:
    """The union candidates outside the full vector over-fetch that could still be returned
    (``scoring.could_reach_top_k``): the rest cannot beat the pool's own top_k even at the
    pool's farthest similarity, so their vectors are not read. Same results, fewer lookups;
    explain does not list the skipped ones as dropped."""
    pool = dict(distances)
    if not request.show_expired:
        for rowid in db.expired_among(conn, list(pool), today()):
            del pool[rowid]
    semantic = {rowid: scoring.similarity_from_distance(distance) for rowid, distance in pool.items()}
    ceiling = scoring.similarity_from_distance(max(distances.values()))
    return scoring.could_reach_top_k(
        semantic, outside, ceiling, bm25_raw, scoring.bm25_params(len(prepared.terms)), boosts,
        request.threshold, request.top_k, entity_active=entity_active,
    )


def keyword_context(conn: apsw.Connection, bm25_raw: dict[int, float], request: SearchRequest) -> dict[int, float]:
    """The keyword hits, plus the memories beside them (same scope, rowid ± 1) scored at
    ``keyword_context`` × the hit's raw BM25 (see ``scoring.keyword_context``)."""
    weight = request.options.keyword_context
    if weight <= 0 or not bm25_raw:
        return bm25_raw
    adjacent = db.adjacent_memories(conn, list(bm25_raw), request.scope, request.filter_sql, request.filter_params)
    return scoring.keyword_context(bm25_raw, adjacent, weight)


def entity_boosts(
    conn: apsw.Connection,
    prepared: PreparedQuery,
    request: SearchRequest,
    among: list[int] | None,
    room: int = 0,
) -> tuple[dict[int, float], dict[int, EntityMatch], bool]:
    """Each memory's largest boost from stored entities similar to a query entity, and whether
    any memory in scope got one (Mem0's test for the entity share of the denominator).

    ``among`` limits the boosts computed to those memories; ``None`` computes them all.
    ``room`` adds the memories of the most boosting matched entities, whole entities in
    descending boost order while their links fit in ``room`` memories: the entity signal's
    own candidates for the union pool, found without reading every link of a name that
    links to half the scope.
    """
    best: dict[int, float] = {}
    matches: dict[int, EntityMatch] = {}
    active = False
    scope_count = None
    if request.options.entity_weighting == "rarity" and prepared.entities:
        scope_count = db.scope_count(conn, request.scope)
    fsql, fparams = request.filter_sql, request.filter_params
    weighed: list[tuple[float, int, EntityMatch]] = []  # (boost, entity id, match) of every matched entity

    def keep(links: list[tuple[int, int]], match_of: dict[int, tuple[float, EntityMatch]]) -> None:
        for entity_id, rowid in links:
            boost, match = match_of[entity_id]
            if boost > best.get(rowid, 0.0):
                best[rowid] = boost
                matches[rowid] = match

    for query_entity, vector in zip(prepared.entities, prepared.entity_embeddings):
        hits = db.knn_entities(conn, vector, request.scope, scoring.ENTITY_SEARCH_LIMIT)
        scored = ((entity_id, text, scoring.similarity_from_distance(distance)) for entity_id, text, distance in hits)
        similar = {
            entity_id: (text, similarity)
            for entity_id, text, similarity in scored
            if similarity >= scoring.ENTITY_MATCH_THRESHOLD
        }
        linked, links, exists = db.entity_links(conn, list(similar), fsql, fparams, among)
        active = active or exists
        match_of = {}
        for entity_id, (text, similarity) in similar.items():
            count = linked.get(entity_id, 0)
            rarity = 1.0 if scope_count is None else scoring.entity_rarity(count, scope_count)
            match_of[entity_id] = (
                scoring.entity_boost(similarity, count, rarity),
                EntityMatch(query_entity, text, similarity, count),
            )
            if count:
                weighed.append((*match_of[entity_id][:1], entity_id, match_of[entity_id][1]))
        keep(links, match_of)
    if room > 0 and weighed:
        chosen: dict[int, tuple[float, EntityMatch]] = {}
        for boost, entity_id, match in sorted(weighed, key=lambda item: item[0], reverse=True):
            if entity_id in chosen:
                continue
            if match.linked_memories > room:
                break
            chosen[entity_id] = (boost, match)
            room -= match.linked_memories
        if chosen:
            _, links, _ = db.entity_links(conn, list(chosen), fsql, fparams)
            keep(links, chosen)
    return best, matches, active


# --- 3 and 4. fuse and assemble -----------------------------------------------------------


def today() -> str:
    """Today's date in UTC, the clock expiration dates are read against."""
    return dt.datetime.now(dt.timezone.utc).date().isoformat()


def is_expired(expiration_date: str | None, on: str) -> bool:
    """A memory expires after its expiration day."""
    return expiration_date is not None and expiration_date < on


def run(conn: apsw.Connection, prepared: PreparedQuery, request: SearchRequest, explain: bool) -> Explanation:
    """Signals, expiry, the gate and fusion, then the ranked memories with their scores."""
    signals = gather_signals(conn, prepared, request)
    rows = db.memories_by_rowid(conn, list(signals.distances))
    on = today()
    dropped: list[DroppedCandidate] = []
    semantic: dict[int, float] = {}
    for rowid, distance in sorted(signals.distances.items(), key=lambda item: item[1]):
        similarity = scoring.similarity_from_distance(distance)
        if not request.show_expired and is_expired(rows[rowid].expiration_date, on):
            dropped.append(DroppedCandidate(rows[rowid].id, rows[rowid].text, similarity, "expired"))
        else:
            semantic[rowid] = similarity
    params = scoring.bm25_params(len(prepared.terms))
    fusion = scoring.fuse(
        semantic, signals.bm25_raw, params, signals.boosts, request.threshold, request.top_k,
        entity_active=signals.entity_active,
    )
    dropped.extend(
        DroppedCandidate(rows[rowid].id, rows[rowid].text, similarity, "below_threshold")
        for rowid, similarity in fusion.below_threshold
    )
    if explain and request.filter_sql != "1":
        dropped.extend(filtered_out(conn, prepared, request, signals))
    hits = [
        SearchHit(
            memory=to_memory(rows[rowid]),
            score=breakdown.final_score,
            details=breakdown if explain else None,
            entity_match=signals.entity_matches.get(rowid) if explain else None,
        )
        for rowid, breakdown in fusion.ranked
    ]
    analysis = QueryAnalysis(
        lemmatized_terms=prepared.terms,
        term_count=len(prepared.terms),
        bm25_midpoint=params.midpoint,
        bm25_steepness=params.steepness,
        entities=prepared.entities,
        signals_active=["semantic", *(["bm25"] if fusion.has_bm25 else []), *(["entity"] if fusion.has_entity else [])],
        max_possible_score=scoring.max_possible_score(fusion.has_bm25, fusion.has_entity),
        internal_limit=request.internal_limit,
        candidate_pool=request.options.candidate_pool,
        threshold=request.threshold,
        filters_applied=request.filter_sql != "1",
    )
    return Explanation(hits=hits, analysis=analysis, dropped=dropped if explain else [])


def filtered_out(
    conn: apsw.Connection, prepared: PreparedQuery, request: SearchRequest, signals: Signals
) -> list[DroppedCandidate]:
    """For explain only: the nearest memories the metadata filters kept out of every signal.

    Filters run inside each signal's SQL, so excluded memories never become candidates;
    this extra unfiltered KNN shows the caller what the filters cost them.
    """
    unfiltered = db.knn_memories(conn, prepared.embedding, request.scope, request.internal_limit, "1", [])
    excluded = [(rowid, distance) for rowid, distance in unfiltered if rowid not in signals.distances]
    rows = db.memories_by_rowid(conn, [rowid for rowid, _ in excluded])
    return [
        DroppedCandidate(rows[rowid].id, rows[rowid].text, scoring.similarity_from_distance(distance), "filtered")
        for rowid, distance in excluded
    ]


def to_memory(row: db.MemoryRow) -> Memory:
    """The public view of a stored row ('' scope ids become ``None``)."""
    return Memory(
        id=row.id,
        text=row.text,
        user_id=row.user_id or None,
        agent_id=row.agent_id or None,
        run_id=row.run_id or None,
        actor_id=row.actor_id,
        role=row.role,
        metadata=row.metadata,
        created_at=row.created_at,
        updated_at=row.updated_at,
        expiration_date=row.expiration_date,
    )
