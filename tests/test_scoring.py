"""The fusion arithmetic on worked examples (Mem0's numbers) and as properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from store.ranking import scoring
from store.ranking.scoring import SigmoidParams, bm25_params, entity_boost, fuse, max_possible_score, normalize_bm25


@pytest.mark.parametrize(
    ("terms", "midpoint", "steepness"),
    [
        (0, 5.0, 0.7),  # Mem0 counts an empty query as one term
        (1, 5.0, 0.7),
        (3, 5.0, 0.7),
        (4, 7.0, 0.6),
        (6, 7.0, 0.6),
        (7, 9.0, 0.5),
        (9, 9.0, 0.5),
        (10, 10.0, 0.5),
        (15, 10.0, 0.5),
        (16, 12.0, 0.5),
        (400, 12.0, 0.5),
    ],
)
def test_sigmoid_brackets_switch_at_mem0_boundaries(terms: int, midpoint: float, steepness: float) -> None:
    assert bm25_params(terms) == SigmoidParams(midpoint, steepness)


def test_sigmoid_values_match_mem0() -> None:
    params = SigmoidParams(5.0, 0.7)
    assert normalize_bm25(5.0, params) == 0.5
    assert normalize_bm25(10.0, params) == pytest.approx(1 / (1 + math.exp(-3.5)))
    assert normalize_bm25(0.0, params) == pytest.approx(1 / (1 + math.exp(3.5)))
    assert normalize_bm25(-1e9, params) == pytest.approx(0.0)  # no overflow


@pytest.mark.parametrize(
    ("has_bm25", "has_entity", "expected"),
    [(False, False, 1.0), (False, True, 1.5), (True, False, 2.0), (True, True, 2.5)],
)
def test_denominator_counts_only_active_signals(has_bm25: bool, has_entity: bool, expected: float) -> None:
    assert max_possible_score(has_bm25, has_entity) == expected


def test_entity_boost_is_damped_by_linked_memory_count() -> None:
    assert entity_boost(1.0, 1) == 0.5
    assert entity_boost(0.8, 11) == pytest.approx(0.8 * 0.5 / 1.1)
    assert entity_boost(1.0, 101) == pytest.approx(0.5 / 11)
    assert entity_boost(1.0, 0) == 0.5  # an unlinked count is treated as one


def test_internal_limit_overfetches() -> None:
    assert scoring.internal_limit(5, factor=4, minimum=60) == 60
    assert scoring.internal_limit(20, factor=4, minimum=60) == 80
    assert scoring.internal_limit(20, factor=10, minimum=100) == 200


def run_fuse(semantic, bm25=None, boosts=None, threshold=0.1, top_k=10, terms=3):
    return fuse(semantic, bm25 or {}, bm25_params(terms), boosts or {}, threshold, top_k)


def test_semantic_only_score_is_the_similarity() -> None:
    result = run_fuse({"a": 0.8, "b": 0.3})
    assert [key for key, _ in result.ranked] == ["a", "b"]
    assert result.ranked[0][1].final_score == pytest.approx(0.8)
    assert result.ranked[0][1].max_possible_score == 1.0


def test_semantic_and_bm25_divides_by_two() -> None:
    result = run_fuse({"a": 0.6}, bm25={"a": 5.0})
    details = result.ranked[0][1]
    assert details.bm25_score == 0.5 and details.bm25_raw == 5.0
    assert details.final_score == pytest.approx((0.6 + 0.5) / 2.0)


def test_semantic_and_entity_divides_by_one_and_a_half() -> None:
    result = run_fuse({"a": 0.6, "b": 0.5}, boosts={"b": 0.3})
    scores = dict(result.ranked)
    assert scores["a"].final_score == pytest.approx(0.6 / 1.5)
    assert scores["b"].final_score == pytest.approx(0.8 / 1.5)
    assert [key for key, _ in result.ranked] == ["b", "a"]


def test_all_three_signals_worked_example() -> None:
    result = run_fuse({"a": 0.8}, bm25={"a": 5.0}, boosts={"a": 0.25})
    details = result.ranked[0][1]
    assert details.raw_score == pytest.approx(1.55)
    assert details.max_possible_score == 2.5
    assert details.final_score == pytest.approx(0.62)


def test_signals_of_non_candidates_still_count_in_the_denominator() -> None:
    """Mem0 switches a signal's share on if it scored anything, candidate or not."""
    result = run_fuse({"a": 0.9}, bm25={"elsewhere": 8.0})
    assert result.ranked[0][1].final_score == pytest.approx(0.45)
    assert result.has_bm25 and not result.has_entity


def test_zero_bm25_does_not_count_as_a_signal() -> None:
    result = run_fuse({"a": 0.9}, bm25={"a": 0.0})
    assert result.ranked[0][1].final_score == pytest.approx(0.9)


def test_score_is_capped_at_one() -> None:
    result = run_fuse({"a": 1.0}, bm25={"a": 1e6}, boosts={"a": 0.5})
    assert result.ranked[0][1].final_score == 1.0


def test_gate_drops_a_candidate_whatever_its_other_signals() -> None:
    result = run_fuse({"weak": 0.09, "ok": 0.2}, bm25={"weak": 1e6}, boosts={"weak": 0.5}, threshold=0.1)
    assert [key for key, _ in result.ranked] == ["ok"]
    assert result.below_threshold == [("weak", 0.09)]


def test_top_k_cuts_after_ranking() -> None:
    result = run_fuse({"a": 0.3, "b": 0.2, "c": 0.1}, bm25={"c": 20.0}, top_k=1)
    assert [key for key, _ in result.ranked] == ["c"]


unit = st.floats(min_value=0.0, max_value=1.0)
raw = st.floats(min_value=-50.0, max_value=1e6)


@given(a=raw, b=raw, terms=st.integers(0, 40))
def test_normalized_bm25_is_in_unit_range_and_monotone(a: float, b: float, terms: int) -> None:
    params = bm25_params(terms)
    low, high = sorted((a, b))
    assert 0.0 <= normalize_bm25(low, params) <= normalize_bm25(high, params) <= 1.0


@given(
    semantic=st.dictionaries(st.integers(0, 30), unit, max_size=20),
    bm25=st.dictionaries(st.integers(0, 40), raw, max_size=20),
    boosts=st.dictionaries(st.integers(0, 40), st.floats(0.0, 0.5), max_size=20),
    threshold=unit,
    top_k=st.integers(1, 30),
)
def test_fused_scores_are_bounded_and_gated(semantic, bm25, boosts, threshold, top_k) -> None:
    result = fuse(semantic, bm25, bm25_params(3), boosts, threshold, top_k)
    assert len(result.ranked) <= top_k
    finals = [details.final_score for _, details in result.ranked]
    assert finals == sorted(finals, reverse=True)
    for key, details in result.ranked:
        assert 0.0 <= details.final_score <= 1.0
        assert details.semantic_score >= threshold
        assert key in semantic
    assert all(score < threshold for _, score in result.below_threshold)


def test_entity_share_can_be_declared_when_boosts_cover_only_candidates() -> None:
    """The retrieval computes boosts only for candidates; a boost elsewhere still counts."""
    result = fuse({"a": 0.6}, {}, bm25_params(3), {}, 0.1, 10, entity_active=True)
    assert result.ranked[0][1].max_possible_score == 1.5 and result.has_entity


# --- trimem's departures (off under ranking = "mem0") ------------------------------------------


@pytest.mark.parametrize(
    ("linked", "scope", "expected"),
    [
        (1, 1000, 1.0),  # linked to one memory: fully rare
        (1000, 1000, 0.0),  # linked to every memory: says nothing
        (10, 1000, 2 / 3),  # log(100) / log(1000)
        (100, 1000, 1 / 3),
        (0, 1000, 1.0),  # counted as one link, like Mem0's damping
        (5, 1, 1.0),  # a one-memory scope has nothing to tell apart
        (2000, 1000, 0.0),  # more links than memories (a stale count) is clamped
    ],
)
def test_entity_rarity_is_idf_scaled_to_unit_range(linked: int, scope: int, expected: float) -> None:
    assert scoring.entity_rarity(linked, scope) == pytest.approx(expected)


def test_rarity_multiplies_mem0s_boost_and_defaults_to_it() -> None:
    assert entity_boost(0.8, 10) == entity_boost(0.8, 10, 1.0)
    assert entity_boost(0.8, 10, 0.5) == pytest.approx(entity_boost(0.8, 10) / 2)


@given(linked=st.integers(0, 10_000), scope=st.integers(0, 10_000))
def test_entity_rarity_is_in_unit_range_and_falls_with_links(linked: int, scope: int) -> None:
    rarity = scoring.entity_rarity(linked, scope)
    assert 0.0 <= rarity <= 1.0
    assert scoring.entity_rarity(linked + 1, scope) <= rarity


def test_keyword_context_gives_neighbours_half_a_hit() -> None:
    hits = {"question": 8.0, "other": 2.0}
    neighbours = {"question": [("answer", 1), ("other", 1), ("far", 2)], "other": [("question", 1)]}
    context = scoring.keyword_context(hits, neighbours, 0.5)
    assert context.raw == {"question": 8.0, "other": 4.0, "answer": 4.0, "far": 2.0}  # "other" keeps the larger
    assert context.source == {"question": "own", "other": "beside", "answer": "beside", "far": "beside"}
    unchanged = scoring.keyword_context(hits, neighbours, 0.0)
    assert unchanged.raw == hits and set(unchanged.source.values()) == {"own"}


def test_keyword_context_as_a_score_gives_neighbours_half_of_what_a_hit_adds() -> None:
    params = scoring.bm25_params(2)  # midpoint 5, steepness 0.7
    hits = {"question": 12.0, "name": 0.01}
    neighbours = {"question": [("answer", 1)], "name": [("beside", 1)]}
    context = scoring.keyword_context(hits, neighbours, 0.5, params).raw
    half = 0.5 / (1 + math.exp(-0.7 * (12.0 - 5.0)))
    assert scoring.normalize_bm25(context["answer"], params) == pytest.approx(half)
    assert context["answer"] < 6.0  # half the raw score would squash to 0.5, not ~0.5 of 0.993
    # half of a hit that adds only the sigmoid's floor is below any keyword hit: nothing
    assert "beside" not in context and context["question"] == 12.0


def test_a_question_keeps_its_share_and_passes_on_the_whole() -> None:
    params = scoring.bm25_params(2)
    hits = {"question": 12.0, "statement": 12.0, "reply to the reply": 3.0}
    neighbours = {"question": [("answer", 1)], "reply to the reply": [("question", 1)]}
    scored = scoring.keyword_context(hits, neighbours, 0.5, params, {"question"}, 0.5)
    context = scored.raw
    assert scored.source == {
        "question": "question", "statement": "own", "reply to the reply": "own", "answer": "beside"
    }
    half = scoring.normalize_bm25(12.0, params) / 2
    assert scoring.normalize_bm25(context["question"], params) == pytest.approx(half)
    assert context["answer"] == pytest.approx(context["question"])  # half of the question's whole score
    assert context["statement"] == 12.0 and context["reply to the reply"] == 3.0
    unchanged = scoring.keyword_context(hits, neighbours, 0.5, params, {"question"}, 1.0)
    assert unchanged.raw["question"] == 12.0 and unchanged.source["question"] == "own"
    # a neighbour's share is kept when it is more than the question's own
    beside = scoring.keyword_context({"question": 1.0, "before": 12.0}, {"before": [("question", 1)]}, 0.5, None,
                                     {"question"}, 0.5)
    assert beside.raw["question"] == 6.0 and beside.source["question"] == "beside"


@given(score=st.floats(0.0, 1.0), terms=st.integers(0, 20))
def test_bm25_raw_for_inverts_the_sigmoid_above_its_floor(score: float, terms: int) -> None:
    params = scoring.bm25_params(terms)
    raw = scoring.bm25_raw_for(score, params)
    if score <= scoring.normalize_bm25(0.0, params):
        assert raw == 0.0  # what no raw score ≥ 0 squashes to is no keyword hit
    elif score < 1.0:
        assert raw > 0.0 and scoring.normalize_bm25(raw, params) == pytest.approx(score, abs=1e-9)
    else:
        assert raw == math.inf


@given(
    hits=st.dictionaries(st.integers(0, 20), st.floats(0.0, 1e6), max_size=10),
    weight=st.floats(0.0, 1.0),
    share=st.sampled_from([None, 1, 8, 20]),
    questions=st.sets(st.integers(0, 20)),
    question_share=st.floats(0.0, 1.0),
)
@example(hits={0: 2.0}, weight=1.0, share=1, questions=set(), question_share=1.0)  # round trip gave 2.0000000000000004
def test_keyword_context_lowers_no_score_but_a_questions_nor_exceeds_the_best(
    hits: dict[int, float], weight: float, share: int | None, questions: set[int], question_share: float
) -> None:
    neighbours = {key: [(key - 1, 1), (key + 1, 1), (key - 2, 2), (key + 2, 2)] for key in hits}
    params = None if share is None else scoring.bm25_params(share)
    scored = scoring.keyword_context(hits, neighbours, weight, params, questions, question_share)
    context = scored.raw
    assert scored.source.keys() == context.keys()
    assert all(scored.source[key] == "own" for key, raw in hits.items() if context[key] == raw and key not in questions)
    assert all(context[key] >= raw for key, raw in hits.items() if key not in questions or question_share == 1)
    assert all(context.get(key, 0.0) >= 0.0 for key in hits)
    assert all(value <= max(hits.values()) for value in context.values())
    assert set(context) <= set(hits) | {key + step for key in hits for step in (-2, -1, 1, 2)}


@given(
    similarities=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=30),
    bm25=st.dictionaries(st.integers(0, 29), st.floats(0.0, 30.0), max_size=30),
    boosts=st.dictionaries(st.integers(0, 29), st.floats(0.0, 0.5), max_size=30),
    pool_size=st.integers(1, 29),
    top_k=st.integers(1, 10),
    threshold=st.floats(0.0, 0.5),
)
def test_skipping_what_cannot_reach_top_k_keeps_the_ranking(
    similarities: list[float], bm25: dict, boosts: dict, pool_size: int, top_k: int, threshold: float
) -> None:
    """Reading only the outside memories ``could_reach_top_k`` keeps ranks exactly as
    reading all of them: the pool is the nearest memories, so the rest are at most its farthest."""
    order = sorted(range(len(similarities)), key=lambda key: -similarities[key])
    pool = {key: similarities[key] for key in order[:pool_size]}
    outside = order[pool_size:]
    ceiling = min(pool.values())
    params = bm25_params(3)
    kept = scoring.could_reach_top_k(pool, outside, ceiling, bm25, params, boosts, threshold, top_k, entity_active=True)
    everything = {key: similarities[key] for key in order}
    pruned = {key: similarities[key] for key in order if key in pool or key in kept}
    full = fuse(everything, bm25, params, boosts, threshold, top_k, entity_active=True)
    fast = fuse(pruned, bm25, params, boosts, threshold, top_k, entity_active=True)
    assert [item[1].final_score for item in fast.ranked] == [item[1].final_score for item in full.ranked]
