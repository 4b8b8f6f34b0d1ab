"""What one user's search reads in an SQLite file is bounded by that user's memories. The vector
tables are partitioned by user (migration m008): a file of the earlier layout is rebuilt on open
with every vector kept and every search unchanged, and a store of many small users stays small
on disk. The count of a user's expired memories reads that user's dated memories alone
(migration m009)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from store import Config, Engine, MemoryInput
from store.scope import Scope
from store.sqlite import connection, migrations

ALICE = [
    "Alice adopted a grey cat called Miso in Lisbon.",
    "Alice is training for the Berlin marathon in September.",
    "Alice's sister Maria works as a nurse in Porto.",
]
BOB = [
    "Bob keeps bees on the roof of his flat in Leeds.",
    "Bob is learning Japanese before his trip to Kyoto.",
    "Bob's favourite band is Radiohead.",
]
QUESTIONS = ["Where does the cat live?", "What is the trip about?", "Who works as a nurse?"]
VECTOR_TABLES = tuple(migrations.VECTOR_KEYS)


def searches(engine: Engine) -> dict[tuple[str, str], list[tuple[str, float]]]:
    """Every question's ranking in each user's scope: ids and scores."""
    return {
        (user, question): [(hit.memory.id, hit.score) for hit in engine.search(question, user_id=user, top_k=5)]
        for user in ("alice", "bob") for question in QUESTIONS
    }


def table_sql(path: Path) -> dict[str, str]:
    conn = apsw.Connection(str(path))
    try:
        names = ",".join("?" * len(VECTOR_TABLES))
        return dict(conn.execute(f"SELECT name, sql FROM sqlite_master WHERE name IN ({names})", VECTOR_TABLES))
    finally:
        conn.close()


def back_to_schema_7(path: Path, dimension: int) -> None:
    """Give a current file the vector tables migration m001 made (unpartitioned), every vector
    copied across, m002's expiry index, postings without their memory's length (before m011),
    no log of vector changes (before m012), and the schema version before m008."""
    scratch = apsw.Connection(":memory:")
    connection.connection_sqlite_vec(scratch)
    migrations.m001_initial(scratch, dimension)
    names = ",".join("?" * len(VECTOR_TABLES))
    first_layout = scratch.execute(f"SELECT sql FROM sqlite_master WHERE name IN ({names})", VECTOR_TABLES).fetchall()
    scratch.close()
    conn = apsw.Connection(str(path))
    connection.connection_sqlite_vec(conn)
    with connection.write_transaction(conn):
        for table, key in migrations.VECTOR_KEYS.items():
            conn.execute(f"CREATE TABLE kept AS SELECT {key}, embedding, user_id, agent_id, run_id FROM {table}")
            conn.execute(f"DROP TABLE {table}")
            (ddl,) = next(row for row in first_layout if f"TABLE {table} " in row[0])
            conn.execute(ddl)
            conn.execute(f"INSERT INTO {table}({key}, embedding, user_id, agent_id, run_id) SELECT * FROM kept")
            conn.execute("DROP TABLE kept")
        conn.execute("DROP INDEX memories_expiration")
        migrations.m002_expiry_index(conn, dimension)
        conn.execute("DROP TRIGGER memory_terms_length")
        conn.execute("ALTER TABLE memory_terms DROP COLUMN length")
        for trigger in ("insert", "delete", "update"):
            conn.execute(f"DROP TRIGGER memories_vector_{trigger}")
        conn.execute("DROP TABLE vector_changes")
        conn.execute("UPDATE schema_version SET version = 7")
    conn.close()


@pytest.mark.only_on("sqlite")
def test_a_file_of_the_first_layout_is_partitioned_on_open_and_searches_the_same(
    config: Config, db_path: Path, engine_factory: Callable[[Config], Engine]
) -> None:
    with engine_factory(config) as engine:
        engine.add_many([MemoryInput(text) for text in ALICE], user_id="alice")
        engine.add_many([MemoryInput(text) for text in BOB], user_id="bob")
        engine.add_many([MemoryInput("The helper agent answers in French.")], agent_id="helper")
        before = searches(engine)
        dimension = engine.embedder.dimension
    back_to_schema_7(db_path, dimension)
    assert not any("PARTITION KEY" in sql for sql in table_sql(db_path).values())

    with engine_factory(config) as engine:
        assert engine.check() == []
        after = searches(engine)
        assert [memory.text for memory in engine.list(agent_id="helper")] == ["The helper agent answers in French."]
    assert after.keys() == before.keys()
    for key, ranking in before.items():
        assert [memory_id for memory_id, _ in after[key]] == [memory_id for memory_id, _ in ranking]
        assert [score for _, score in after[key]] == pytest.approx([score for _, score in ranking], abs=1e-6)

    assert all("PARTITION KEY" in sql for sql in table_sql(db_path).values())
    conn = apsw.Connection(str(db_path))
    connection.connection_sqlite_vec(conn)
    assert conn.execute("SELECT max(version) FROM schema_version").fetchone() == (migrations.SCHEMA_VERSION,)
    assert conn.execute("SELECT count(*) FROM memory_vectors").fetchone() == (len(ALICE) + len(BOB) + 1,)
    assert conn.execute("SELECT count(*) FROM memory_vectors WHERE user_id = 'bob'").fetchone() == (len(BOB),)
    assert conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'm008%'").fetchall() == []
    conn.close()


@pytest.mark.only_on("sqlite")
def test_many_small_users_stay_small_on_disk(config: Config, engine_factory: Callable[[Config], Engine]) -> None:
    """Each user's vectors fill chunks of their own: at vec0's default of 1,024 vectors a chunk,
    every user cost about 3 MB whatever they held; in chunks of ``VECTOR_CHUNK_ROWS`` a user of
    one memory costs well under 200 KB."""
    users = 100
    with engine_factory(config) as engine:
        for number in range(users):
            engine.add_many([MemoryInput(f"User {number} likes tea with lemon.")], user_id=f"user-{number}")
        assert engine.backend.size_bytes() / users < 200_000


@pytest.mark.only_on("sqlite")
def test_counting_a_users_expired_memories_seeks_that_users_dated_ones(engine: Engine) -> None:
    engine.add_many([MemoryInput("Alice's passport expires soon.")], user_id="alice", expiration_date="2027-01-02")
    engine.add_many([MemoryInput("Bob's visa ran out.")], user_id="bob", expiration_date="2027-01-02")
    statements: list[tuple[str, tuple]] = []
    with engine.backend.snapshot() as view:
        view.conn.exec_trace = lambda _cursor, sql, bindings: statements.append((sql, bindings)) or True
        try:
            assert view.count_expired(Scope("alice"), "2027-06-01") == 1
        finally:
            view.conn.exec_trace = None
        ((sql, bindings),) = statements
        plan = " ".join(row[3] for row in view.conn.execute(f"EXPLAIN QUERY PLAN {sql}", bindings))
    assert "SEARCH m USING COVERING INDEX memories_expiration (user_id=?" in plan


def test_a_scope_is_counted_as_its_memories_are_after_adds_and_deletes(engine: Engine) -> None:
    """Entity rarity weighs a name by the scope's size: a user's whole scope is read from the
    user's kept counts on SQLite (``keyword_users``), a narrower one is counted; both must be
    the number of memories the scope holds."""
    engine.add_many([MemoryInput(text) for text in ALICE], user_id="alice")
    engine.add_many([MemoryInput("Alice plans a trip to Kyoto.")], user_id="alice", agent_id="planner")
    engine.add_many([MemoryInput(text) for text in BOB], user_id="bob")
    (first,) = [memory for memory in engine.list(user_id="alice") if memory.text == ALICE[0]]
    engine.delete(first.id, user_id="alice")
    with engine.backend.snapshot() as view:
        assert view.scope_count(Scope("alice")) == len(ALICE)  # two of ALICE's, and the planner's
        assert view.scope_count(Scope("alice", "planner")) == 1
        assert view.scope_count(Scope("bob")) == len(BOB)
        assert view.scope_count(Scope("carol")) == 0


@pytest.mark.only_on("sqlite")
def test_vec0_finds_one_users_chunks_by_index(engine: Engine) -> None:
    """vec0 looks a user's chunks up by partition in its ``_chunks`` tables, for a KNN and for a
    write; unindexed, each read the chunk list of every user in the file (migration m010). Every
    statement vec0 runs on a chunk table must seek the user, not scan."""
    engine.add_many([MemoryInput(text) for text in ALICE], user_id="alice")
    engine.add_many([MemoryInput(text) for text in BOB], user_id="bob")
    statements: list[str] = []

    def traced(event: dict) -> None:
        if "_chunks" in (sql := event.get("sql") or "") and "partition00" in sql:
            statements.append(sql)

    backend = engine.backend
    backend._conn.trace_v2(apsw.SQLITE_TRACE_STMT, traced)
    try:
        engine.add_many([MemoryInput("Alice's cat Miso sleeps on the piano.")], user_id="alice")
        engine.search("Who keeps bees?", user_id="bob", top_k=3)
        with backend.snapshot() as view:
            view.conn.trace_v2(apsw.SQLITE_TRACE_STMT, traced)
            view.knn_memories(engine.embedder.embed_batch(["bees"])[0], Scope("bob"), 5, None, None)
            view.conn.trace_v2(0, None)
    finally:
        backend._conn.trace_v2(0, None)
    assert len(set(statements)) >= 2  # the write's lookup of the user's last chunk, the KNN's of its chunks
    for sql in set(statements):
        plan = " ".join(row[3] for row in backend._conn.execute(f"EXPLAIN QUERY PLAN {sql}", ["alice"]))
        assert "USING" in plan and "INDEX" in plan and "SCAN" not in plan, (sql, plan)
