"""Learned fusion (``ranking = "learned"``, ``store.ranking.learned``): the shipped weights, their
arithmetic, the features read from a query and a text, and the engine's reordering on both backends."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from store import Config, Engine, MemoryInput
from store.ranking import learned

FACTS = [
    "Ana works as a nurse at Santa Maria hospital in Lisbon",
    "Ana started the night shift last week",
    "Kenji gave Ana a bonsai from Kyoto in May 2023",
    "The team standup moved to 9:30 am on Mondays",
    "Did Ana ever go to Kyoto?",
    "Ana's brother Tomás is a chef in Porto",
]


def candidate(**values: object) -> learned.Candidate:
    base: dict[str, object] = {
        "similarity": 0.5, "keyword": 0.0, "keyword_with_context": 0.0, "bm25": 0.0,
        "neighbour_similarity": 0.0, "neighbour_keyword": 0.0, "asks": False, "time_words": False,
        "opens_with_name": False, "neighbour_opens_with_name": False, "fused_score": 0.3, "entity_boost": 0.0,
        "query": learned.Query(4, False, False, frozenset()), "scope": learned.Figures(0.5, 0.4, False, False, 50),
    }
    return learned.Candidate(**{**base, **values})  # type: ignore[arg-type]


def test_the_shipped_weights_are_for_the_features_the_engine_reads() -> None:
    weights = learned.shipped()
    assert list(weights.features) == list(learned.FEATURES)
    assert weights.mean.shape == weights.scale.shape == weights.coefficients.shape == (len(learned.FEATURES),)
    assert np.all(weights.scale > 0) and np.all(np.isfinite(weights.coefficients))


def test_a_logit_is_the_standardised_features_times_the_coefficients() -> None:
    size = len(learned.FEATURES)
    coefficients = np.zeros(size)
    coefficients[list(learned.FEATURES).index("similarity")] = 4.0
    low, high = np.full(size, -1.0), np.full(size, 2.0)
    weights = learned.Weights(tuple(learned.FEATURES), low, high, np.full(size, 0.5), np.full(size, 2.0), coefficients, -1.0)
    (logit,) = weights.logits([candidate(similarity=0.9)])
    assert logit == pytest.approx((0.9 - 0.5) / 2.0 * 4.0 - 1.0)
    # A value outside the range the model was fitted on is read at its edge: no extrapolation.
    high[list(learned.FEATURES).index("similarity")] = 0.7
    assert weights.logits([candidate(similarity=0.9)]) == pytest.approx(weights.logits([candidate(similarity=0.7)]))
    assert weights.logits([candidate(similarity=0.9)]) == pytest.approx((0.7 - 0.5) / 2.0 * 4.0 - 1.0)
    assert learned.probability(0.0) == 0.5 and learned.probability(logit) == pytest.approx(1 / (1 + np.exp(-logit)))
    assert weights.logits([]).shape == (0,)
    assert learned.probability(-1e4) == 0.0 and learned.probability(1e4) == 1.0  # no overflow far out


def test_what_the_features_read_of_a_query_and_a_text() -> None:
    ana = frozenset({"ana"})
    assert learned.Query.of("When did Ana start the night shift?", 4, ana) == learned.Query(4, True, False, ana)
    assert learned.Query.of("what year did Kenji visit?", 3, frozenset({"kenji"})).asks_when
    assert learned.Query.of("Who gave Ana a bonsai?", 3, ana) == learned.Query(3, False, True, ana)
    assert not learned.Query.of("Whenever Ana travels, what does she pack?", 4, ana).asks_when
    for timed in FACTS[1:4]:
        assert learned.places_in_time(timed), timed
    assert not learned.places_in_time(FACTS[0]) and not learned.places_in_time(FACTS[5])
    assert learned.places_in_time("SHE LEFT YESTERDAY") and learned.places_in_time("Back on MONDAY, Last Week")
    features = learned.matrix([candidate(time_words=True, query=learned.Query(2, True, False, ana))])[0]
    named = dict(zip(learned.FEATURES, features))
    assert named["time words"] == named["time words × asks when"] == 1.0 and named["query terms / 10"] == 0.2
    assert named["opens with a name asked about"] == named["a neighbour opens with it"] == 0.0
    both = dict(zip(learned.FEATURES, learned.matrix([candidate(opens_with_name=True, neighbour_opens_with_name=True)])[0]))
    assert both["opens with a name asked about"] == both["a neighbour opens with it"] == 1.0


def test_a_memory_opens_with_a_name_as_its_speaker_or_its_subject() -> None:
    names = frozenset({"ana", "santa maria hospital"})
    for text in ("Ana: I start nights on Monday", "ana started the night shift", "  Ana   took a bonsai", " " * 12 + "Ana took one",
                 "Ana's brother is a chef", "Santa  Maria Hospital: visiting hours changed", "Ana"):
        assert learned.opens_with_name(text, names), text
    for text in ("Anabel started the night shift", "Kenji gave Ana a bonsai", "Santa Maria is a name", ""):
        assert not learned.opens_with_name(text, names), text
    assert not learned.opens_with_name("Ana: hello", frozenset())


def test_a_learned_score_names_its_strongest_features_and_adds_up() -> None:
    size = len(learned.FEATURES)
    coefficients = np.linspace(-1.0, 1.0, size)
    weights = learned.Weights(tuple(learned.FEATURES), np.full(size, 0.0), np.full(size, 0.8), np.full(size, 0.2),
                              np.full(size, 0.5), coefficients, -0.7)
    candidates = [candidate(similarity=0.3), candidate(similarity=0.75, time_words=True, asks=True)]
    ranked = weights.rank(candidates, 5)
    assert [i for i, _ in ranked] == list(np.argsort(-weights.logits(candidates), kind="stable"))
    for i, score in ranked:
        assert score.logit == pytest.approx(weights.logits([candidates[i]])[0])
        assert score.probability == learned.probability(score.logit)
        assert score.logit == pytest.approx(score.intercept + sum(p.pull for p in score.strongest) + score.others)
        assert len(score.strongest) == learned.SHOWN_PULLS
        sizes = [abs(p.pull) for p in score.strongest]
        everything = np.abs(weights.pulls(weights.read([candidates[i]]))[0])
        assert sizes == sorted(sizes, reverse=True) and sizes[-1] >= np.sort(everything)[-learned.SHOWN_PULLS - 1]
        named = dict(zip(learned.FEATURES, np.clip(learned.matrix([candidates[i]])[0], 0.0, 0.8)))
        assert all(p.value == named[p.feature] for p in score.strongest)  # as the model read it
    assert weights.rank(candidates, 1) == ranked[:1] and weights.rank([], 3) == []


def test_learned_ranking_reorders_the_hand_set_fusions_candidates(
    config: Config, engine_factory: Callable[[Config], Engine]
) -> None:
    hand_set = config.replace("search", ranking="trimem")
    with engine_factory(hand_set) as engine:
        engine.add_many([MemoryInput(text) for text in FACTS], user_id="ana")
    query = "When did Ana start the night shift?"
    with engine_factory(config.replace("search", ranking="learned")) as engine:
        hits = engine.search(query, user_id="ana", top_k=4, threshold=0)
        explained = engine.explain(query, user_id="ana", top_k=4, threshold=0)
        wide = engine.search(query, user_id="ana", top_k=20, threshold=0)
    with engine_factory(hand_set) as engine:
        fused = engine.explain(query, user_id="ana", top_k=20, threshold=0)
    assert len(hits) == 4 and [hit.memory.id for hit in hits] == [hit.memory.id for hit in wide[:4]]
    scores = [hit.score for hit in wide]
    assert scores == sorted(scores, reverse=True) and all(0 < score < 1 for score in scores)
    assert {hit.memory.id for hit in wide} == {hit.memory.id for hit in fused.hits}  # the same candidates, reordered
    assert hits[0].memory.text == FACTS[1]
    assert [hit.memory.id for hit in explained.hits] == [hit.memory.id for hit in hits]
    parts = {hit.memory.id: hit.details for hit in fused.hits}
    for hit, shown in zip(explained.hits, hits):
        assert hit.learned is not None and hit.learned.score == hit.learned.probability == hit.score == shown.score
        assert not hit.learned.restates
        assert hit.details == parts[hit.memory.id]  # the fusion's parts, as the hand-set ranking explains them
        assert hit.learned.logit == pytest.approx(
            hit.learned.intercept + sum(p.pull for p in hit.learned.strongest) + hit.learned.others)
    assert all(hit.learned is None for hit in hits + fused.hits)


def test_a_memory_the_query_repeats_comes_first_whatever_the_model_says() -> None:
    size = len(learned.FEATURES)
    coefficients = np.zeros(size)
    coefficients[list(learned.FEATURES).index("best neighbour's similarity")] = 2.0
    high = np.full(size, 1.0)
    high[list(learned.FEATURES).index("similarity")] = 0.8
    weights = learned.Weights(tuple(learned.FEATURES), np.zeros(size), high, np.full(size, 0.5), np.full(size, 0.25),
                              coefficients, 0.0)
    candidates = [  # in the hand-set fusion's order
        candidate(similarity=0.99, neighbour_similarity=0.2),  # the query repeats it; its neighbours differ
        candidate(similarity=0.97, neighbour_similarity=0.97),  # a near copy beside another copy
        candidate(similarity=0.7, neighbour_similarity=0.9),
        candidate(similarity=0.6, neighbour_similarity=0.1),
    ]
    assert [weights.restates(c) for c in candidates] == [True, True, False, False]
    assert list(np.argsort(-weights.logits(candidates), kind="stable")) == [1, 2, 0, 3]  # the model alone
    ranked = weights.rank(candidates, 4)
    assert [i for i, _ in ranked] == [0, 1, 2, 3]
    scores = [score.score for _, score in ranked]
    assert scores == sorted(scores, reverse=True)
    assert [score.restates for _, score in ranked] == [True, True, False, False]
    for i, score in ranked:
        assert score.probability == learned.probability(score.logit)
        assert score.score == max(s.probability for _, s in ranked[[j for j, _ in ranked].index(i):])
    assert ranked[0][1].score == ranked[1][1].score > ranked[0][1].probability  # raised to the copy's after it
    assert weights.rank(candidates, 2) == ranked[:2]


def test_searching_a_memorys_own_words_finds_it_first_among_near_copies(
    config: Config, engine_factory: Callable[[Config], Engine]
) -> None:
    # Near copies stored one after another, as writers adding at once to one scope interleave them,
    # and the one searched for stored between unlike memories: each copy's neighbour is a copy.
    note = "prefers quiet mornings and strong tea, note writer-{} 68"
    texts = ["Lena told Omar about the garden in Porto, note writer-1 67", note.format(1),
             "Omar told Lena about the bike in Lyon, note writer-1 69", *(note.format(n) for n in (0, 2, 3, 4))]
    with engine_factory(config) as engine:
        engine.add_many([MemoryInput(text) for text in texts], user_id="shared")
        for wanted in (note.format(n) for n in range(5)):
            [first, *_] = engine.explain(wanted, user_id="shared", top_k=3).hits
            assert first.memory.text == wanted and first.learned is not None and first.learned.restates
