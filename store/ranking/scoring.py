"""Three-signal fusion arithmetic: pure functions, numbers in, numbers out.

Mirrors Mem0's ``mem0/utils/scoring.py`` and the boost formula buried in
``_compute_entity_boosts`` (mem0 commit 001c235), so that every tool, the CLI and
the benchmark score with one implementation. No I/O, no NLP, no SQL: the
retrieval module gathers the signals and hands this module plain numbers.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

Key = TypeVar("Key", bound=Hashable)

# Mem0's constants keep their names and values.
ENTITY_BOOST_WEIGHT = 0.5
"""Largest contribution of the entity signal, and its share of the denominator."""
ENTITY_MATCH_THRESHOLD = 0.5
"""A stored entity must be at least this similar to a query entity to boost anything."""
ENTITY_SPREAD_PENALTY = 0.001
"""Quadratic damping by linked-memory count: an entity on every memory says little."""
MAX_QUERY_ENTITIES = 8
"""Query entities beyond this many are ignored (each costs one embedding and one lookup)."""
ENTITY_SEARCH_LIMIT = 500
"""Stored entities examined per query entity."""
ENTITY_MATCH_DISTANCE = 1.0 - ENTITY_MATCH_THRESHOLD + 1e-6
"""The cosine distance beyond which a stored entity cannot match a query entity
(``ENTITY_MATCH_THRESHOLD``), with room for rounding: the entity KNN reads no further."""

# (largest term count, midpoint, steepness): longer queries accumulate larger raw
# BM25 sums, so the sigmoid's midpoint moves right and flattens as they grow.
BM25_BRACKETS: tuple[tuple[int, float, float], ...] = (
    (3, 5.0, 0.7),
    (6, 7.0, 0.6),
    (9, 9.0, 0.5),
    (15, 10.0, 0.5),
)
BM25_LONG_QUERY = (12.0, 0.5)


@dataclass(frozen=True)
class SigmoidParams:
    """Midpoint (raw BM25 that maps to 0.5) and steepness of the squashing sigmoid."""

    midpoint: float
    steepness: float


def bm25_params(term_count: int) -> SigmoidParams:
    """Pick the sigmoid for a query of ``term_count`` lemmatized terms.

    Mem0 counts an empty lemmatized query as one term, so 0 falls in the first bracket.
    """
    for largest, midpoint, steepness in BM25_BRACKETS:
        if term_count <= largest:
            return SigmoidParams(midpoint, steepness)
    return SigmoidParams(*BM25_LONG_QUERY)


def normalize_bm25(bm25_raw: float, params: SigmoidParams) -> float:
    """Squash a raw BM25 score (unbounded, ≥ 0) into (0, 1) with a logistic sigmoid.

    Monotone in ``bm25_raw``. The exponent is clamped so huge negative inputs do not
    overflow ``math.exp``.
    """
    exponent = -params.steepness * (bm25_raw - params.midpoint)
    return 1.0 / (1.0 + math.exp(min(exponent, 700.0)))


def internal_limit(top_k: int, factor: int, minimum: int) -> int:
    """How many candidates each signal fetches for a request of ``top_k`` results.

    Over-fetching gives keyword and entity hits room to overtake semantic neighbours.
    """
    return max(top_k * factor, minimum)


def similarity_from_distance(cosine_distance: float) -> float:
    """Cosine distance (0 = same direction, 2 = opposite) to a similarity in [0, 1].

    Negative similarities are clamped to 0, as Mem0 does.
    """
    return min(max(1.0 - cosine_distance, 0.0), 1.0)


def entity_boost(similarity: float, linked_count: int, rarity: float = 1.0) -> float:
    """Boost in [0, ENTITY_BOOST_WEIGHT] for a memory linked to a matched entity.

    ``similarity`` is between the query entity and the stored entity;
    ``linked_count`` is how many memories that stored entity is linked to.
    ``rarity`` in [0, 1] (see ``entity_rarity``) scales the boost further; the default 1
    is Mem0's formula.
    """
    spread = max(linked_count, 1) - 1
    weight = 1.0 / (1.0 + ENTITY_SPREAD_PENALTY * spread * spread)
    return similarity * ENTITY_BOOST_WEIGHT * weight * rarity


def entity_rarity(linked_count: int, scope_count: int) -> float:
    """How rare an entity is in its scope, in [0, 1]: ``log(scope / links) / log(scope)``.

    IDF scaled to [0, 1]: 1 for an entity linked to one memory, 0 for one linked to every
    memory of the scope (a user's own name says nothing about which memory to return).
    Mem0's damping alone depends on the link count, not on the scope size. A scope of one
    memory has nothing to tell apart: 1.
    """
    if scope_count <= 1:
        return 1.0
    linked = min(max(linked_count, 1), scope_count)
    return math.log(scope_count / linked) / math.log(scope_count)


def bm25_raw_for(score: float, params: SigmoidParams) -> float:
    """The raw BM25 that ``normalize_bm25`` squashes to ``score`` (the sigmoid's inverse),
    0 when that would be negative (a raw score below 0 is no keyword hit)."""
    if score <= 0.0:
        return 0.0
    if score >= 1.0:
        return math.inf
    return max(params.midpoint - math.log(1.0 / score - 1.0) / params.steepness, 0.0)


def score_share(bm25_raw: float, weight: float, params: SigmoidParams) -> float:
    """The raw BM25 whose squashed score is ``weight`` × that of ``bm25_raw``; never above
    ``bm25_raw`` itself, whatever the rounding of the round trip."""
    return min(bm25_raw_for(weight * normalize_bm25(bm25_raw, params), params), bm25_raw)


def context_share(raw: float, part: float, params: SigmoidParams | None) -> float:
    """``part`` of a keyword score as a raw BM25: of the raw value itself without ``params``,
    else of what it adds to the fused score (``score_share``). 0 is no share at all."""
    return part * raw if params is None else score_share(raw, part, params)


KeywordSource = Literal["own", "question", "beside"]
KEYWORD_SOURCES: dict[KeywordSource, str] = {
    "own": "the memory's own words",
    "question": "its own words, at the share a memory ending with '?' keeps",
    "beside": "a share of the keyword score of the memory stored just before or after it in the same scope",
}
"""Where a memory's keyword score comes from, as explanations say it."""


@dataclass(frozen=True)
class KeywordContext(Generic[Key]):
    """Raw BM25 scores after keyword context, and where each comes from."""

    raw: dict[Key, float]
    source: dict[Key, KeywordSource]


def keyword_context(
    bm25_raw: Mapping[Key, float],
    neighbours: Mapping[Key, Sequence[tuple[Key, int]]],
    weight: float,
    params: SigmoidParams | None = None,
    questions: Collection[Key] = (),
    question_share: float = 1.0,
) -> KeywordContext[Key]:
    """Raw BM25 scores where a memory also earns a share of a neighbour's keyword score, and a
    question keeps ``question_share`` of its own.

    ``neighbours`` lists, for each keyword hit, the memories around it with how many places
    away each is; one ``steps`` away earns ``weight / steps`` of the hit's score. Each memory
    keeps the larger of its own raw score and the best share passed on to it (keyword hits
    map to the memories beside them). In a conversation the answer often shares no word with
    the question while the turn it replies to does. Without ``params`` a share of a score is
    that share of its raw value; with them, the raw score whose squashed score
    (``normalize_bm25``) is that share of the original's, so "half a hit" is half of
    what the hit adds to the fused score, and a hit that adds almost nothing (a word in
    most of the scope) passes on almost nothing.

    The hits in ``questions`` (memories that ask) keep only ``question_share`` of their own
    score, yet pass on their neighbours' share of the whole of it: a question repeats the
    words a later query asks with, its answer is beside it. With ``weight`` 0 and
    ``question_share`` 1 the scores come back unchanged, each its memory's "own"; all
    scores stay ≥ 0, and no score but a question's drops.
    """

    scores: dict[Key, float] = {}
    source: dict[Key, KeywordSource] = {}
    for key, raw in bm25_raw.items():
        asks = question_share < 1 and key in questions
        scores[key], source[key] = (context_share(raw, question_share, params), "question") if asks else (raw, "own")
    if weight > 0:
        for key, raw in bm25_raw.items():
            passed: dict[int, float] = {}  # steps away -> the share of this hit's score
            for neighbour, steps in neighbours.get(key, ()):
                if steps not in passed:
                    passed[steps] = context_share(raw, weight / steps, params)
                if passed[steps] > scores.get(neighbour, 0.0):
                    scores[neighbour], source[neighbour] = passed[steps], "beside"
    return KeywordContext(scores, source)


def max_possible_score(has_bm25: bool, has_entity: bool) -> float:
    """The denominator: 1.0 for semantic, +1.0 if BM25 found anything, +0.5 for entities.

    Counting only the signals that fired keeps a semantic-only search on the same
    0..1 scale as a fully hybrid one.
    """
    return 1.0 + (1.0 if has_bm25 else 0.0) + (ENTITY_BOOST_WEIGHT if has_entity else 0.0)


def passes_gate(semantic_score: float, threshold: float) -> bool:
    """The semantic gate, applied before fusion: strong keyword or entity signals cannot rescue
    a memory whose meaning is unrelated to the query."""
    return semantic_score >= threshold


@dataclass(frozen=True)
class ScoreBreakdown:
    """Every part of one fused score, as ``explain_search`` shows it."""

    semantic_score: float
    bm25_score: float
    bm25_raw: float
    entity_boost: float
    raw_score: float
    max_possible_score: float
    final_score: float
    threshold: float


@dataclass(frozen=True)
class Fusion(Generic[Key]):
    """Ranked survivors of the gate (best first), the candidates the gate dropped, and
    which optional signals counted in the denominator."""

    ranked: list[tuple[Key, ScoreBreakdown]]
    below_threshold: list[tuple[Key, float]]
    has_bm25: bool
    has_entity: bool


def fuse(
    semantic: Mapping[Key, float],
    bm25_raw: Mapping[Key, float],
    params: SigmoidParams,
    boosts: Mapping[Key, float],
    threshold: float,
    top_k: int,
    *,
    entity_active: bool | None = None,
) -> Fusion[Key]:
    """Gate the candidates on their semantic score, then fuse and rank them.

    ``semantic`` maps each candidate to its similarity in [0, 1]; only these keys can be
    returned. ``bm25_raw`` holds raw BM25 scores of keyword hits (only > 0 counts) and
    ``boosts`` entity boosts; either may include keys that are not candidates, and as in
    Mem0 any such score still switches its signal's share of the denominator on.
    ``entity_active`` says whether the entity signal fired anywhere, for callers that only
    computed ``boosts`` for the candidates; by default it is ``bool(boosts)``.
    Ties keep the order of ``semantic`` (nearest first), so results are deterministic.
    """
    bm25 = {key: normalize_bm25(raw, params) for key, raw in bm25_raw.items() if raw > 0}
    has_entity = bool(boosts) if entity_active is None else entity_active
    denominator = max_possible_score(bool(bm25), has_entity)
    scored: list[tuple[float, Key]] = []
    below: list[tuple[Key, float]] = []
    for key, semantic_score in semantic.items():
        if not passes_gate(semantic_score, threshold):
            below.append((key, semantic_score))
            continue
        scored.append((min((semantic_score + bm25.get(key, 0.0) + boosts.get(key, 0.0)) / denominator, 1.0), key))
    # nlargest is sorted(..., reverse=True)[:top_k], stable: ties keep the order of ``semantic``.
    ranked = []
    for final, key in heapq.nlargest(top_k, scored, key=lambda item: item[0]):
        bm25_score, boost = bm25.get(key, 0.0), boosts.get(key, 0.0)
        breakdown = ScoreBreakdown(
            semantic_score=semantic[key],
            bm25_score=bm25_score,
            bm25_raw=bm25_raw.get(key, 0.0) if bm25_score else 0.0,
            entity_boost=boost,
            raw_score=semantic[key] + bm25_score + boost,
            max_possible_score=denominator,
            final_score=final,
            threshold=threshold,
        )
        ranked.append((key, breakdown))
    return Fusion(ranked=ranked, below_threshold=below, has_bm25=bool(bm25), has_entity=has_entity)



def could_reach_top_k(
    pool: Mapping[Key, float],
    outside: Sequence[Key],
    ceiling: float,
    bm25_raw: Mapping[Key, float],
    params: SigmoidParams,
    boosts: Mapping[Key, float],
    threshold: float,
    top_k: int,
    *,
    entity_active: bool | None = None,
) -> list[Key]:
    """Of the memories ``outside`` the semantic pool, those that could still make the top ``top_k``.

    ``pool`` maps the pool's memories to their similarity; every memory outside it is at
    most ``ceiling`` similar to the query (the pool's farthest). A memory whose best
    possible fused score, with ``ceiling`` as its similarity, is below the ``top_k``-th
    score of the pool alone cannot be returned, so its exact similarity need not be read.
    The result is the same ranking at a fraction of the vector lookups. Ties are kept.
    """
    if ceiling < threshold:
        return []
    ranked = fuse(pool, bm25_raw, params, boosts, threshold, top_k, entity_active=entity_active)
    if len(ranked.ranked) < top_k:
        return list(outside)
    bar = ranked.ranked[-1][1].final_score
    denominator = max_possible_score(ranked.has_bm25, ranked.has_entity)
    kept = []
    for key in outside:
        raw = bm25_raw.get(key, 0.0)
        bm25 = normalize_bm25(raw, params) if raw > 0 else 0.0
        if min((ceiling + bm25 + boosts.get(key, 0.0)) / denominator, 1.0) >= bar:
            kept.append(key)
    return kept
