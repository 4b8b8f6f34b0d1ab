"""Saying nothing when nothing is relevant (``store/ranking/relevance.py``): a store of everyday facts,
questions it answers (one word, names, loose phrasings) and questions it does not, on both
backends with the real models; the decision in ``explain``; Mem0's ranking, a caller's
threshold and the switch left alone; the arithmetic itself."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from click.testing import CliRunner

from bench.everyday import ANSWERABLE, FACTS, UNRELATED
from store import Config, Engine
from store.ranking.relevance import KNOWN_NAME_SIMILARITY, judge


@pytest.fixture
def everyday(engine: Engine) -> Engine:
    for fact in FACTS:
        engine.add(fact, user_id="ana")
    return engine


@pytest.mark.parametrize("query", list(ANSWERABLE))
def test_every_answerable_question_gets_its_memory(everyday: Engine, query: str) -> None:
    hits = everyday.search(query, user_id="ana", top_k=3)
    assert ANSWERABLE[query] in [hit.memory.text for hit in hits], [hit.memory.text for hit in hits]


ANSWERED_BY_A_SHARED_WORD = {
    "Where did I park at the airport?": "the parked car and the park of a Saturday run share a keyword",
    "my cat's vet": "a store of twelve facts, the best 0.24 similar: likely enough to the model",
}
"""Unrelated questions the default still answers (a known weakness of the learned decision, kept
visible: strict, so a fix shows)."""


@pytest.mark.parametrize("query", [
    pytest.param(query, marks=pytest.mark.xfail(strict=True, reason=ANSWERED_BY_A_SHARED_WORD[query]))
    if query in ANSWERED_BY_A_SHARED_WORD else query
    for query in UNRELATED
])
def test_an_unrelated_question_gets_nothing(everyday: Engine, query: str) -> None:
    assert everyday.search(query, user_id="ana") == []


def test_a_store_of_three_memories_answers_and_abstains(engine: Engine) -> None:
    for fact in FACTS[:3]:
        engine.add(fact, user_id="bob")
    assert engine.search("penicillin", user_id="bob")[0].memory.text == FACTS[0]
    assert engine.search("Atlas", user_id="bob")[0].memory.text == FACTS[1]
    assert engine.search("mortgage rate", user_id="bob") == []
    assert engine.search("What is John's job?", user_id="bob") == []


def test_a_known_name_answers_even_from_a_long_memory_far_in_meaning(engine: Engine) -> None:
    long = ("My wife Ines is a pediatrician at the children's hospital in Porto and works night shifts twice a "
            "week, so she sleeps until noon on Tuesdays and Fridays")
    engine.add(long, user_id="cleo")
    engine.add("Bob repairs old bicycles", user_id="cleo")
    explanation = engine.explain("Where does Ines work?", user_id="cleo")
    assert explanation.relevance is not None and explanation.relevance.best_similarity < 0.3  # far in meaning
    assert [hit.memory.text for hit in explanation.hits][:1] == [long]
    assert engine.search("Where does Marco work?", user_id="cleo") == []  # a stranger


def test_explain_shows_the_decision_and_what_it_withheld(everyday: Engine) -> None:
    kept = everyday.explain("What is John's job?", user_id="ana", top_k=5, threshold=None)
    decision = kept.relevance
    assert decision is not None and not decision.answerable and decision.unknown_names
    assert kept.hits == [] and kept.withheld  # the closest memories are still shown, with their scores
    assert all(hit.details is not None for hit in kept.withheld)
    assert set(decision.names) == {"john"} and decision.names["john"] < KNOWN_NAME_SIMILARITY
    bar = everyday.config.search.min_score
    assert decision.best_score is not None and decision.best_score < decision.bar == bar
    found = everyday.explain("Where does Ana work?", user_id="ana", top_k=5)
    assert found.relevance is not None and found.relevance.answerable and found.relevance.best_score >= bar
    assert found.relevance.names == {"ana": 1.0} and found.relevance.known_name
    assert found.hits[0].memory.text == ANSWERABLE["Where does Ana work?"]
    assert all(hit.score >= bar for hit in found.hits) and all(hit.score < bar for hit in found.withheld)


def with_search(engine: Engine, **search: object) -> Engine:
    config = engine.config.replace("search", **search)
    return Engine(config, embedder=engine.embedder, nlp=engine.nlp)


def test_mem0_ranking_a_callers_threshold_and_the_switch_keep_the_top_k(everyday: Engine) -> None:
    """``ranking = "mem0"`` is Mem0 exactly: its gate, nothing more. A threshold the caller passes
    is its bar. ``relevance_check = false`` turns the decision off."""
    query = "What is John's job?"  # past Mem0's gate (0.1), and about a stranger
    assert everyday.search(query, user_id="ana") == []
    assert everyday.explain(query, user_id="ana", threshold=0.05).relevance is None
    assert len(everyday.search(query, user_id="ana", threshold=0.05, top_k=3)) == 3
    for search in ({"ranking": "mem0"}, {"relevance_check": False}):
        with with_search(everyday, **search) as other:
            explanation = other.explain(query, user_id="ana", top_k=2, threshold=None)
            assert explanation.relevance is None and explanation.withheld == []
            assert [hit.memory.text for hit in explanation.hits] == [
                hit.memory.text for hit in other.search(query, user_id="ana", top_k=2)]
            assert len(explanation.hits) == 2


def test_the_floors_are_settings(everyday: Engine) -> None:
    assert everyday.search("Tokyo trip", user_id="ana") == []
    with with_search(everyday, min_score=0.0, min_similarity=0.0, relevance_floor_unknown_names=0.0) as lenient:
        assert lenient.search("Tokyo trip", user_id="ana") != []
    with with_search(everyday, min_score=0.99) as strict:
        assert strict.search("what car do I drive", user_id="ana") == []
    with with_search(everyday, ranking="trimem", relevance_floor=0.9) as strict:  # the hand-set rule's floor
        assert strict.search("what car do I drive", user_id="ana") == []


def test_the_command_line_says_nothing_is_relevant_and_exits_0(
    everyday: Engine, db_arg: str, monkeypatch: pytest.MonkeyPatch, engine_factory: Callable[[Config], Engine]
) -> None:
    from mcp_server.cli import cli

    monkeypatch.setattr("store.engine.Engine", engine_factory)
    run = CliRunner().invoke
    said = run(cli, ["--db", db_arg, "search", "--user-id", "ana", "mortgage rate", "--format", "table"])
    assert said.exit_code == 0, said.output
    assert said.output.startswith("No stored memory is relevant to this query.")
    assert run(cli, ["--db", db_arg, "search", "--user-id", "ana", "mortgage rate", "--format", "json"]).output == (
        '{\n  "results": []\n}\n')
    explained = run(cli, ["--db", db_arg, "search", "--explain", "--user-id", "ana", "What is John's job?",
                          "--format", "table"])
    words = " ".join(explained.output.split())  # as read, whatever the lines were wrapped to
    assert explained.exit_code == 0 and "relevance: nothing relevant (best score" in words
    assert "no name it mentions is known here); names: john" in words
    assert "these are the memories it would have returned" in words


# --- the arithmetic ----------------------------------------------------------------------


def test_the_bar_rises_only_when_every_name_is_unknown_in_a_query_of_more_than_one_word() -> None:
    assert judge(0.35, {}, 4, 0.3, 0.5).answerable
    assert not judge(0.29, {}, 4, 0.3, 0.5).answerable
    unknown = judge(0.45, {"john": 0.33}, 3, 0.3, 0.5)
    assert not unknown.answerable and unknown.bar == 0.5 and unknown.unknown_names
    assert judge(0.45, {"john": 0.33, "ana": 1.0}, 4, 0.3, 0.5).answerable  # one known name is enough
    known = judge(0.12, {"ines": KNOWN_NAME_SIMILARITY}, 3, 0.3, 0.5)  # a known name: about something stored
    assert known.answerable and known.known_name and known.bar == 0.0 and not known.unknown_names
    assert judge(0.05, {"ines": 1.0}, 1, 0.3, 0.5).answerable  # at any length
    assert judge(0.35, {"diet": 0.36}, 1, 0.3, 0.5).answerable  # one word: meaning alone
    assert not judge(None, {}, 2, 0.0, 0.0).answerable  # an empty scope has no answer
    assert judge(0.2, {"john": 0.1}, 3, 0.6, 0.1).bar == 0.6  # the unknown-names floor never lowers the bar


def test_a_decision_is_a_plain_record() -> None:
    decision = judge(0.42, {"ana": 1.0}, 3, 0.3, 0.5)
    assert dataclasses.asdict(decision) == {"answerable": True, "best_similarity": 0.42, "bar": 0.0,
                                            "names": {"ana": 1.0}, "known_name": True, "unknown_names": False,
                                            "best_score": None}
