"""Hybrid retrieval on real data: what each signal adds, filters, and hostile queries."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

import numpy as np
import pytest

from store import Engine, InvalidArgument, MemoryInput, clock
from store.ranking import retrieval
from store.scope import Scope

HOSTILE_QUERIES = [
    '"',
    '""quoted""',
    "*",
    "prefix*",
    "-",
    "- negated -term",
    ":",
    "text_lemmatized: column filter",
    "(",
    "unbalanced (paren",
    "NEAR(",
    "NEAR(a b, 2)",
    "AND",
    "OR",
    "NOT",
    "cats AND dogs OR NOT fish",
    "state-of-the-art",
    "^caret {braces} [brackets] +plus",
    "'; DROP TABLE memories; --",
    "😀🎉",
    "我喜欢喝茶",
    "مرحبا بالعالم",
    "e\u0301\u0301 combining",
    "nul\x00byte",
]


@pytest.fixture
def garden(engine: Engine) -> Engine:
    engine.add_many(
        [
            MemoryInput("Ana grows tomatoes and basil on her balcony", {"topic": "garden", "priority": 3}),
            MemoryInput("Ana's tomato plants caught blight last August", {"topic": "garden", "priority": 5}),
            MemoryInput("Ana prefers oat milk in her coffee", {"topic": "food", "priority": 1, "tags": ["diet"]}),
            MemoryInput("Ana is learning Portuguese for a move to Lisbon", {"topic": "travel", "priority": 4}),
        ],
        user_id="ana",
    )
    return engine


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
def test_query_syntax_is_never_an_sql_error(garden: Engine, query: str) -> None:
    hits = garden.search(query, user_id="ana", threshold=0.0)
    assert all(hit.memory.user_id == "ana" for hit in hits)
    explained = garden.explain(query, user_id="ana", threshold=0.0)
    assert all(term.isalnum() for term in explained.analysis.lemmatized_terms)


def test_blank_query_is_refused(garden: Engine) -> None:
    with pytest.raises(InvalidArgument, match="^query is empty; send what to recall, in words$"):
        garden.search("  ", user_id="ana")


@pytest.mark.parametrize(("top_k", "threshold"), [(0, 0.1), (101, 0.1), (5, -0.1), (5, 1.5), (True, 0.1), (5, "x")])
def test_out_of_range_arguments_are_refused(garden: Engine, top_k, threshold) -> None:
    with pytest.raises(InvalidArgument):
        garden.search("tomatoes", user_id="ana", top_k=top_k, threshold=threshold)


def test_explain_shows_every_part_of_every_score(garden: Engine) -> None:
    explained = garden.explain("tomato blight", user_id="ana", top_k=3)
    analysis = explained.analysis
    assert analysis.lemmatized_terms == ["tomato", "blight"] and analysis.term_count == 2
    assert (analysis.bm25_midpoint, analysis.bm25_steepness) == (5.0, 0.7)
    assert "bm25" in analysis.signals_active
    top = explained.hits[0]
    assert top.memory.text == "Ana's tomato plants caught blight last August"
    d = top.details
    assert d.raw_score == pytest.approx(d.semantic_score + d.bm25_score + d.entity_boost)
    assert d.final_score == pytest.approx(min(d.raw_score / d.max_possible_score, 1.0))
    assert d.max_possible_score == analysis.max_possible_score
    assert d.bm25_raw > 0 and 0 < d.bm25_score < 1
    # The default ranking's score is learned fusion's probability, made of the parts above and more.
    assert top.learned is not None and top.score == top.learned.score == top.learned.probability
    assert top.learned.logit == pytest.approx(
        top.learned.intercept + sum(p.pull for p in top.learned.strongest) + top.learned.others)
    with Engine(garden.config.replace("search", ranking="trimem"), embedder=garden.embedder, nlp=garden.nlp) as fused:
        [alone] = fused.explain("tomato blight", user_id="ana", top_k=1).hits
    assert alone.memory == top.memory and alone.details == d and alone.score == d.final_score and alone.learned is None


def test_high_threshold_drops_everything_and_says_why(garden: Engine) -> None:
    explained = garden.explain("tomato blight", user_id="ana", threshold=0.99)
    assert explained.hits == []
    assert {d.reason for d in explained.dropped} == {"below_threshold"}
    assert len(explained.dropped) == 4


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"topic": "garden"}, {"tomatoes", "blight"}),
        ({"priority": {"gte": 4}}, {"blight", "Portuguese"}),
        ({"priority": {"lt": 3}}, {"oat"}),
        ({"topic": {"in": ["food", "travel"]}}, {"oat", "Portuguese"}),
        ({"topic": {"nin": ["food", "travel"]}}, {"tomatoes", "blight"}),
        ({"topic": {"ne": "garden"}}, {"oat", "Portuguese"}),
        ({"tags": {"contains": "diet"}}, {"oat"}),
        ({"topic": {"icontains": "GARD"}}, {"tomatoes", "blight"}),
        ({"tags": "*"}, {"oat"}),
        ({"OR": [{"topic": "food"}, {"priority": {"eq": 5}}]}, {"oat", "blight"}),
        ({"AND": [{"topic": "garden"}, {"NOT": [{"priority": 5}]}]}, {"tomatoes"}),
    ],
)
def test_filters_apply_to_search_and_list(garden: Engine, filters, expected) -> None:
    def keys(texts):
        return {word for text in texts for word in expected if word in text}

    listed = [m.text for m in garden.list(user_id="ana", filters=filters)]
    assert keys(listed) == expected and len(listed) == len(expected)
    found = [h.memory.text for h in garden.search("tomato blight oat milk Lisbon", user_id="ana", filters=filters, threshold=0)]
    assert keys(found) == expected and len(found) == len(expected)


def test_no_signal_can_surface_a_filtered_out_memory(garden: Engine) -> None:
    explained = garden.explain("tomato blight Lisbon", user_id="ana", filters={"topic": "food"}, threshold=0)
    assert [h.memory.text for h in explained.hits] == ["Ana prefers oat milk in her coffee"]
    assert explained.analysis.filters_applied
    filtered = {d.text for d in explained.dropped if d.reason == "filtered"}
    assert len(filtered) == 3 and "Ana prefers oat milk in her coffee" not in filtered


def test_malformed_filters_are_refused(garden: Engine) -> None:
    with pytest.raises(InvalidArgument):
        garden.search("tomatoes", user_id="ana", filters={"priority": {"between": [1, 2]}})
    with pytest.raises(InvalidArgument):
        garden.list(user_id="ana", filters={"user_id": "bob"})


def test_an_entity_in_the_query_lifts_the_memory_linked_to_it(engine: Engine) -> None:
    engine.add_many(
        [
            MemoryInput("Ana had a long call with Priya about the budget"),
            MemoryInput("Ana had a long call with the bank about the budget"),
            MemoryInput("Ana had a long call with her landlord about the rent"),
        ],
        user_id="ana",
    )
    with_entities = engine.explain("What did Priya talk about?", user_id="ana", threshold=engine.config.search.threshold)
    assert "priya" in with_entities.analysis.entities and "entity" in with_entities.analysis.signals_active
    top = with_entities.hits[0]
    assert top.memory.text == "Ana had a long call with Priya about the budget"
    assert top.entity_match.entity == "Priya" and top.details.entity_boost == pytest.approx(0.5)
    others = [h.details.entity_boost for h in with_entities.hits[1:]]
    assert others and max(others) < top.details.entity_boost


def test_a_common_entity_boosts_less_than_a_rare_one(engine: Engine) -> None:
    common = [MemoryInput(f"Meeting {i} with Google about the contract renewal") for i in range(40)]
    engine.add_many([*common, MemoryInput("Lunch with Netflix about the contract renewal")], user_id="ana")
    with Engine(engine.config.replace("search", ranking="mem0"), embedder=engine.embedder, nlp=engine.nlp) as mem0:
        google = mem0.explain("What did Google say about the contract?", user_id="ana", top_k=1).hits[0]
        netflix = mem0.explain("What did Netflix say about the contract?", user_id="ana", top_k=1).hits[0]
    assert google.entity_match.linked_memories == 40 and netflix.entity_match.linked_memories == 1
    assert google.details.entity_boost == pytest.approx(0.5 / (1 + 0.001 * 39**2), rel=0.02)
    assert netflix.details.entity_boost == pytest.approx(0.5, rel=0.02)


def test_signal_switches_turn_signals_off(garden: Engine) -> None:
    semantic_only = Engine(
        garden.config.replace("search", use_bm25=False, use_entities=False, ranking="trimem"),
        embedder=garden.embedder, nlp=garden.nlp,
    )
    with semantic_only:
        explained = semantic_only.explain("Ana tomato blight in Lisbon", user_id="ana")
    assert explained.analysis.signals_active == ["semantic"]
    assert explained.analysis.max_possible_score == 1.0
    assert all(h.details.bm25_score == 0 and h.details.entity_boost == 0 for h in explained.hits)
    assert all(h.score == h.details.semantic_score for h in explained.hits)


def test_union_pool_scores_keyword_hits_outside_the_overfetch(engine: Engine) -> None:
    """With a one-row over-fetch the vector search sees only its nearest memory; the union
    pool adds the keyword hit as a candidate, with its exact similarity."""
    engine.add_many(
        [
            MemoryInput("Ana buys groceries every Saturday morning"),
            MemoryInput("Ana's grocery list has milk, eggs and bread"),
            MemoryInput("Invoice ZX81 was paid late"),
        ],
        user_id="ana",
    )
    tight = dataclasses.replace(engine.config.search, overfetch_factor=1, overfetch_minimum=1)
    prepared = retrieval.prepare(
        "weekly groceries ZX81", engine.nlp, engine.embedder, engine._names, tight, engine._side
    )
    with engine.backend.snapshot() as view:
        rows = view.memories_by_rowid(view.scope_rowids(Scope("ana")), Scope("ana"))
    (invoice,) = [rowid for rowid, row in rows.items() if row.text.startswith("Invoice")]
    pools = {}
    for pool in ("semantic", "union"):
        request = retrieval.SearchRequest(
            Scope("ana"), 1, 0.0, None, False, dataclasses.replace(tight, candidate_pool=pool)
        )
        with engine.backend.snapshot() as view:
            pools[pool] = retrieval.gather_signals(view, prepared, request)
    assert invoice in pools["semantic"].bm25_raw and invoice not in pools["semantic"].distances
    exact = engine.embedder.embed_batch(["Invoice ZX81 was paid late"])[0] @ prepared.embedding
    assert 1 - pools["union"].distances[invoice] == pytest.approx(float(exact), abs=1e-4)


ORDER_MEMORIES = [
    "I asked support what my order number was for the last purchase",
    "The order number is printed on the receipt next to the date",
    "Order numbers are emailed within an hour of checkout",
    "I lost the confirmation email that had my order details",
    "Package A1B2 with the standing desk arrives on Friday",
    "My previous order was a set of kitchen knives",
]
OTHER_MEMORIES = [
    "I enjoy hiking in the mountains on weekends", "My sister lives in Lisbon", "I am allergic to peanuts",
    "My favourite colour is green", "I work as a nurse at the city hospital", "I have two cats named Miso and Tofu",
    "I am learning to play the cello", "I prefer tea over coffee in the morning", "My birthday is in March",
    "I drive a ten year old hatchback", "I am training for a half marathon", "I read mostly science fiction",
    "My kitchen needs a new tap", "I started a vegetable garden this spring", "I go swimming on Tuesdays",
    "My manager is called Priya", "I am saving for a trip to Japan", "I play chess online most evenings",
    "I volunteer at the food bank monthly", "My flat has a small balcony", "I dislike loud restaurants",
    "My laptop battery drains quickly", "I speak Spanish and a little German", "I bake sourdough bread on Sundays",
]


def test_an_exact_code_wins_where_meaning_alone_does_not(engine: Engine) -> None:
    """The motivating case: 'order number A1B2' should find the A1B2 memory first, though
    several memories about order numbers are semantically closer."""
    engine.add_many([MemoryInput(text) for text in ORDER_MEMORIES + OTHER_MEMORIES], user_id="ana")
    target = "Package A1B2 with the standing desk arrives on Friday"
    semantic_only = Engine(
        engine.config.replace("search", use_bm25=False, use_entities=False, ranking="mem0"), embedder=engine.embedder,
        nlp=engine.nlp,
    )
    with semantic_only:
        semantic_ranking = [h.memory.text for h in semantic_only.search("order number A1B2", user_id="ana")]
    fused = engine.explain("order number A1B2", user_id="ana")
    assert semantic_ranking[0] != target and target in semantic_ranking[:5]
    assert fused.hits[0].memory.text == target
    assert fused.analysis.entities == ["a1b2"]
    assert fused.hits[0].details.bm25_score > 0 and fused.hits[0].entity_match.entity == "A1B2"


HOSPITAL_MEMORIES = [
    "Ana works as a nurse at Santa Maria hospital in Lisbon",
    "Hospitals in Lisbon are short of nurses this winter",
    "Who works the night shift is decided by the head nurse",
    "Bob's cousin is a surgeon at a hospital in Porto",
    "Nurses at the city hospital work twelve-hour shifts",
]


def test_a_place_named_in_a_who_question_brings_its_memory_first(engine: Engine) -> None:
    """Learned fusion must not learn against what LoCoMo cannot teach: its entities are mostly its
    two speakers, so on it an entity match says little, least of all for questions asking who. A
    place named exactly still ranks its memory first, as the hand-set fusion ranks it."""
    engine.add_many([MemoryInput(text) for text in HOSPITAL_MEMORIES + OTHER_MEMORIES], user_id="ana")
    query = "Who works at Santa Maria hospital?"
    assert engine.config.search.ranking == "learned"
    [first, *_] = engine.explain(query, user_id="ana").hits
    assert first.memory.text == HOSPITAL_MEMORIES[0] and first.details.entity_boost > 0
    assert first.learned is not None and first.learned.probability > engine.config.search.min_score


def test_a_boost_outside_the_candidates_still_counts_in_the_denominator(engine: Engine) -> None:
    """Mem0 adds the entity share when any memory in scope was boosted, candidate or not;
    computing boosts for candidates only must not change that."""
    engine.add_many(
        [MemoryInput("Ana buys groceries every Saturday morning"), MemoryInput("Priya repaired the old bicycle")],
        user_id="ana",
    )
    tight = engine.config.replace("search", overfetch_factor=1, overfetch_minimum=1, use_bm25=False, ranking="mem0")
    with Engine(tight, embedder=engine.embedder, nlp=engine.nlp) as narrow:
        explained = narrow.explain("Which groceries did Priya want on Saturday morning?", user_id="ana", top_k=1)
    assert [h.memory.text for h in explained.hits] == ["Ana buys groceries every Saturday morning"]
    assert explained.hits[0].details.entity_boost == 0
    assert explained.analysis.signals_active == ["semantic", "entity"]
    assert explained.hits[0].details.max_possible_score == 1.5


CONVERSATION = [
    "Ana: How did the children take the news about the accident?",
    "Ben: They were scared at first, but we reassured them and they are fine now.",
    "Ana: Glad to hear it. I spent the weekend repainting the kitchen.",
    "Ben: Nice! We finally bought a new sofa for the living room.",
]


def test_the_default_ranking_finds_the_answer_beside_the_question(engine: Engine) -> None:
    """The answer shares no keyword with the question; under the hand-set fusion (which the default
    reorders) it earns half the keyword score of the turn it replies to, stored just before it (half of what that turn's
    keywords add to its fused score, ``keyword_context_share = "score"``). The question, which
    ends with "?", keeps half of its own (``question_keywords``), so the two weigh the same.
    ``ranking = "mem0"`` restores Mem0, where the answer gets none and the question all of its
    own, whatever the other switches say."""
    engine.add_many([MemoryInput(text) for text in CONVERSATION + OTHER_MEMORIES], user_id="ana")
    query = "How did the children handle the accident?"
    trimem = engine.explain(query, user_id="ana", top_k=5)
    assert engine.config.search.ranking == "learned" and trimem.analysis.candidate_pool == "union"
    by_text = {hit.memory.text: hit.details for hit in trimem.hits}
    question, answer = by_text[CONVERSATION[0]], by_text[CONVERSATION[1]]
    assert answer.bm25_score == pytest.approx(question.bm25_score) and answer.bm25_score > 0
    assert {hit.memory.text for hit in trimem.hits[:2]} == set(CONVERSATION[:2])
    sources = {hit.memory.text: hit.keyword_source for hit in trimem.hits}
    assert sources[CONVERSATION[0]] == "question" and sources[CONVERSATION[1]] == "beside"

    mem0_config = engine.config.replace(
        "search", ranking="mem0", candidate_pool="union", keyword_context=1.0, question_keywords=0.0
    )
    with Engine(mem0_config, embedder=engine.embedder, nlp=engine.nlp) as mem0:
        reference = mem0.explain(query, user_id="ana", top_k=5)
    assert reference.analysis.candidate_pool == "semantic"
    by_text = {hit.memory.text: hit.details for hit in reference.hits}
    assert by_text[CONVERSATION[1]].bm25_raw == 0
    assert by_text[CONVERSATION[0]].bm25_score == pytest.approx(2 * question.bm25_score)
    assert {hit.memory.text: hit.keyword_source for hit in reference.hits}[CONVERSATION[0]] == "own"


def test_a_memory_that_asks_keeps_its_share_of_its_own_keyword_score(engine: Engine) -> None:
    """Only a text ending with "?" (trailing whitespace aside) is a question; it keeps
    ``question_keywords`` of its squashed keyword score, and 1 keeps all of it."""
    asks, states = "Did Ana adopt a greyhound named Pixel? \n", "Ana adopted a greyhound named Pixel."
    engine.add_many([MemoryInput(text) for text in (asks, *OTHER_MEMORIES, states)], user_id="ana")
    query = "greyhound Pixel adoption"

    def keyword_scores(question_keywords: float) -> dict[str, float]:
        config = engine.config.replace("search", keyword_context=0.0, question_keywords=question_keywords)
        with Engine(config, embedder=engine.embedder, nlp=engine.nlp) as tuned:
            return {h.memory.text: h.details.bm25_score for h in tuned.explain(query, user_id="ana").hits}

    whole, kept, none = keyword_scores(1.0), keyword_scores(0.25), keyword_scores(0.0)
    assert kept[states] == whole[states] > 0 and none[states] == whole[states]
    assert kept[asks] == pytest.approx(0.25 * whole[asks]) and whole[asks] > 0
    assert none[asks] == 0


def test_a_turn_asks_when_its_last_character_but_trailing_space_is_a_question_mark(engine: Engine) -> None:
    """One rule on both backends (``store.sql.dialect.Dialect.asks_sql``): the last character is
    "?" once spaces, tabs and line ends after it are set aside."""
    asking = {"Where is Pixel?": True, "Where is Rex? ": True, "Where is Bo?\n": True, "Where is Tom?\t\r\n": True,
              "Pixel is at home.": False, "Is Rex out? No, he is in.": False, "Bo barks?!": False, "?\u00a0": False}
    engine.add_many([MemoryInput(text) for text in asking], user_id="ana")
    with engine.backend.snapshot() as view:
        rowids = view.scope_rowids(Scope("ana"))
        rows = view.memories_by_rowid(rowids, Scope("ana"))
        asks = view.questions_among(rowids, Scope("ana"))
    assert {rows[rowid].text: rowid in asks for rowid in rowids} == asking


def test_entity_rarity_discounts_an_entity_linked_to_most_of_the_scope(engine: Engine) -> None:
    common = [MemoryInput(f"Meeting {i} with Google about the contract renewal") for i in range(40)]
    engine.add_many([*common, MemoryInput("Lunch with Netflix about the contract renewal")], user_id="ana")
    google = engine.explain("What did Google say about the contract?", user_id="ana", top_k=1).hits[0]
    netflix = engine.explain("What did Netflix say about the contract?", user_id="ana", top_k=1).hits[0]
    rarity = math.log(41 / 40) / math.log(41)
    assert google.details.entity_boost == pytest.approx(0.5 / (1 + 0.001 * 39**2) * rarity, rel=0.02)
    assert netflix.details.entity_boost == pytest.approx(0.5, rel=0.02)


def test_a_query_entity_boosts_through_its_closest_stored_entity_only(engine: Engine) -> None:
    """"Caroline" names the person, not every longer entity that contains her name: under the
    default only the closest stored entity boosts; Mem0 (``entity_match = "all"``) boosts
    through every stored entity at least 0.5 similar."""
    greeting = "Melanie: Hey Caroline, lovely to see you at the Riverside Gallery yesterday!"
    engine.add_many(
        [MemoryInput("Caroline Diaz joined the LGBTQ support group in May."), MemoryInput(greeting)], user_id="ana"
    )
    query = "What did Caroline Diaz do in May?"
    closest = engine.explain(query, user_id="ana", top_k=2)
    with Engine(engine.config.replace("search", entity_match="all"), embedder=engine.embedder, nlp=engine.nlp) as mem0:
        every = mem0.explain(query, user_id="ana", top_k=2)
    boost = {hit.memory.text: hit.details.entity_boost for hit in closest.hits}
    boost_all = {hit.memory.text: (hit.details.entity_boost, hit.entity_match) for hit in every.hits}
    assert boost[greeting] == 0.0 < boost_all[greeting][0]
    assert boost_all[greeting][1].entity != "Caroline Diaz"
    assert boost["Caroline Diaz joined the LGBTQ support group in May."] > 0.0


LUKAS = [
    "Lukas Berger: Allergic to penicillin",
    "Lukas Berger works as a structural engineer in Graz",
    "Lukas Berger runs a half marathon every spring",
    "Lukas Berger's favourite dish is goulash",
    "Lukas Berger drives an old green Volvo",
]
BROTHER = "Tobias: Is Lukas's younger brother"


def test_a_first_name_reaches_the_full_name_of_the_person(engine: Engine) -> None:
    """"Lukas" alone stands only in the brother's line; the person's own memories are linked to
    "Lukas Berger". The query's first name reaches both, as one entity as rare as all its
    memories together, so the brother's line no longer takes the whole boost and the allergy
    answers the question. With ``entity_match = "best"`` the one-link "Lukas" wins."""
    engine.add_many([MemoryInput(text) for text in (*LUKAS, BROTHER, *OTHER_MEMORIES)], user_id="ana")
    query = "What medicine must Lukas avoid?"
    names = engine.explain(query, user_id="ana", top_k=10, threshold=0.0)
    assert names.hits[0].memory.text == LUKAS[0]
    boost = {hit.memory.text: hit.details.entity_boost for hit in names.hits}
    assert boost[BROTHER] > 0 and boost[LUKAS[0]] == pytest.approx(boost[BROTHER])
    assert names.hits[0].entity_match.entity == "Lukas Berger" and names.hits[0].entity_match.linked_memories == 6

    hand_set = engine.config.replace("search", entity_match="best", ranking="trimem")
    with Engine(hand_set, embedder=engine.embedder, nlp=engine.nlp) as best:
        closest = best.explain(query, user_id="ana", top_k=10, threshold=0.0)
    boost = {hit.memory.text: hit.details.entity_boost for hit in closest.hits}
    assert boost[BROTHER] > 0 and boost[LUKAS[0]] == 0
    assert closest.hits[0].memory.text == BROTHER


INES_BY_AGENT = {
    "planner": "Ana's friend Ines booked the ferry to Tangier.",
    "coach": "Ana swims with Ines every Saturday morning.",
    "chef": "Ana cooked dinner for Ines last winter.",
}


@pytest.mark.parametrize("entity_match", ["names", "best", "all"])
def test_a_name_stored_under_several_agents_boosts_all_their_memories_whatever_the_order(
    engine: Engine, entity_match: str
) -> None:
    """One person named by three agents of a user is three entity rows, one per scope. A search in
    the user's whole scope boosts the memories of all three alike, so the order in which they were
    stored (a migrated file, a fresh import) changes neither the boosts nor the ranking."""
    agents = list(INES_BY_AGENT)
    for user, order in (("ana", agents), ("bea", agents[::-1])):
        engine.add_many([MemoryInput(text) for text in OTHER_MEMORIES[:3]], user_id=user)  # so Ines is rare
        for agent in order:
            engine.add(INES_BY_AGENT[agent], user_id=user, agent_id=agent)
    config = engine.config.replace("search", entity_match=entity_match)
    with Engine(config, embedder=engine.embedder, nlp=engine.nlp) as searcher:
        found = {user: searcher.explain("What should I know about Ines?", user_id=user, top_k=3, threshold=0.0).hits
                 for user in ("ana", "bea")}
    boosts = {user: {hit.memory.text: hit.details.entity_boost for hit in hits} for user, hits in found.items()}
    assert boosts["ana"] == boosts["bea"]
    assert set(boosts["ana"]) == set(INES_BY_AGENT.values()) and len(set(boosts["ana"].values())) == 1
    assert min(boosts["ana"].values()) > 0
    assert [hit.memory.text for hit in found["ana"]] == [hit.memory.text for hit in found["bea"]]


FACTS_BY_DAY = [
    "The Orion launch deadline is March 14",
    "Dentist appointment on Tuesday at 4 pm",
    "My wife Clara works at the city library",
    "My name is Dana and I live in Leeds",
]


def test_keyword_context_joins_only_memories_stored_together(engine: Engine, monkeypatch) -> None:
    """Facts added by hand on different days are not a conversation: the dentist appointment
    stored the day after the Orion deadline earns nothing from its keywords. The same facts
    stored in one sitting are neighbours, and share as turns of a conversation do."""
    for day, text in enumerate(FACTS_BY_DAY, start=1):
        monkeypatch.setattr(clock, "now", lambda day=day: f"2026-03-0{day}T09:00:00.000000+00:00")
        engine.add(text, user_id="dana")
    monkeypatch.undo()
    engine.add_many([MemoryInput(text) for text in FACTS_BY_DAY], user_id="sam")

    def keyword_sources(user: str, **search: object) -> dict[str, str | None]:
        with Engine(engine.config.replace("search", **search), embedder=engine.embedder, nlp=engine.nlp) as tuned:
            hits = tuned.explain("What's the deadline for Orion?", user_id=user, top_k=4, threshold=0.0).hits
        return {hit.memory.text: hit.keyword_source for hit in hits}

    assert keyword_sources("dana")[FACTS_BY_DAY[1]] is None
    assert keyword_sources("dana", keyword_context_seconds=0)[FACTS_BY_DAY[1]] == "beside"
    assert keyword_sources("sam")[FACTS_BY_DAY[1]] == "beside"
    assert keyword_sources("dana")[FACTS_BY_DAY[0]] == "own"


def test_a_memory_two_places_from_a_hit_earns_a_quarter_of_its_score(engine: Engine) -> None:
    """With ``keyword_context_reach = 2`` a memory two places from a hit earns a quarter of its
    score, three places nothing; the default (1) passes shares to the memories just beside."""
    engine.add_many([MemoryInput(text) for text in (*FACTS_BY_DAY, *OTHER_MEMORIES)], user_id="sam")
    query = "When is the Orion launch deadline?"

    def keyword_scores(reach: int) -> dict[str, float]:
        config = engine.config.replace("search", keyword_context_reach=reach)
        with Engine(config, embedder=engine.embedder, nlp=engine.nlp) as reaching:
            hits = reaching.explain(query, user_id="sam", top_k=50, threshold=0.0).hits
        return {hit.memory.text: hit.details.bm25_score for hit in hits}

    two, one = keyword_scores(2), keyword_scores(1)
    hit = two[FACTS_BY_DAY[0]]
    assert hit > 0.5  # a quarter of it is still above the sigmoid's floor
    assert two[FACTS_BY_DAY[1]] == pytest.approx(hit / 2) and two[FACTS_BY_DAY[2]] == pytest.approx(hit / 4)
    assert two[FACTS_BY_DAY[3]] == 0
    assert one[FACTS_BY_DAY[1]] == pytest.approx(hit / 2) and one[FACTS_BY_DAY[2]] == 0
    assert engine.config.search.keyword_context_reach == 1


def test_per_call_signal_switches_match_the_configured_ones(garden: Engine) -> None:
    """``explain(use_bm25=False, use_entities=False)`` ranks as an engine configured without
    them, and the next call without switches is fully hybrid again (nothing is mutated)."""
    query = "Ana tomato blight in Lisbon"
    semantic_only = Engine(
        garden.config.replace("search", use_bm25=False, use_entities=False), embedder=garden.embedder, nlp=garden.nlp
    )
    with semantic_only:
        configured = semantic_only.explain(query, user_id="ana")
    switched = garden.explain(query, user_id="ana", use_bm25=False, use_entities=False)
    assert [(h.memory.id, h.score) for h in switched.hits] == [(h.memory.id, h.score) for h in configured.hits]
    assert switched.analysis.signals_active == ["semantic"]
    assert garden.explain(query, user_id="ana").analysis.signals_active == ["semantic", "bm25", "entity"]
    keywords_off = garden.explain(query, user_id="ana", use_bm25=False)
    assert keywords_off.analysis.signals_active == ["semantic", "entity"]


def test_the_neighbourhood_of_ranked_candidates_is_read_within_the_scope_and_the_day(engine: Engine) -> None:
    """``Snapshot.neighbourhood`` (PostgreSQL reads it in one statement): each candidate's
    neighbours one place away within the scope and live on the day asked about, the query's
    distance to each neighbour not already known, which candidates ask, and their texts."""
    today = clock.today()
    later = (dt.date.fromisoformat(today) + dt.timedelta(days=1)).isoformat()
    first = engine.add("Ana moved to Lisbon in May.", user_id="ana")[0].memory
    engine.add("Bo booked the tram tour.", user_id="bo")  # another user's memory between
    asking = engine.add("Did Ana like the food in Porto?", user_id="ana")[0].memory
    nurse = engine.add("Ana works as a nurse at Santa Maria.", user_id="ana")[0].memory
    engine.add("Ana's old parking permit for the hospital.", user_id="ana", expiration_date=today)
    cat = engine.add("Ana adopted a cat named Pixel.", user_id="ana")[0].memory
    query = engine.embedder.embed_batch(["Where does Ana work?"])[0]
    with engine.backend.snapshot() as view:
        rowid = {row.id: key for key, row in view.memories_by_rowid(view.scope_rowids(Scope("ana")), Scope("ana")).items()}
        a, q, n, c = (rowid[memory.id] for memory in (first, asking, nurse, cat))
        around = view.neighbourhood([a, q, n, c], query, {a, c}, Scope("ana"), None, later)
        kept = view.neighbourhood([q, n], query, set(), Scope("ana"), None, None)
    assert around.adjacent == {a: [], q: [n], n: [q], c: []}  # Bo's memory and the expired one are no one's
    assert set(around.distances) == {q, n}  # neighbours whose distance the caller does not know
    exact = {key: 1.0 - float(np.dot(engine.embedder.embed_batch([text])[0], query))
             for key, text in ((q, asking.text), (n, nurse.text))}
    assert around.distances == pytest.approx(exact, abs=1e-4)
    assert around.asks == {q}
    assert around.texts == {a: first.text, q: asking.text, n: nurse.text, c: cat.text}
    assert kept.adjacent[n] == [q, n + 1]  # with no day asked about, the expired turn is a neighbour
    assert kept.texts[n + 1] == "Ana's old parking permit for the hospital."


def test_the_nearest_entities_of_a_scope_come_nearest_first(engine: Engine) -> None:
    """``Snapshot.knn_entities``: for each query, of the scope's entities nearest to it, the
    nearest and the others within the distance asked for, nearest first with their cosine
    distances, a smaller limit giving the first of the same list. Entity matching relies on the
    order: the entities similar enough to match are the list's leading run."""
    engine.add_many([MemoryInput(text) for text in (
        "Ana met Bruno in Lisbon.", "Ana and Carla flew to Porto.", "Bruno works at Santa Maria hospital.",
    )], user_id="ana")
    engine.add("Bruno Duarte moved to Lisbon.", user_id="bo")
    vectors = engine.embedder.embed_batch(["lisbon", "bruno", "quantum chromodynamics"])
    with engine.backend.snapshot() as view:
        every = view.knn_entities(vectors, Scope("ana"), 500, 2.0)  # cosine distances are at most 2
        first = view.knn_entities(vectors, Scope("ana"), 2, 2.0)
        near = view.knn_entities(vectors, Scope("ana"), 500, 0.5)
    for hits, name in zip(every, ("lisbon", "bruno")):
        distances = [distance for _, _, distance in hits]
        assert distances == sorted(distances)
        assert hits[0][1].lower() == name and hits[0][2] == pytest.approx(0.0, abs=1e-4)
        assert "bruno duarte" not in {text.lower() for _, text, _ in hits}  # Bo's
    assert {entity for entity, _, _ in every[0]} == {entity for entity, _, _ in every[1]}  # the whole scope
    assert len(every[0]) == 7
    assert first == [hits[:2] for hits in every]
    assert near == [[hit for place, hit in enumerate(hits) if place == 0 or hit[2] <= 0.5] for hits in every]
    assert [len(hits) for hits in near] == [2, 1, 1]  # Lisbon and Porto; Bruno; the nearest, though far
    assert near[2][0][2] > 0.5


def test_whether_an_entity_of_the_scope_holds_every_word_of_a_name(engine: Engine) -> None:
    """``Snapshot.entities_holding``: "maria" is in "Santa Maria hospital", in any order of its
    words; a part of a word is not, nor words spread over two entities, nor another user's."""
    engine.add_many([MemoryInput(text) for text in (
        "Ana met Bruno in Lisbon.", "Ana and Carla flew to Porto.", "Bruno works at Santa Maria hospital.",
    )], user_id="ana")
    engine.add("Bruno Duarte moved to Lisbon.", user_id="bo")
    names = ["bruno", "maria", "hospital santa", "mar", "duarte", "lisbon porto", "santa maria hospital", "50%_ off"]
    with engine.backend.snapshot() as view:
        assert view.entities_holding(names, Scope("ana")) == [True, True, True, False, False, False, True, False]
        assert view.entities_holding(["duarte"], Scope("bo")) == [True]
        assert view.entities_holding([], Scope("ana")) == []
