"""Standing preferences (``store/ranking/standing.py``) and names the scope's words know
(``Snapshot.words_written``), on both backends with the real models: a request brings the
preference it bears on without sharing a word with it, a question about something else brings
none, marks come from the caller or the text, and a word one user wrote never makes another
user's query known."""

from __future__ import annotations

import dataclasses

import pytest

from store import Engine
from store.ranking import retrieval, standing

PREFERENCES = [
    "I have been vegan since 2019",
    "I injured my left knee skiing last winter and avoid jumping exercises",
    "I prefer early returns over nested if blocks in code reviews",
]
FACTS = ["The staging server is called orion", "My manager is Priya Raman"]


@pytest.fixture
def new_user(engine: Engine) -> Engine:
    for text in PREFERENCES + FACTS:
        engine.add(text, user_id="u")
    return engine


@pytest.mark.parametrize(("request_text", "preference"), [
    ("suggest a dinner recipe for me", PREFERENCES[0]),
    ("plan a workout for this week", PREFERENCES[1]),
    ("review this function for style", PREFERENCES[2]),
])
def test_a_request_brings_the_preference_it_bears_on(new_user: Engine, request_text: str, preference: str) -> None:
    hits = new_user.search(request_text, user_id="u")
    assert [hit.memory.text for hit in hits][:1] == [preference]
    assert hits[0].standing or hits[0].score >= new_user.config.search.min_score


@pytest.mark.parametrize("question", ["what is the capital of Australia?", "explain how TCP handshakes work"])
def test_a_question_about_something_else_brings_none(new_user: Engine, question: str) -> None:
    assert new_user.search(question, user_id="u") == []


def test_a_preference_stays_in_its_scope(new_user: Engine) -> None:
    assert new_user.search("suggest a dinner recipe for me", user_id="someone_else") == []


def test_mem0_ranking_and_a_callers_threshold_bring_no_standing_memory(new_user: Engine) -> None:
    assert not any(hit.standing for hit in new_user.search("suggest a dinner recipe for me", user_id="u",
                                                           threshold=0.0))
    mem0 = dataclasses.replace(new_user.config.search, ranking="mem0")
    with Engine(dataclasses.replace(new_user.config, search=mem0), embedder=new_user.embedder,
                nlp=new_user.nlp) as engine:
        assert not any(hit.standing for hit in engine.search("suggest a dinner recipe for me", user_id="u"))


def test_the_mark_comes_from_the_caller_or_the_text(engine: Engine) -> None:
    def marked(text: str, **options: object) -> bool:
        return (engine.add(text, user_id="m", **options)[0].memory.metadata or {}).get(standing.KEY) is True

    assert marked("I have been vegan since 2019")
    assert not marked("Ines is allergic to penicillin")  # a fact about Ines, not the writer's own
    assert marked("Ines is allergic to penicillin too", standing=True)
    assert not marked("I use Neovim as my editor", standing=False)
    assert not marked("I use Emacs at home", metadata={"standing": "no"})  # the caller's own key is kept
    messages = [{"role": "user", "content": "I always cycle to work"}]
    assert standing.KEY not in (engine.add(messages, user_id="m")[0].memory.metadata or {})  # a conversation: only when asked


def test_a_name_is_known_by_the_words_of_the_scope(engine: Engine) -> None:
    engine.add("my sister ana is a nurse on the night shift", user_id="a")  # no entity: all lower case
    engine.add("Production uses PostgreSQL 16 on a managed cluster", user_id="a")
    engine.add("The weather was fine", user_id="b")
    names = engine.explain("Does Ana work at night?", user_id="a").relevance.names
    assert names == {"ana": 1.0}
    assert engine.explain("which Postgres version runs in production?", user_id="a").relevance.names == {"postgres": 1.0}
    # another user's words never make a name known here
    assert engine.explain("Does Ana work at night?", user_id="b").relevance.names["ana"] < 1.0


def test_a_name_is_known_by_its_short_form_either_way(engine: Engine) -> None:
    engine.add("My sister Mel loves painting", user_id="a")
    engine.add("Melanie Brooks runs the bakery on Elm Street", user_id="b")
    asked = engine.explain("What does Melanie paint?", user_id="a")
    assert asked.relevance.names == {"melanie": 1.0}
    assert [hit.memory.text for hit in asked.hits] == ["My sister Mel loves painting"]
    assert engine.explain("Does Mel bake?", user_id="b").relevance.names == {"mel": 1.0}
    # a place that starts like the name is no short form of it: "Mel" is a third of "Melbourne"
    melbourne = engine.explain("What does Melbourne look like?", user_id="a")
    assert melbourne.relevance.names["melbourne"] < 1.0 and not melbourne.hits


def test_short_forms() -> None:
    assert retrieval.short_form("tim", "tim cook") is False  # the same name, not a short form
    assert retrieval.short_form("timothy", "tim")
    assert retrieval.short_form("sam", "samantha")
    assert not retrieval.short_form("al", "alan")  # two letters say too little
    assert not retrieval.short_form("max", "maximilian")
    assert not retrieval.short_form("mel", "camel")  # a start, not an inside
    assert not retrieval.short_form("new york", "new")  # one-word names only


def test_the_words_of_a_narrower_scope_only(engine: Engine) -> None:
    engine.add("my sister ana is a nurse", user_id="a", run_id="r1")
    assert engine.explain("Does Ana work at night?", user_id="a", run_id="r1").relevance.names == {"ana": 1.0}
    assert engine.explain("Does Ana work at night?", user_id="a", run_id="r2").relevance.names.get("ana", 0) < 1.0


def test_reads_as_standing() -> None:
    assert standing.reads_as_standing("I use Neovim as my editor")
    assert standing.reads_as_standing("We are vegetarian except for fish")
    assert not standing.reads_as_standing("The office door code is 8820")
    assert not standing.reads_as_standing("Ana always takes the night shift")
