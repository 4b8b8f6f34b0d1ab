"""A search in a user's whole scope ranks keywords from the postings alone (each carries its
memory's length in terms), and gives what the read through each posting's memory gives: the
same memories and scores, an expired memory never among them, on both backends."""

from __future__ import annotations

import datetime as dt
import json
import math

import numpy as np
import pytest

from store import Config, Engine, MemoryInput
from store.scope import Scope
from store.sql import keywords
from store.sql.keywords import best_by_postings, bounded_postings, term_frequencies

LATER = (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=30)).isoformat()
"""A day the reads are asked about, after a memory that expires today is hidden."""
ANN = [
    "Ann booked a table at the harbour restaurant for Friday",
    "Ann's harbour walk starts at the lighthouse",
    "Ann ordered a new bicycle bell online",
    "Ann and her brother fixed the harbour boat",
    "The restaurant on the harbour closes in winter",
    "Ann likes the lighthouse at dawn",
]
QUESTIONS = ["harbour restaurant", "lighthouse walk", "bicycle", "boat harbour brother", "winter"]


def test_postings_scored_in_the_process_follow_the_rule_and_break_ties_by_memory() -> None:
    """Ten memories of three terms each: every posting's length is the average, so each scores
    its term's idf (times the query's repetitions of the term); the limit cuts between two equal
    scores, and the lower memory stays."""
    postings = [("walk", [3, 1], [1, 1], [3, 3]), ("lighthouse", [2], [1], [3])]
    walk, lighthouse = math.log((10 - 2 + 0.5) / 2.5), math.log((10 - 1 + 0.5) / 1.5)
    for query, given, limit, expected in [(["walk", "lighthouse"], postings, 2, [(2, lighthouse), (1, walk)]),
                                          (["walk", "walk"], postings[:1], 5, [(1, 2 * walk), (3, 2 * walk)])]:
        best = best_by_postings(query, given, 10, 30, limit)
        assert [rowid for rowid, _ in best] == [rowid for rowid, _ in expected]
        assert [score for _, score in best] == pytest.approx([score for _, score in expected], rel=1e-12)
    assert best_by_postings(["walk"], [], 10, 30, 5) == [] and best_by_postings(["walk"], postings, 10, 30, 0) == []


def test_postings_are_summed_alike_whether_their_keys_are_dense_or_spread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A heavy user's keys index a counting array, a light user's are sorted: both give the sum
    a plain loop gives, in the same order."""
    rng = np.random.default_rng(7)
    postings = []
    for term, count in [("walk", 300), ("lighthouse", 120), ("harbour", 40)]:
        rowids = np.sort(rng.choice(400, count, replace=False))
        postings.append((term, rowids, rng.integers(1, 3, count), rng.integers(3, 6, count)))
    query = ["walk", "lighthouse", "harbour", "harbour"]
    expected: dict[int, float] = {}
    for term, rowids, frequencies, lengths in postings:
        weight = query.count(term) * max(math.log((500 - len(rowids) + 0.5) / (len(rowids) + 0.5)), 1e-6)
        for rowid, frequency, length in zip(rowids.tolist(), frequencies.tolist(), lengths.tolist()):
            share = weight * frequency * 2.2 / (frequency + 1.2 * (0.25 + 0.75 * length / 4.0))
            expected[rowid] = expected.get(rowid, 0.0) + share
    best = sorted(expected.items(), key=lambda item: (-item[1], item[0]))[:25]
    for span in (8, -1):  # dense (400 keys for 460 postings), then always sorted
        monkeypatch.setattr("store.sql.keywords.DENSE_SPAN", span)
        found = best_by_postings(query, postings, 500, 2000, 25)
        assert [rowid for rowid, _ in found] == [rowid for rowid, _ in best]
        assert [score for _, score in found] == pytest.approx([score for _, score in best], rel=1e-12)


class CountingReader:
    """Reads terms' postings as ``term_postings`` does, all or those of some memories, and counts
    the postings it reads."""

    def __init__(self, postings: list[keywords.Posting]) -> None:
        self.by_term = {posting[0]: posting for posting in postings}
        self.read = 0

    def __call__(self, terms: list[str], among: np.ndarray | None) -> list[keywords.Posting]:
        found = []
        for term in terms:
            name, rowids, frequencies, lengths = self.by_term[term]
            inside = np.ones(len(rowids), bool) if among is None else np.isin(rowids, among)
            self.read += int(inside.sum())
            found.append((name, np.asarray(rowids)[inside], np.asarray(frequencies)[inside], np.asarray(lengths)[inside]))
        return found


def test_a_common_term_read_as_far_as_the_top_needs_gives_the_top_of_every_posting() -> None:
    """A heavy user: two rare terms read whole, two common ones only counted. ``bounded_postings``
    reads the common ones as far as the top needs, by their memories or whole, and the best of
    what it reads are the best of every posting, with the same scores to the last bit."""
    rng = np.random.default_rng(11)
    size = 20_000
    postings = []
    for term, count in [("kayak", 40), ("douro", 300), ("ana", 6_000), ("go", 9_000)]:
        rowids = np.sort(rng.choice(size, count, replace=False))
        postings.append((term, rowids, rng.integers(1, 4, count), rng.integers(3, 40, count)))
    counts = {term: len(rowids) for term, rowids, _, _ in postings}
    rare = [posting for posting in postings if counts[posting[0]] <= 300]
    # the last: a common term asked twenty times weighs about as much as a rare one, so that some of
    # the best memories hold none of the rare terms
    for query in (["ana", "kayak", "douro", "go"], ["go", "ana", "ana"], ["douro", "go"], ["go"] * 20 + ["kayak"]):
        asked_common = sum(counts[term] for term in set(query) if counts[term] > 300)
        for limit in (1, 10, 40):
            for lookup_cost in (1.0, 1e9):  # look the common terms up by memory, or read them whole and cut them
                reader = CountingReader(postings)
                bounded = bounded_postings(query, size, 20 * size, counts, rare, limit, reader, lookup_cost)
                found = best_by_postings(query, bounded, size, 20 * size, limit, counts)
                assert found == best_by_postings(query, postings, size, 20 * size, limit)
                if lookup_cost == 1.0 and query == ["ana", "kayak", "douro", "go"]:  # the rare terms decide the top
                    assert reader.read < asked_common / 4, (query, limit)
                else:  # at most each posting of the common terms, once
                    assert reader.read <= asked_common, (query, limit)


def terms_of(engine: Engine, question: str) -> list[str]:
    return engine.nlp.analyze_query(question, entities=False).lemmatized.split()


def test_a_users_whole_scope_ranks_from_its_postings_as_through_its_memories(engine: Engine) -> None:
    engine.add_many([MemoryInput(text) for text in ANN], user_id="ann")
    engine.add_many([MemoryInput("Ann's helper agent reserved the harbour restaurant")], user_id="ann", agent_id="aide")
    engine.add_many([MemoryInput("Bo walks to the harbour restaurant every day")], user_id="bo")
    with engine.backend.snapshot() as view:
        for question in QUESTIONS:
            terms = terms_of(engine, question)
            top = view.user_bm25(terms, "ann", 3, LATER)
            assert top and all(live for _, _, live in top)  # the postings' top is the answer
            ranked = view.bm25_memories(terms, Scope("ann"), 3, None, LATER)
            assert ranked == [(rowid, score) for rowid, score, _ in top]
            through_memories = view.scope_bm25(terms, Scope("ann"), 3, None, LATER)
            assert [rowid for rowid, _ in ranked] == [rowid for rowid, _ in through_memories]
            assert [score for _, score in ranked] == pytest.approx([score for _, score in through_memories], rel=1e-12)


@pytest.mark.only_on("sqlite")
def test_common_terms_read_as_far_as_the_top_needs_rank_as_every_posting_does(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every term of more than two postings counted first and read only as far as the top
    needs, a user's whole scope ranks as when every posting is read, and as the read through each
    memory does. (PostgreSQL reads every posting: ``store.postgres.signals``.)"""
    engine.add_many([MemoryInput(text) for text in ANN], user_id="ann")
    engine.add_many([MemoryInput("Bo walks to the harbour restaurant every day")], user_id="bo")
    with engine.backend.snapshot() as view:
        for question in [*QUESTIONS, "Ann harbour lighthouse", "the harbour restaurant at the lighthouse"]:
            terms = terms_of(engine, question)
            for limit in (1, 2, 4):
                monkeypatch.setattr("store.sqlite.signals.WHOLE_POSTINGS", 2)
                bounded = view.user_bm25(terms, "ann", limit, LATER)
                monkeypatch.setattr("store.sqlite.signals.WHOLE_POSTINGS", 10**9)
                assert bounded == view.user_bm25(terms, "ann", limit, LATER), (question, limit)
                through_memories = view.scope_bm25(terms, Scope("ann"), limit, None, LATER)
                assert [rowid for rowid, _, _ in bounded] == [rowid for rowid, _ in through_memories]


def test_an_expired_memory_at_the_top_of_the_postings_is_left_out_and_the_next_one_ranks(engine: Engine) -> None:
    engine.add_many([MemoryInput(text) for text in ANN], user_id="ann")
    gone = engine.add("Ann's harbour restaurant harbour restaurant voucher", user_id="ann",
                      expiration_date=dt.datetime.now(dt.UTC).date().isoformat())
    with engine.backend.snapshot() as view:
        terms = terms_of(engine, "harbour restaurant")
        top = view.user_bm25(terms, "ann", 2, LATER)
        texts = view.texts_by_rowid([rowid for rowid, _, _ in top], Scope("ann"))
        assert texts[top[0][0]] == gone[0].memory.text and top[0][2] is False  # best by score, not live
        ranked = view.bm25_memories(terms, Scope("ann"), 2, None, LATER)
        assert ranked == view.scope_bm25(terms, Scope("ann"), 2, None, LATER)
        assert len(ranked) == 2 and top[0][0] not in dict(ranked)
        assert ranked[0][0] == top[1][0]  # the best live one first, then the one after it
        assert view.bm25_memories(terms, Scope("ann"), 2, None, None)[0][0] == top[0][0]  # no day: none expired


def test_a_posting_that_disagrees_with_its_memorys_length_is_found_by_the_check(
    config: Config, engine: Engine
) -> None:
    engine.add("Ann's harbour walk starts at the lighthouse", user_id="ann")
    assert engine.check() == []
    if config.store.database_url:
        import postgres_sql

        with postgres_sql.connect(config.store.database_url) as conn:
            conn.execute("UPDATE memory_terms SET length = length + 1 WHERE term = 'lighthouse'")
    else:
        from sqlite_files import execute

        execute(engine, "UPDATE memory_terms SET length = length + 1 WHERE term = 'lighthouse'")
    problems = engine.check()
    assert len(problems) == 1 and "keyword postings" in str(problems[0])


@pytest.mark.only_on("sqlite")
def test_a_posting_written_without_its_length_by_an_earlier_trimem_gets_it(engine: Engine) -> None:
    """A process of an earlier trimem, still open on the file after this one migrated it, posts
    a memory's terms as that code did, without a length: the trigger of migration m011 gives each
    posting its memory's length, so the keyword reads and the check agree."""
    (added,) = engine.add("Ann's harbour walk starts at the lighthouse", user_id="ann")
    from sqlite_files import execute

    [(lemmas,)] = execute(engine, "SELECT text_lemmatized FROM memories WHERE id = ?", (added.memory.id,))
    execute(engine, "DELETE FROM memory_terms")
    execute(
        engine,
        "INSERT INTO memory_terms(user_id, term, memory_rowid, frequency) "
        "SELECT m.user_id, t.key, m.rowid, t.value FROM memories m, json_each(?) t WHERE m.id = ?",
        (json.dumps(term_frequencies(str(lemmas))), added.memory.id),
    )
    lengths = execute(engine, "SELECT DISTINCT p.length, m.terms FROM memory_terms p JOIN memories m "
                              "ON m.rowid = p.memory_rowid")
    assert len(lengths) == 1 and lengths[0][0] == lengths[0][1] > 0
    assert engine.check() == []


@pytest.mark.only_on("postgres")
def test_a_posting_without_its_length_is_refused_on_postgresql(config: Config, engine: Engine) -> None:
    """A server of an earlier trimem still running on the database posts without a length; the
    column has no default, so that write is refused whole instead of stored with a wrong length
    (the schema guard refuses it earlier still: here the session names today's schema)."""
    import postgres_sql
    import psycopg

    engine.add("Ann's harbour walk starts at the lighthouse", user_id="ann")
    with (postgres_sql.connect(config.store.database_url, autocommit=False) as conn,
          pytest.raises(psycopg.errors.NotNullViolation)):
        conn.execute("INSERT INTO memory_terms(user_id, term, memory_rowid, frequency) "
                     "SELECT user_id, 'zebra', rowid, 1 FROM memories")


def test_a_keyword_read_leaves_the_count_of_the_users_scope_as_counted(engine: Engine) -> None:
    """Entity rarity counts the user's whole scope; PostgreSQL takes that count from the N of a
    keyword read in the same snapshot, which must be the same count: every memory of the user,
    an agent's and an expired one too, and none of another user's."""
    engine.add_many([MemoryInput(text) for text in ANN], user_id="ann")
    engine.add_many([MemoryInput("Ann's helper agent reserved the harbour restaurant")], user_id="ann", agent_id="aide")
    engine.add("Ann's harbour restaurant voucher", user_id="ann",
               expiration_date=dt.datetime.now(dt.UTC).date().isoformat())
    engine.add_many([MemoryInput("Bo walks to the harbour restaurant every day")], user_id="bo")
    terms = terms_of(engine, "harbour restaurant")
    reads = {
        "user_bm25": lambda view: view.user_bm25(terms, "ann", 3, LATER),
        "bm25_memories": lambda view: view.bm25_memories(terms, Scope("ann"), 3, None, LATER),
        "scope_bm25, an agent's": lambda view: view.scope_bm25(terms, Scope("ann", "aide"), 3, None, LATER),
    }
    for name, read in reads.items():
        with engine.backend.snapshot() as view:
            assert read(view), name
            assert view.scope_count(Scope("ann")) == len(ANN) + 2, name
            assert view.scope_count(Scope("ann", "aide")) == 1, name
