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
from store.filters import All, Filter
from store.ranking import learned, relevance, scoring, standing
from store.records import DroppedCandidate, EntityMatch, Explanation, QueryAnalysis, SearchHit
from store.scope import Scope
from store.sql.dialect import is_expired
from store.sql.keywords import fold


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
    field_vectors: Future[np.ndarray] | None = None
    """The embeddings of ``standing.FIELDS``, one a row (remembered after the first search), or
    None when standing memories are not recalled (``SearchConfig.standing_recall``)."""
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
    field_vectors = names.embed_on(side, standing.FIELDS) if options.standing_recall else None
    return PreparedQuery(
        text=query,
        terms=analysis.lemmatized.split(),
        entities=entities,
        query_vector=query_vector,
        entity_vectors=entity_vectors,
        field_vectors=field_vectors,
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
    entity is its short form or it is theirs ("Mel", "Melanie": ``short_form``), holds all its
    words ("Atlas" in "Project Atlas"), or its memories hold them all, as words
    or the start of longer ones (the tagger took no entity from "my sister ana is a nurse", nor
    "Postgres" from "PostgreSQL 16": ``Snapshot.words_written``), else the similarity of the
    closest entity (``found``: each query entity's nearest entities, ``Snapshot.knn_entities``).
    The store is asked only about the names whose closest entity is not the name itself."""
    nearest = {entity: hits for entity, hits in zip(prepared.entities, found) if entity in prepared.names}
    closest = {name: hits[0] if hits else None for name, hits in nearest.items()}
    asked = [name for name, hit in closest.items()
             if (hit is None or normalize_entity(hit[1]) != name)
             and not any(short_form(name, normalize_entity(text)) for _, text, _ in nearest[name])]
    holding = dict(zip(asked, snapshot.entities_holding(asked, scope)))
    words = {name: [fold(word) for word in name.split()] for name in asked if not holding[name]}
    unheld = list(dict.fromkeys(word for name_words in words.values() for word in name_words))
    written = dict(zip(unheld, snapshot.words_written(unheld, scope)))
    known = {name for name, hit in closest.items() if holding.get(name, True)}
    known.update(name for name, name_words in words.items() if name_words and all(written[w] for w in name_words))
    return {
        name: 1.0 if name in known else scoring.similarity_from_distance(hit[2]) if hit else 0.0
        for name, hit in closest.items()
    }


SHORT_FORM_LETTERS = 3
"""A short form of a name has at least this many letters, and more than a third of the name's."""


def short_form(name: str, stored: str) -> bool:
    """Whether a one-word name and a word of a stored name are one the other's short form: "mel" and
    "melanie brooks", "timothy" and "tim", but not "melbourne" and "mel" (a third of its letters).
    Only the nearest stored names are read (``scoring.ENTITY_MATCH_THRESHOLD`` similar or more)."""
    if " " in name:
        return False
    for word in stored.split():
        shorter, longer = sorted((name, word), key=len)
        if (shorter != longer and longer.startswith(shorter) and len(shorter) >= SHORT_FORM_LETTERS
                and 3 * len(shorter) > len(longer)):
            return True
    return False


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
    figures = relevance_figures(semantic, signals.names, len(prepared.terms), request)
    ranking = order(snapshot, prepared, request, signals, semantic, fusion, figures)
    ranked, learned_scores, decision, withheld_rowids = (
        ranking.ranked if explain else ranking.returned, ranking.scores, ranking.decision, ranking.withheld)
    asks_for_help = decision is not None and not figures.known_name  # a known name asks about it
    bearing = standing_bearing(snapshot, prepared, request, ranking.returned_rowids) if asks_for_help else []
    shown = [rowid for rowid, _ in ranked] + ([rowid for rowid, _ in fusion.below_threshold] if explain else [])
    rows = snapshot.memories_by_rowid([*shown, *bearing], request.scope)
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
    held = set(withheld_rowids)
    withheld = [hit for hit, (rowid, _) in zip(hits, ranked, strict=True) if rowid in held]
    hits = [hit for hit, (rowid, _) in zip(hits, ranked, strict=True) if rowid not in held]
    fused = dict(fusion.ranked)
    preferences = [
        SearchHit(memory=to_memory(rows[rowid]), standing=True, score=(
            learned_scores[rowid].probability if rowid in learned_scores
            else fused[rowid].final_score if rowid in fused and not reorder else 0.0))
        for rowid in bearing
    ]
    after = standing.placed([hit.score for hit in hits], len(preferences))
    hits = [*hits[:after], *preferences, *hits[after:]]
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


@dataclass(frozen=True)
class Ranking:
    """The ranked memories (for explain, also those the decision withholds), their learned
    scores, and the decision (None when the request is not judged)."""

    ranked: list[tuple[int, scoring.ScoreBreakdown]]
    scores: dict[int, learned.LearnedScore]
    decision: relevance.Relevance | None
    withheld: list[int]

    @property
    def returned(self) -> list[tuple[int, scoring.ScoreBreakdown]]:
        held = set(self.withheld)
        return [(rowid, breakdown) for rowid, breakdown in self.ranked if rowid not in held]

    @property
    def returned_rowids(self) -> list[int]:
        return [rowid for rowid, _ in self.returned]


def order(
    snapshot: Snapshot, prepared: PreparedQuery, request: SearchRequest, signals: Signals,
    semantic: dict[int, float], fusion: scoring.Fusion[int], figures: relevance.Relevance,
) -> Ranking:
    """The fusion's order, or learned fusion's (``ranking = "learned"``), and what a judged request
    withholds: under learned fusion every memory whose score is under ``search.min_score`` (so a
    query nothing answers gets nothing), and everything when no name the query mentions is known
    and no memory is near enough in meaning (``relevance.near``: a word nothing stored is near,
    such as "volcano", whose best memory in a small store the model still finds likely); under the
    hand-set fusion everything when the query has no answer by the relevance floors (``figures``)."""
    decision = figures if request.judged else None
    if request.options.ranking != "learned":
        withheld = [rowid for rowid, _ in fusion.ranked] if decision is not None and not decision.answerable else []
        return Ranking(fusion.ranked, {}, decision, withheld)
    candidates = describe(snapshot, prepared, request, signals, semantic, fusion.ranked, figures)
    ranked, scores = learned_order(fusion.ranked, candidates, request.top_k)
    if decision is None:
        return Ranking(ranked, scores, None, [])
    kept = returned_count([scores[rowid] for rowid, _ in ranked], figures.known_name, figures.best_similarity,
                          figures.unknown_names, request.options)
    best = scores[ranked[0][0]].score if ranked else None
    decision = relevance.Relevance(kept > 0, figures.best_similarity, request.options.min_score, figures.names,
                                   figures.known_name, figures.unknown_names, best)
    return Ranking(ranked, scores, decision, [rowid for rowid, _ in ranked[kept:]])


def returned_count(
    scores: Sequence[learned.LearnedScore], known_name: bool, best_similarity: float | None, unknown_names: bool,
    options: SearchConfig,
) -> int:
    """How many of a judged search's learned order it returns (``scores``: the memories' in that
    order, never rising, those the query restates first): those scored at least ``min_score`` and
    those the query restates, or none when no name the query mentions is known and no memory is near
    enough in meaning (``relevance.near``)."""
    near = known_name or relevance.near(best_similarity, unknown_names, options.min_similarity,
                                        options.relevance_floor_unknown_names)
    return sum(score.score >= options.min_score or score.restates for score in scores) if near else 0


def describe(
    snapshot: Snapshot,
    prepared: PreparedQuery,
    request: SearchRequest,
    signals: Signals,
    semantic: dict[int, float],
    ranked: list[tuple[int, scoring.ScoreBreakdown]],
    figures: relevance.Relevance,
) -> list[learned.Candidate]:
    """The hand-set fusion's first candidates (``ranked``, its first ``learned.POOL``) described as
    ``store.ranking.learned`` reads them: their signals, their neighbours' similarities read exactly
    where the signals did not reach them, and what the scope holds for the query (``figures``)."""
    if not ranked:
        return []
    params = scoring.bm25_params(len(prepared.terms))
    rowids = [rowid for rowid, _ in ranked]
    own = {rowid: scoring.normalize_bm25(raw, params) for rowid, raw in signals.keyword_hits.items() if raw > 0}
    adjacent, distances, asks, texts = snapshot.neighbourhood(
        rowids, prepared.embedding, semantic, request.scope, request.filters, request.live_on)
    similarity = dict(semantic)
    similarity.update((rowid, scoring.similarity_from_distance(distance)) for rowid, distance in distances.items())
    query = learned.Query.of(prepared.text, len(prepared.terms), prepared.names)
    scope = learned.Figures(figures.best_similarity or 0.0, ranked[0][1].final_score, figures.known_name,
                            figures.unknown_names, snapshot.scope_count(request.scope))
    named = {rowid: learned.opens_with_name(text, query.names) for rowid, text in texts.items()}
    return [
        learned.Candidate(
            similarity=semantic[rowid], keyword=own.get(rowid, 0.0), keyword_with_context=breakdown.bm25_score,
            bm25=signals.keyword_hits.get(rowid, 0.0),
            neighbour_similarity=max((similarity.get(n, 0.0) for n in adjacent.get(rowid, ())), default=0.0),
            neighbour_keyword=max((own.get(n, 0.0) for n in adjacent.get(rowid, ())), default=0.0),
            asks=rowid in asks, time_words=learned.places_in_time(texts.get(rowid, "")),
            opens_with_name=named.get(rowid, False),
            neighbour_opens_with_name=any(named.get(n, False) for n in adjacent.get(rowid, ())),
            fused_score=breakdown.final_score, entity_boost=breakdown.entity_boost, query=query, scope=scope,
        )
        for rowid, breakdown in ranked
    ]


def learned_order(
    ranked: list[tuple[int, scoring.ScoreBreakdown]], candidates: Sequence[learned.Candidate], top_k: int
) -> tuple[list[tuple[int, scoring.ScoreBreakdown]], dict[int, learned.LearnedScore]]:
    """The first ``top_k`` of ``ranked`` in the order of the learned model, and every candidate's
    learned score (``candidates``: ``ranked`` as ``describe`` describes them)."""
    order = learned.shipped().rank(candidates, len(candidates))
    return [ranked[i] for i, _ in order[:top_k]], {ranked[i][0]: score for i, score in order}


def standing_bearing(snapshot: Snapshot, prepared: PreparedQuery, request: SearchRequest, returned: Sequence[int]
                     ) -> list[int]:
    """The standing memories (``store.ranking.standing``) that bear on the query and are not
    ``returned`` already: the closest to the query's field, within the scope and filters, at most
    ``standing.MOST``. Nothing when the query lies in no field."""
    if prepared.field_vectors is None:
        return []
    fields = prepared.field_vectors.result()
    field = standing.field_of(prepared.embedding, fields)
    if field is None:
        return []
    marked = standing.MARKED if request.filters is None else All((request.filters, standing.MARKED))
    nearest = snapshot.knn_memories(fields[field], request.scope, standing.MOST, marked, request.live_on)
    return [rowid for rowid, distance in nearest
            if scoring.similarity_from_distance(distance) >= standing.MEMORY_FIELD_FLOOR and rowid not in returned]


def relevance_figures(
    semantic: Mapping[int, float], names: Mapping[str, float], words: int, request: SearchRequest
) -> relevance.Relevance:
    """What the scope holds for the query (``store.ranking.relevance``): the best similarity among
    the candidates (the nearest memory is always one) and the query's names, and the hand-set
    fusion's decision from them, which ``run`` keeps when the request is judged
    (``SearchRequest.judged``) and learned fusion does not decide itself."""
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
