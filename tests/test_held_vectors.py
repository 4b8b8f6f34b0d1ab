"""A heavy user's KNN on SQLite is answered from the vectors the process holds in memory
(``store.sqlite.held_vectors``) and gives what vec0 gives, whatever another process or
connection writes, deletes or rewrites meanwhile. The threshold is lowered so that a few dozen
real memories make a heavy user."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from forkserver import ForkServer
from sqlite_files import execute
from test_keyword_user_scope import ANN as HARBOUR  # pytest puts tests/ on sys.path (prepend import mode)
from test_keyword_user_scope import LATER

from store import Config, Engine, MemoryInput, clock
from store.scope import Scope
from store.sqlite import held_vectors
from store.sqlite.backend import SQLiteBackend

pytestmark = pytest.mark.only_on("sqlite")

HELD_FROM = 12
ANN = [
    *HARBOUR,
    "Ann's sister moved to Lisbon last spring",
    "Ann plays the cello in a quartet on Thursdays",
    "Ann is allergic to peanuts",
    "Ann's dog Biscuit is afraid of thunder",
    "Ann keeps her passwords in a paper notebook",
    "Ann wants to learn Portuguese before the trip",
]
AIDE = ["Ann's helper agent reserved the harbour restaurant", "The helper agent books Ann's trains"]
RUN = ["In this session Ann planned the Lisbon trip", "In this session Ann compared cello teachers"]
QUESTIONS = ["harbour restaurant", "music lessons", "pets and storms", "travel to Portugal", "food allergy"]


@pytest.fixture(autouse=True)
def held_from_a_dozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(held_vectors, "HELD_FROM", HELD_FROM)


@pytest.fixture
def heavy(engine: Engine) -> Engine:
    """Ann with 17 memories (two filed under an agent, two under a run, one expiring today), Bo with two."""
    engine.add_many([MemoryInput(text) for text in ANN], user_id="ann")
    engine.add_many([MemoryInput(text) for text in AIDE], user_id="ann", agent_id="aide")
    engine.add_many([MemoryInput(text) for text in RUN], user_id="ann", run_id="r1")
    engine.add_many([MemoryInput("Ann's coupon for the harbour restaurant")], user_id="ann",
                    expiration_date=clock.today())  # add_many: an add reads its nearest memories, as a search
    engine.add_many([MemoryInput("Bo walks to the harbour restaurant every day"), MemoryInput("Bo plays cello")],
                    user_id="bo")
    return engine


@pytest.fixture
def vec0(engine: Engine) -> Iterator[SQLiteBackend]:
    """The same file opened without held vectors: every KNN is vec0's."""
    backend = SQLiteBackend(engine.backend.path, engine.embedder.name, engine.embedder.dimension)
    yield backend
    backend.close()


def knn(backend: SQLiteBackend, vector: np.ndarray, scope: Scope, limit: int = 8,
        on: str | None = LATER) -> list[tuple[int, float]]:
    with backend.snapshot() as view:
        return view.knn_memories(vector, scope, limit, None, on)


def assert_same(held: list[tuple[int, float]], scanned: list[tuple[int, float]]) -> None:
    assert [rowid for rowid, _ in held] == [rowid for rowid, _ in scanned]
    assert [distance for _, distance in held] == pytest.approx([distance for _, distance in scanned], abs=1e-5)


def assert_as_vec0(engine: Engine, vec0: SQLiteBackend, questions: list[str], scopes: list[Scope]) -> None:
    for vector in engine.embedder.embed_batch(questions):
        for scope in scopes:
            assert_same(knn(engine.backend, vector, scope), knn(vec0, vector, scope))


SCOPES = [Scope("ann"), Scope("ann", "aide"), Scope("ann", run_id="r1"), Scope("bo")]


def test_a_heavy_users_knn_is_vec0s_in_every_scope_and_leaves_the_expired_out(
    heavy: Engine, vec0: SQLiteBackend
) -> None:
    assert_as_vec0(heavy, vec0, QUESTIONS, SCOPES)
    assert heavy.backend.held_vectors.users() == {"ann": 17}  # Bo, with two memories, stays with vec0
    (walk,) = heavy.embedder.embed_batch(["harbour walk to the lighthouse"])
    anns = [rowid for rowid, _ in knn(vec0, walk, Scope("ann"), 17, None)]
    bos = [rowid for rowid, _ in knn(vec0, walk, Scope("bo"), 2, None)]
    for rowids in (anns[::-1], anns[3:7], [anns[0], bos[0]]):  # Bo's memory is not held: vec0 answers
        with heavy.backend.snapshot() as held, vec0.snapshot() as scanned:
            assert_same(sorted(held.distances_for(walk, rowids, Scope("ann"))),
                        sorted(scanned.distances_for(walk, rowids, Scope("ann"))))
    (coupon,) = heavy.embedder.embed_batch(["Ann's coupon for the harbour restaurant"])
    with heavy.backend.snapshot() as view:
        texts = view.texts_by_rowid([rowid for rowid, _ in knn(heavy.backend, coupon, Scope("ann"), 20)], Scope("ann"))
        assert "Ann's coupon for the harbour restaurant" not in texts.values()
        today = view.texts_by_rowid([rowid for rowid, _ in knn(heavy.backend, coupon, Scope("ann"), 1, None)],
                                    Scope("ann"))
    assert list(today.values()) == ["Ann's coupon for the harbour restaurant"]  # no day asked: not expired


def test_a_held_users_search_reads_its_keywords_beside_the_knn_and_ranks_as_with_vec0(
    heavy: Engine, vec0: SQLiteBackend, config: Config, engine_factory: Callable[[Config], Engine]
) -> None:
    read = 0
    asked = [*QUESTIONS, "Ann's cello quartet", "the lighthouse at dawn", "Ann's harbour boat"]
    for question, vector in zip(asked, heavy.embedder.embed_batch(asked)):
        terms = heavy.nlp.analyze_query(question, entities=False).lemmatized.split()
        for scope in SCOPES:
            with heavy.backend.snapshot() as held, vec0.snapshot() as scanned:
                nearest, keywords = held.first_signals(lambda v=vector: v, terms, scope, 8, None, LATER)
                assert_same(nearest, scanned.knn_memories(vector, scope, 8, None, LATER))
                assert keywords == scanned.bm25_memories(terms, scope, 8, None, LATER)
                read += len(keywords)
    assert read > 20
    with engine_factory(config.replace("store", vector_memory_mb=0)) as plain:
        for question in QUESTIONS:
            for scope in ({"user_id": "ann"}, {"user_id": "ann", "agent_id": "aide"}):
                found, expected = heavy.search(question, **scope), plain.search(question, **scope)
                assert [hit.memory.id for hit in found] == [hit.memory.id for hit in expected]
                assert [hit.score for hit in found] == pytest.approx([hit.score for hit in expected], abs=1e-5)
        assert plain.backend.held_vectors.users() == {}
    assert heavy.backend.held_vectors.users() == {"ann": 17}


def test_many_searches_at_once_while_the_user_is_written_give_what_one_at_a_time_gives(
    heavy: Engine, vec0: SQLiteBackend
) -> None:
    """Sessions of one process search a held user from many threads while another thread adds to
    it, each held search reading its keywords on another thread (one for the process): no search
    fails, and afterwards every KNN is vec0's."""
    errors: list[BaseException] = []
    found: list[int] = []

    def search(rounds: int) -> None:
        try:
            for _ in range(rounds):
                for question in QUESTIONS:
                    found.append(len(heavy.search(question, user_id="ann")))
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            errors.append(error)

    threads = [threading.Thread(target=search, args=(4,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    added = [heavy.add(f"Ann noted errand number {n} for the harbour office", user_id="ann")[0].memory.id
             for n in range(6)]
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(found) == 8 * 4 * len(QUESTIONS) and sum(found) > 0
    assert_as_vec0(heavy, vec0, [*QUESTIONS, "errands at the harbour office"], SCOPES)
    assert heavy.backend.held_vectors.users() == {"ann": 17 + len(added)}


def test_held_vectors_follow_another_connections_adds_rewrites_and_deletes(
    heavy: Engine, vec0: SQLiteBackend, engine_factory: Callable[[Config], Engine], config: Config
) -> None:
    assert_as_vec0(heavy, vec0, QUESTIONS, SCOPES)
    with engine_factory(config) as other:  # its own connections and held vectors, as another process
        new = other.add("Ann adopted a grey cat called Pixel", user_id="ann")[0].memory
        cello = next(m for m in other.list(user_id="ann", limit=50) if "cello" in m.text and "quartet" in m.text)
        other.update(cello.id, text="Ann gave up the cello and took up the drums", user_id="ann")
        peanuts = next(m for m in other.list(user_id="ann", limit=50) if "peanuts" in m.text)
        other.delete(peanuts.id, user_id="ann")
    questions = [*QUESTIONS, "a grey cat", "drums", "cello quartet", "peanuts"]
    assert_as_vec0(heavy, vec0, questions, SCOPES)
    (cat,) = heavy.embedder.embed_batch(["Ann adopted a grey cat called Pixel"])
    with heavy.backend.snapshot() as view:
        nearest = knn(heavy.backend, cat, Scope("ann"), 1)
        assert view.memories_by_rowid([nearest[0][0]], Scope("ann"))[nearest[0][0]].id == new.id
    assert heavy.backend.held_vectors.users() == {"ann": 17}  # one added, one deleted


def test_held_vectors_follow_another_processs_writes(
    heavy: Engine, vec0: SQLiteBackend, fork_server: ForkServer, config: Config
) -> None:
    assert_as_vec0(heavy, vec0, QUESTIONS, SCOPES)
    worker = fork_server.start("write", config.database, "ann", 20, 11)
    fork_server.wait_dead(worker, timeout=300)
    assert worker.status == 0, fork_server.stderr()
    assert len(worker.acked) == 20
    assert_as_vec0(heavy, vec0, [*QUESTIONS, "Alice told Bob about the Q3 budget", "quiet mornings and tea"],
                   SCOPES)
    assert heavy.backend.held_vectors.users() == {"ann": 37}


def test_a_snapshot_older_than_the_held_vectors_is_answered_as_it_sees_the_file(heavy: Engine) -> None:
    (cat,) = heavy.embedder.embed_batch(["Ann adopted a grey cat called Pixel"])
    with heavy.backend.snapshot() as before:
        first = before.knn_memories(cat, Scope("ann"), 5, None, LATER)  # holds Ann as this snapshot sees her
        heavy.add("Ann adopted a grey cat called Pixel", user_id="ann")
        after = knn(heavy.backend, cat, Scope("ann"), 5)  # a newer snapshot brings the held vectors up to date
        assert after[0][0] not in dict(first)
        assert_same(before.knn_memories(cat, Scope("ann"), 5, None, LATER), first)  # vec0's, as it sees the file
    assert heavy.backend.held_vectors.users() == {"ann": 18}


def test_a_write_transaction_reads_with_vec0_and_a_rolled_back_one_leaves_nothing_held(heavy: Engine) -> None:
    (walk,) = heavy.embedder.embed_batch(["harbour walk to the lighthouse"])
    nearest = knn(heavy.backend, walk, Scope("ann"), 1)[0][0]
    with pytest.raises(RuntimeError), heavy.backend.transaction() as txn:
        assert txn.held is None
        txn.delete_memory(nearest, Scope("ann"))
        assert nearest not in dict(txn.knn_memories(walk, Scope("ann"), 5, None, LATER))
        raise RuntimeError("rolled back")
    assert knn(heavy.backend, walk, Scope("ann"), 1)[0][0] == nearest


def test_a_user_emptied_and_filled_again_is_read_again(heavy: Engine, vec0: SQLiteBackend) -> None:
    assert_as_vec0(heavy, vec0, QUESTIONS, SCOPES)
    heavy.delete_all(user_id="ann")
    assert_as_vec0(heavy, vec0, QUESTIONS, [Scope("ann")])  # none left: not held, vec0 finds nothing either
    assert heavy.backend.held_vectors.users() == {}
    heavy.add_many([MemoryInput(text.replace("Ann", "Cleo")) for text in ANN], user_id="ann")
    assert_as_vec0(heavy, vec0, QUESTIONS, [Scope("ann"), Scope("ann", "aide")])
    assert heavy.backend.held_vectors.users() == {"ann": len(ANN)}


def test_a_user_the_budget_cannot_hold_stays_with_vec0(heavy: Engine, vec0: SQLiteBackend) -> None:
    heavy.backend.held_vectors.budget = 17 * heavy.embedder.dimension * 4  # short of the row ids and codes
    assert_as_vec0(heavy, vec0, QUESTIONS, SCOPES)
    assert heavy.backend.held_vectors.users() == {}


def test_a_vector_missing_from_the_file_leaves_the_user_to_vec0_until_a_repair_restores_it(
    heavy: Engine, vec0: SQLiteBackend
) -> None:
    (walk,) = heavy.embedder.embed_batch(["harbour walk to the lighthouse"])
    nearest = knn(vec0, walk, Scope("ann"), 1)[0][0]
    execute(heavy, "DELETE FROM memory_vectors WHERE memory_rowid = ?", (nearest,))  # a damaged file
    assert_as_vec0(heavy, vec0, [*QUESTIONS, "harbour walk to the lighthouse"], SCOPES)
    assert heavy.backend.held_vectors.users() == {}  # 16 vectors for 17 memories: not held
    heavy.repair()
    assert knn(heavy.backend, walk, Scope("ann"), 1)[0][0] == nearest
    assert_as_vec0(heavy, vec0, QUESTIONS, SCOPES)
    assert heavy.backend.held_vectors.users() == {"ann": 17}


def test_a_file_from_before_the_log_logs_every_memory_on_open(
    heavy: Engine, vec0: SQLiteBackend, config: Config, engine_factory: Callable[[Config], Engine]
) -> None:
    path = heavy.backend.path
    heavy.close()
    vec0.close()
    execute_all = [
        *(f"DROP TRIGGER memories_vector_{trigger}" for trigger in ("insert", "delete", "update")),
        "DROP TABLE vector_changes", "UPDATE schema_version SET version = 11",
    ]
    for statement in execute_all:
        execute(heavy, statement)
    with engine_factory(config) as reopened:
        logged = execute(reopened, "SELECT user_id, count(*) FROM vector_changes GROUP BY user_id ORDER BY 1")
        assert logged == [("ann", 17), ("bo", 2)]
        plain = SQLiteBackend(path, reopened.embedder.name, reopened.embedder.dimension)
        try:
            assert_as_vec0(reopened, plain, QUESTIONS, SCOPES)
        finally:
            plain.close()
        assert reopened.backend.held_vectors.users() == {"ann": 17}
