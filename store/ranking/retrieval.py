"""The search pipeline, in its four steps: prepare → signals → fuse → assemble.

Mirrors Mem0's ``_search_vector_store`` and ``_compute_entity_boosts`` (commit 001c235):
semantic KNN over-fetch, BM25 (FTS5's) on the lemmatized query, entity boosts, the
semantic gate before fusion, the signal-count denominator. The hand-set fusion
(``ranking = "trimem"``) keeps those formulas and changes what they see: the union
candidate pool, keyword context from adjacent memories (a share of their squashed
keyword score), half the keyword score for memories that ask a question, entity rarity,
and each query entity matched to its closest stored entity only; ``ranking = "mem0"``
turns them all off (``SearchConfig.resolved``). The default, ``ranking = "learned"``,
reorders the hand-set fusion's first candidates (``learned_order``).
``prepare`` runs the models and touches no database, so the engine can run it outside
its database lock (an entity name it has not seen may still be embedding on the side thread
while the first signals read the store).
Nothing here catches and carries on: a signal that does not apply is a branch, and
the query analysis records which signals ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field

import numpy as np

from store import clock
from store.analysis.embeddings import Embedder, NameVectors
from store.analysis.entities import TOPIC, normalize_entity
from store.analysis.nlp import NLP
from store.backend import Snapshot, to_memory
from store.config import SearchConfig
from store.filters import Filter
from store.ranking import learned, relevance, scoring
from store.records import DroppedCandidate, EntityMatch, Explanation, QueryAnalysis, SearchHit
from store.scope import Scope
from store.sql.dialect import is_expired


@dataclass(frozen=True)
class PreparedQuery:
    """The query as the signals need it: lemmatized terms, entities, and embeddings."""

    text: str
    terms: list[str]
    entities: list[str]
    query_vector: Future[np.ndarray]
    """The query's embedding: it may still be computing on the side thread while the first
    keyword read runs (``Snapshot.first_signals`` waits for it only when its KNN needs it)."""
    entity_vectors: Future[np.ndarray]
    """The entities' embeddings, one row each: a name not seen before embeds on the side thread
    while the first signals read the store (``gather_signals`` asks for them last)."""
    names: frozenset[str] = frozenset()
    """The entities that name someone or something, as written with a capital (not a topic such
    as "support group", nor a lower-case word the tagger took for one): the relevance decision
    asks whether the scope knows them."""

    @property
    def embedding(self) -> np.ndarray:
        """``query_vector``, waited for."""
        return self.query_vector.result()

    @property
    def entity_embeddings(self) -> np.ndarray:
        """``entity_vectors``, waited for."""
        return self.entity_vectors.result()


@dataclass(frozen=True)
class SearchRequest:
    """One validated search: scope, limits, parsed filters and the signal switches."""

    scope: Scope
    top_k: int
    threshold: float
    filters: Filter | None
    show_expired: bool
    options: SearchConfig
    own_threshold: bool = False
    """The caller passed its threshold: its bar replaces the relevance decision (``judged``)."""
    on: str = field(default_factory=lambda: clock.today())
    """The day the search runs (UTC), read once so every signal agrees."""

    @property
    def live_on(self) -> str | None:
        """The day before which expired memories are skipped, or None to keep them (``show_expired``)."""
        return None if self.show_expired else self.on

    def __post_init__(self) -> None:
        # Every signal reads the resolved options, so ``ranking = "mem0"`` cannot be half applied.
        object.__setattr__(self, "options", self.options.resolved())

    @property
    def judged(self) -> bool:
        """Whether the query's relevance is judged before anything is returned (``store.ranking.relevance``)."""
        return self.options.relevance_check and not self.own_threshold

    @property
    def internal_limit(self) -> int:
        return scoring.internal_limit(self.top_k, self.options.overfetch_factor, self.options.overfetch_minimum)


@dataclass
class Signals:
    """Raw signal values keyed by memory rowid, before any gating."""

    distances: dict[int, float]  # nearest first
    bm25_raw: dict[int, float]
    """Keyword hits and their context (``keyword_context``)."""
    boosts: dict[int, float]
    entity_active: bool
    entity_matches: dict[int, EntityMatch] = field(default_factory=dict)
    keyword_sources: dict[int, scoring.KeywordSource] = field(default_factory=dict)
    names: dict[str, float] = field(default_factory=dict)
    """Each query entity, and how close the scope's closest stored entity is (``names_closeness``)."""
    keyword_hits: dict[int, float] = field(default_factory=dict)
    """The keyword hits' own raw BM25, best first, before context."""


# --- 1. prepare -------------------------------------------------------------------------


def prepare(
    query: str, nlp: NLP, embedder: Embedder, names: NameVectors, options: SearchConfig, side: Executor
) -> PreparedQuery:
    """Lemmatize and extract entities while the query embeds on the ``side`` thread, then embed
    the entities there too (most are names seen before, remembered by ``names``): ONNX Runtime
    releases the GIL while it computes, so both cores work. The analysis is done first (about
    5 ms against 6), so the query's embedding is not waited for here: the first keyword read
    runs while it finishes."""
    query_vector = side.submit(embed_one, embedder, query)
    analysis = nlp.analyze_query(query, entities=options.use_entities)
    entities: list[str] = []
    named: set[str] = set()
    if options.use_entities:
        for entity in analysis.entities:
            if entity.normalized and entity.normalized not in entities:
                entities.append(entity.normalized)
            if entity.entity_type != TOPIC and not entity.text.islower():  # "diet" is no name, even tagged ORG
                named.add(entity.normalized)
        entities = entities[: scoring.MAX_QUERY_ENTITIES]
    entity_vectors = names.embed_on(side, entities)  # queued behind the query's embedding
    return PreparedQuery(
        text=query,
        terms=analysis.lemmatized.split(),
        entities=entities,
        query_vector=query_vector,
        entity_vectors=entity_vectors,
        names=frozenset(named.intersection(entities)),
    )


def embed_one(embedder: Embedder, text: str) -> np.ndarray:
    """One text's embedding."""
    return embedder.embed_batch([text])[0]


# --- 2. signals -------------------------------------------------------------------------


def gather_signals(snapshot: Snapshot, prepared: PreparedQuery, request: SearchRequest) -> Signals:
    """Run the three signals over the caller's scope and filters. Expired memories are kept out
    inside each signal, like the metadata filters: they take no over-fetch slot and add no
    keyword or entity share to the denominator."""
    limit = request.internal_limit
    scope, filters, on = request.scope, request.filters, request.live_on
    terms = prepared.terms if request.options.use_bm25 else []
    nearest, found = snapshot.first_signals(prepared.query_vector.result, terms, scope, limit, filters, on)
    distances = dict(nearest)
    keywords: scoring.KeywordContext[int] = scoring.KeywordContext({}, {})
    hits: dict[int, float] = {}
    if request.options.use_bm25:
        hits = dict(found)
        keywords = keyword_context(snapshot, hits, request, len(prepared.terms))
    bm25_raw = keywords.raw
    # The reference pool ranks only vector candidates, so only their links are needed; the
    # union pool adds the keyword hits and, like the other signals, up to ``limit`` memories
    # of the entity signal's own.
    union = request.options.candidate_pool == "union"
    reachable = list(dict.fromkeys([*distances, *bm25_raw])) if union else list(distances)
    boosts, matches, entity_active, names = entity_boosts(snapshot, prepared, request, reachable, limit if union else 0)
    if union:
        # Score keyword and entity hits that fell outside the vector over-fetch exactly,
        # instead of dropping them; they still face the semantic gate.
        missing = list(dict.fromkeys(rowid for rowid in (*bm25_raw, *boosts) if rowid not in distances))
        if missing and len(distances) >= limit:
            missing = reachable_outside_pool(prepared, request, distances, missing, bm25_raw, boosts, entity_active)
        distances.update(snapshot.distances_for(prepared.embedding, missing, request.scope))
    return Signals(distances, bm25_raw, boosts, entity_active, matches, keywords.source, names, hits)


def reachable_outside_pool(
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
    explain does not list the skipped ones as dropped. The pool holds no expired memory
    unless the caller asked for them, so it is the pool fusion will rank."""
    semantic = {rowid: scoring.similarity_from_distance(distance) for rowid, distance in distances.items()}
    ceiling = scoring.similarity_from_distance(max(distances.values()))
    return scoring.could_reach_top_k(
        semantic, outside, ceiling, bm25_raw, scoring.bm25_params(len(prepared.terms)), boosts,
        request.threshold, request.top_k, entity_active=entity_active,
    )


def keyword_context(
    snapshot: Snapshot, bm25_raw: dict[int, float], request: SearchRequest, term_count: int
) -> scoring.KeywordContext[int]:
    """The keyword hits, plus the memories around them (same scope, rowid ± 1 up to
    ± ``keyword_context_reach``, stored at most ``keyword_context_seconds`` apart) scored at
    ``keyword_context`` / places away × the hit's raw BM25, or × its squashed score with
    ``keyword_context_share = "score"``; hits that end with a question mark keep
    ``question_keywords`` of their own (see ``scoring.keyword_context``)."""
    options = request.options
    weight, question_share = options.keyword_context, options.question_keywords
    rowids = list(bm25_raw)
    params = scoring.bm25_params(term_count) if options.keyword_context_share == "score" else None
    # Only hits whose share is more than nothing (not a name found in most of the scope, at
    # the sigmoid's floor) have neighbours worth looking up: the same scores, fewer rows.
    sharing = [rowid for rowid, raw in bm25_raw.items() if scoring.context_share(raw, weight, params) > 0]
    adjacent = (
        snapshot.adjacent_memories(
            sharing, request.scope, request.filters, request.live_on,
            options.keyword_context_seconds, options.keyword_context_reach,
        )
        if weight > 0 and sharing
        else {}
    )
    questions = snapshot.questions_among(rowids, request.scope) if question_share < 1 else set()
    return scoring.keyword_context(bm25_raw, places_away(adjacent), weight, params, questions, question_share)


def places_away(adjacent: Mapping[int, Sequence[int]]) -> dict[int, list[tuple[int, int]]]:
    """Each memory's neighbours (``Snapshot.adjacent_memories``) with how many places away each
    is, as ``scoring.keyword_context`` takes them."""
    return {rowid: [(other, abs(other - rowid)) for other in others] for rowid, others in adjacent.items()}


def entity_boosts(
    snapshot: Snapshot,
    prepared: PreparedQuery,
    request: SearchRequest,
    among: list[int] | None,
    room: int = 0,
) -> tuple[dict[int, float], dict[int, EntityMatch], bool, dict[str, float]]:
    """Each memory's largest boost from stored entities similar to a query entity, whether
    any memory in scope got one (Mem0's test for the entity share of the denominator), and
    how close each query entity's closest stored entity is (``names_closeness``).
    With ``entity_match = "names"`` a query entity boosts through its most similar stored
    name and the longer names that hold its words, counted as one entity; with "best"
    through the most similar name only; with "all" (Mem0) through every stored entity above
    the match threshold. Entities are stored per scope, so one name the user's agents or runs
    each stored is several rows: the most similar name is all of them, or the boost would go to
    whichever the store found first (``closest_name``).

    ``among`` limits the boosts computed to those memories; ``None`` computes them all.
    ``room`` adds the memories of the most boosting matched entities, whole entities in
    descending boost order while their links fit in ``room`` memories: the entity signal's
    own candidates for the union pool, found without reading every link of a name that
    links to half the scope.
    """
    best: dict[int, float] = {}
    matches: dict[int, EntityMatch] = {}
    by_rarity = request.options.entity_weighting == "rarity"
    scope_count: int | None = None  # read once, when the first entity with links is weighed by rarity
    filters, on = request.filters, request.live_on
    # (boost, entity id, match, its own links) of every matched entity that has links
    weighed: list[tuple[float, int, EntityMatch, int]] = []

    def keep(links: list[tuple[int, int]], match_of: dict[int, tuple[float, EntityMatch]]) -> None:
        for entity_id, rowid in links:  # read in no set order: equal boosts keep the first name
            boost, match = match_of[entity_id]
            kept = best.get(rowid, 0.0)
            if boost > kept or (boost == kept and rowid in matches and match.entity < matches[rowid].entity):
                best[rowid] = boost
                matches[rowid] = match

    # Each query entity's matched stored entities, then the links of all of them in one read.
    matched: list[tuple[str, dict[int, tuple[str, float]], dict[int, int]]] = []
    found = snapshot.knn_entities(prepared.entity_embeddings, request.scope, scoring.ENTITY_SEARCH_LIMIT,
                                  scoring.ENTITY_MATCH_DISTANCE)
    names_known = names_closeness(snapshot, prepared, request.scope, found)
    for query_entity, hits in zip(prepared.entities, found):
        similar: dict[int, tuple[str, float]] = {}
        for entity_id, text, distance in hits:  # nearest first, so the similar ones lead
            similarity = scoring.similarity_from_distance(distance)
            if similarity < scoring.ENTITY_MATCH_THRESHOLD:
                break
            similar[entity_id] = (text, similarity)
        matching = request.options.entity_match
        names: dict[int, int] = {}  # entity id -> the closest entity it is the name (in another scope) or a longer name of
        if matching != "all" and similar:
            closest = closest_name(similar)
            alike = same_names(similar, similar[closest][0])
            if matching == "names":
                alike += longer_names(similar, similar[closest][0])
            names = {entity_id: closest for entity_id in alike if entity_id != closest}
            similar = {entity_id: similar[entity_id] for entity_id in (closest, *names)}
        matched.append((query_entity, similar, names))
    wanted = list(dict.fromkeys(entity_id for _, similar, _ in matched for entity_id in similar))
    linked, all_links, active = snapshot.entity_links(wanted, request.scope, filters, on, among)
    for query_entity, similar, names in matched:
        # A name in each scope that stored it, and its longer forms ("Ines", "Ines Duarte"), are
        # one entity: they boost alike, as rare as all their memories together.
        counted = {entity_id: linked.get(entity_id, 0) for entity_id in similar}
        for entity_id, closest in names.items():
            counted[closest] += counted[entity_id]
        match_of = {}
        for entity_id, (text, _) in similar.items():
            head = names.get(entity_id, entity_id)
            similarity, count = similar[head][1], counted[head]
            rarity = 1.0
            if by_rarity and count:
                scope_count = snapshot.scope_count(request.scope) if scope_count is None else scope_count
                rarity = scoring.entity_rarity(count, scope_count)
            match_of[entity_id] = (
                scoring.entity_boost(similarity, count, rarity),
                EntityMatch(query_entity, text, similarity, count),
            )
            if own := linked.get(entity_id, 0):
                weighed.append((match_of[entity_id][0], entity_id, match_of[entity_id][1], own))
        keep([(entity_id, rowid) for entity_id, rowid in all_links if entity_id in similar], match_of)
    if room > 0 and weighed:
        chosen: dict[int, tuple[float, EntityMatch]] = {}
        # Equal boosts in the order of their names, not of the ids the store gave them.
        for boost, entity_id, match, own in sorted(weighed, key=lambda item: (-item[0], item[2].entity, item[3])):
            if entity_id in chosen:
                continue
            if own > room:
                break
            chosen[entity_id] = (boost, match)
            room -= own
        if chosen:
            _, links, _ = snapshot.entity_links(list(chosen), request.scope, filters, on)
            keep(links, chosen)
    return best, matches, active, names_known


def names_closeness(
    snapshot: Snapshot, prepared: PreparedQuery, scope: Scope, found: Sequence[Sequence[tuple[int, str, float]]]
) -> dict[str, float]:
    """How well the scope knows each name the query mentions (``relevance``): 1.0 when a stored
    entity holds all its words ("Atlas" in "Project Atlas"), else the similarity of the closest
    (``found``: each query entity's nearest entities, ``Snapshot.knn_entities``). The store is asked
    only about the names whose closest entity is not the name itself."""
    closest = {entity: hits[0] if hits else None for entity, hits in zip(prepared.entities, found)
               if entity in prepared.names}
    asked = [name for name, hit in closest.items() if hit is None or normalize_entity(hit[1]) != name]
    holding = dict(zip(asked, snapshot.entities_holding(asked, scope)))
    return {
        name: 1.0 if holding.get(name, True) else scoring.similarity_from_distance(hit[2]) if hit else 0.0
        for name, hit in closest.items()
    }


def closest_name(similar: dict[int, tuple[str, float]]) -> int:
    """The matched entity most similar to the query entity; of equally similar ones, the first
    by name, so the choice never depends on the order the store found them in."""
    return min(similar, key=lambda entity_id: (-similar[entity_id][1], similar[entity_id][0]))


def same_names(similar: dict[int, tuple[str, float]], name: str) -> list[int]:
    """The matched entities that are ``name`` itself, once per scope that stored it."""
    normalized = normalize_entity(name)
    return [entity_id for entity_id, (text, _) in similar.items() if normalize_entity(text) == normalized]


def longer_names(similar: dict[int, tuple[str, float]], name: str) -> list[int]:
    """The matched entities that are longer names holding every word of ``name`` ("Ines
    Duarte", "Project Atlas" for "Ines", "Atlas")."""
    words = set(normalize_entity(name).split())
    return [
        entity_id
        for entity_id, (text, _) in similar.items()
        if words < set(normalize_entity(text).split())
    ]


# --- 3 and 4. fuse and assemble -----------------------------------------------------------


def run(snapshot: Snapshot, prepared: PreparedQuery, request: SearchRequest, explain: bool) -> Explanation:
    """Signals (expired and filtered-out memories already excluded), the gate and fusion, then
    the ranked memories with their scores, all read from one ``snapshot``."""
    signals = gather_signals(snapshot, prepared, request)
    semantic = {rowid: scoring.similarity_from_distance(distance) for rowid, distance in signals.distances.items()}
    params = scoring.bm25_params(len(prepared.terms))
    reorder = request.options.ranking == "learned"
    fusion = scoring.fuse(
        semantic, signals.bm25_raw, params, signals.boosts, request.threshold,
        learned.POOL if reorder else request.top_k, entity_active=signals.entity_active,
    )
    decision = judge_relevance(semantic, signals.names, len(prepared.terms), request)
    # Rows are read for what is returned: the ranked memories (for explain, also those withheld
    # when the query has no answer), and for explain the dropped ones.
    ranked = fusion.ranked if decision is None or decision.answerable or explain else []
    learned_scores: dict[int, learned.LearnedScore] = {}
    if reorder:
        ranked, learned_scores = learned_order(snapshot, prepared, request, signals, semantic, params, ranked)
    shown = [rowid for rowid, _ in ranked] + ([rowid for rowid, _ in fusion.below_threshold] if explain else [])
    rows = snapshot.memories_by_rowid(shown, request.scope)
    dropped: list[DroppedCandidate] = []
    if explain:
        dropped = [
            DroppedCandidate(rows[rowid].id, rows[rowid].text, similarity, "below_threshold")
            for rowid, similarity in fusion.below_threshold
        ]
        if request.filters is not None or request.live_on is not None:
            dropped.extend(left_out(snapshot, prepared, request, signals))
    hits = [
        SearchHit(
            memory=to_memory(rows[rowid]),
            score=learned_scores[rowid].score if reorder else breakdown.final_score,
            details=breakdown if explain else None,
            entity_match=signals.entity_matches.get(rowid) if explain else None,
            keyword_source=signals.keyword_sources.get(rowid) if explain and breakdown.bm25_score else None,
            learned=learned_scores.get(rowid) if explain else None,
        )
        for rowid, breakdown in ranked
    ]
    withheld: list[SearchHit] = []
    if decision is not None and not decision.answerable:
        hits, withheld = [], hits
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
        filters_applied=request.filters is not None,
    )
    return Explanation(hits=hits, analysis=analysis, dropped=dropped, relevance=decision, withheld=withheld)


def learned_order(
    snapshot: Snapshot,
    prepared: PreparedQuery,
    request: SearchRequest,
    signals: Signals,
    semantic: dict[int, float],
    params: scoring.SigmoidParams,
    ranked: list[tuple[int, scoring.ScoreBreakdown]],
) -> tuple[list[tuple[int, scoring.ScoreBreakdown]], dict[int, learned.LearnedScore]]:
    """The first ``top_k`` of ``ranked`` (the fusion's first ``learned.POOL``) in the order of the
    learned model, and each one's learned score: the candidates described as
    ``store.ranking.learned`` reads them, their neighbours' similarities read exactly where the
    signals did not reach them."""
    if not ranked:
        return [], {}
    rowids = [rowid for rowid, _ in ranked]
    own = {rowid: scoring.normalize_bm25(raw, params) for rowid, raw in signals.keyword_hits.items() if raw > 0}
    adjacent, distances, asks, texts = snapshot.neighbourhood(
        rowids, prepared.embedding, semantic, request.scope, request.filters, request.live_on)
    similarity = dict(semantic)
    similarity.update((rowid, scoring.similarity_from_distance(distance)) for rowid, distance in distances.items())
    query = learned.Query.of(prepared.text, len(prepared.terms), prepared.names)
    named = {rowid: learned.opens_with_name(text, query.names) for rowid, text in texts.items()}
    candidates = [
        learned.Candidate(
            similarity=semantic[rowid], keyword=own.get(rowid, 0.0), keyword_with_context=breakdown.bm25_score,
            bm25=signals.keyword_hits.get(rowid, 0.0),
            neighbour_similarity=max((similarity.get(n, 0.0) for n in adjacent.get(rowid, ())), default=0.0),
            neighbour_keyword=max((own.get(n, 0.0) for n in adjacent.get(rowid, ())), default=0.0),
            asks=rowid in asks, time_words=learned.places_in_time(texts.get(rowid, "")),
            opens_with_name=named.get(rowid, False),
            neighbour_opens_with_name=any(named.get(n, False) for n in adjacent.get(rowid, ())), fused_rank=rank,
            query=query,
        )
        for rank, (rowid, breakdown) in enumerate(ranked)
    ]
    order = learned.shipped().rank(candidates, request.top_k)
    return [ranked[i] for i, _ in order], {ranked[i][0]: score for i, score in order}


def judge_relevance(
    semantic: Mapping[int, float], names: Mapping[str, float], words: int, request: SearchRequest
) -> relevance.Relevance | None:
    """Whether the query has an answer in the scope (``store.ranking.relevance``), from the best
    similarity among the candidates (the nearest memory is always one) and the query's names;
    ``None`` when the request is not judged (``SearchRequest.judged``)."""
    if not request.judged:
        return None
    options = request.options
    best = max(semantic.values(), default=None)
    return relevance.judge(best, names, words, options.relevance_floor, options.relevance_floor_unknown_names)


def left_out(
    snapshot: Snapshot, prepared: PreparedQuery, request: SearchRequest, signals: Signals
) -> list[DroppedCandidate]:
    """For explain only: the nearest memories that expiry or the metadata filters kept out of
    every signal, each marked ``expired`` or ``filtered``.

    Both run inside each signal, so excluded memories never become candidates; this extra
    unfiltered KNN shows the caller what they cost.
    """
    unfiltered = snapshot.knn_memories(prepared.embedding, request.scope, request.internal_limit, None, None)
    excluded = [(rowid, distance) for rowid, distance in unfiltered if rowid not in signals.distances]
    rows = snapshot.memories_by_rowid([rowid for rowid, _ in excluded], request.scope)
    return [
        DroppedCandidate(
            rows[rowid].id, rows[rowid].text, scoring.similarity_from_distance(distance),
            "expired" if request.live_on and is_expired(rows[rowid].expiration_date, request.live_on) else "filtered",
        )
        for rowid, distance in excluded
    ]
