"""Reliability at the engine level: nothing lost under crashes, several processes and hostile input.

The CI-sized versions of issue 5's scenarios; ``tests/stress/`` runs them larger with
``TRIMEM_STRESS=1``. Figures the scenarios reach are printed (``pytest -s`` shows them).

- check / repair / backup: each kind of damage is detected by name and repaired
- crash consistency: a writer is SIGKILLed at random moments, the file is checked each time
- several processes: writers with their own connections on one file, no write lost
- hostile input (hypothesis): every call succeeds or raises InvalidArgument / NotFound
- scope isolation (hypothesis): no read returns another scope's memory
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from forkserver import ForkServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test
from scenarios import concurrent_writers, crash_cycles, fullest_check
from sqlite_files import execute

from store import Engine, InvalidArgument, NotFound
from store.sqlite import connection
from store.sqlite.maintenance import check as check_connection

FACTS = [
    "Alice moved to Paris to work at Google on search ranking",
    "Bob's sister Carol teaches piano in Lagos",
    "The PostgreSQL migration is scheduled for March",
    "prefers green tea over coffee in the morning",
    "Chen Wei recommended the novel 'The Three-Body Problem'",
]


def _fill(engine: Engine, user: str = "ana") -> list[str]:
    return [engine.add(text, user_id=user)[0].memory.id for text in FACTS]


@pytest.fixture(scope="module")
def filled_file(tmp_path_factory: pytest.TempPathFactory, embedder, nlp) -> Path:
    """A database holding ``FACTS``, written once per module (closing it checkpoints the WAL)."""
    from store import load_config

    path = tmp_path_factory.mktemp("filled") / "filled.db"
    with Engine(load_config(environ={}).replace("store", db_path=str(path)), embedder=embedder, nlp=nlp) as engine:
        _fill(engine)
    return path


@pytest.fixture
def filled(filled_file: Path, config, engine_factory) -> Iterator[Engine]:
    """An engine on a fresh copy of ``filled_file``, to damage at will."""
    shutil.copy(filled_file, config.database)
    with engine_factory(config) as engine:
        yield engine


def _snapshot(engine: Engine, user: str = "ana") -> list[tuple[str, str]]:
    return sorted((m.id, m.text) for m in engine.list(user_id=user, show_expired=True))


def _checks(engine: Engine, deep: bool = False) -> set[str]:
    return {violation.check for violation in engine.check(deep=deep)}


# --- check and repair ---------------------------------------------------------------------


def test_check_is_clean_on_a_fresh_and_a_used_database(engine: Engine) -> None:
    assert fullest_check(engine) == []
    ids = _fill(engine)
    engine.update(ids[0], text="Alice moved to Berlin to work at SAP", user_id="ana")
    engine.delete(ids[1], user_id="ana")
    engine.add("Alice moved to Berlin to work at SAP", user_id="bob")
    engine.delete_all(user_id="bob")
    assert fullest_check(engine) == []


# Each damage is SQL run behind the engine's back, with the check it must trip.
DAMAGE = {
    "memory_without_vector": "DELETE FROM memory_vectors WHERE memory_rowid = 1",
    "vector_without_memory": (
        "INSERT INTO memory_vectors(memory_rowid, embedding, user_id, agent_id, run_id) "
        "SELECT 999, embedding, 'ana', '', '' FROM memory_vectors WHERE memory_rowid = 1"
    ),
    "vector_scope": (  # vec0 cannot change a partition key in place: the vector is filed again
        "CREATE TEMP TABLE moved AS SELECT embedding FROM memory_vectors WHERE memory_rowid = 2; "
        "DELETE FROM memory_vectors WHERE memory_rowid = 2; "
        "INSERT INTO memory_vectors(memory_rowid, embedding, user_id, agent_id, run_id) "
        "SELECT 2, embedding, 'mallory', '', '' FROM moved; DROP TABLE moved"
    ),
    "terms_without_memory": (
        "PRAGMA foreign_keys = OFF; INSERT INTO memory_terms VALUES ('ana', 'ghost', 777, 1, 1); PRAGMA foreign_keys = ON"
    ),
    "terms_scope": "UPDATE memory_terms SET user_id = 'mallory' WHERE memory_rowid = 2",
    "keyword_users": "UPDATE keyword_users SET memories = memories + 1 WHERE user_id = 'ana'",
    "keyword_content": (  # one term of memory 4 replaced: same length, other words
        "UPDATE memory_terms SET term = 'something' WHERE memory_rowid = 4 "
        "AND term = (SELECT min(term) FROM memory_terms WHERE memory_rowid = 4)"
    ),
    "link_without_memory": (
        "PRAGMA foreign_keys = OFF; INSERT INTO memory_entities(memory_rowid, entity_id) "
        "SELECT 888, id FROM entities LIMIT 1; PRAGMA foreign_keys = ON"
    ),
    "link_without_entity": (
        "PRAGMA foreign_keys = OFF; INSERT INTO memory_entities VALUES (1, 888); PRAGMA foreign_keys = ON"
    ),
    "link_scope": "UPDATE entities SET user_id = 'mallory' WHERE id = (SELECT min(entity_id) FROM memory_entities)",
    "entity_without_links": (
        "INSERT INTO entities(user_id, text, normalized, entity_type) VALUES ('ana', 'Zed', 'zed', 'PERSON')"
    ),
    "entity_without_vector": "DELETE FROM entity_vectors WHERE entity_id = (SELECT min(id) FROM entities)",
    "entity_vector_without_entity": (
        "INSERT INTO entity_vectors(entity_id, embedding, user_id, agent_id, run_id) "
        "SELECT 999, embedding, 'ana', '', '' FROM entity_vectors LIMIT 1"
    ),
    "entity_vector_scope": (
        "CREATE TEMP TABLE moved AS SELECT entity_id, embedding FROM entity_vectors "
        "WHERE entity_id = (SELECT min(id) FROM entities); "
        "DELETE FROM entity_vectors WHERE entity_id = (SELECT entity_id FROM moved); "
        "INSERT INTO entity_vectors(entity_id, embedding, user_id, agent_id, run_id) "
        "SELECT entity_id, embedding, 'mallory', '', '' FROM moved; DROP TABLE moved"
    ),
}


@pytest.mark.only_on("sqlite")
@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_check_names_each_damage_and_repair_rebuilds_it(filled: Engine, name: str) -> None:
    engine = filled
    before = _snapshot(engine)
    execute(engine, DAMAGE[name])

    found = engine.check()
    assert name in {v.check for v in found}, found
    assert all(v.detail for v in found)

    report = engine.repair()
    assert report.remaining == []
    assert engine.check(deep=True) == []
    assert _snapshot(engine) == before  # repair never touches memories
    for text in FACTS:  # every signal works again: each fact finds itself first
        assert engine.search(text, user_id="ana", top_k=1)[0].memory.text == text


@pytest.mark.only_on("sqlite")
def test_deep_check_finds_memories_missing_their_entity_links_and_repair_relinks(engine: Engine) -> None:
    _fill(engine)
    execute(engine, "DELETE FROM memory_entities WHERE memory_rowid = 1")
    assert _checks(engine) == {"entity_without_links"}  # Alice, Paris and Google: no other fact names them
    assert "memory_without_links" in _checks(engine, deep=True)
    report = engine.repair()
    assert report.entity_links_rebuilt >= 1
    assert engine.check(deep=True) == []
    hit = engine.explain("Where does Alice work?", user_id="ana", top_k=1).hits[0]
    assert hit.memory.text == FACTS[0] and hit.details.entity_boost > 0


@pytest.mark.only_on("sqlite")
def test_repair_reports_what_it_did(engine: Engine) -> None:
    _fill(engine)
    assert engine.repair() == type(engine.repair())(0, False, 0, 0, [])
    execute(engine, DAMAGE["memory_without_vector"] + "; " + DAMAGE["terms_without_memory"] + "; " + DAMAGE["entity_without_links"])
    report = engine.repair()
    assert (report.vectors_rebuilt, report.fts_rebuilt, report.orphans_removed) == (1, True, 1)


@pytest.mark.only_on("sqlite")
def test_check_reports_a_foreign_database_and_a_damaged_file(tmp_path: Path, engine: Engine) -> None:
    foreign = connection.connect(tmp_path / "other.db")
    foreign.execute("CREATE TABLE notes(x)")
    assert [v.check for v in check_connection(foreign)] == ["schema"]
    foreign.close()

    _fill(engine)
    # enough pages that the damage lands inside a b-tree, not in free space
    execute(
        engine,
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) "
        "INSERT INTO history(memory_id, event, new_text, created_at) SELECT 'x', 'ADD', hex(randomblob(600)), 'now' FROM n"
    )
    execute(engine, "PRAGMA wal_checkpoint(TRUNCATE)")
    engine.close()
    damaged = tmp_path / "damaged.db"
    shutil.copy(engine.backend.path, damaged)
    with open(damaged, "r+b") as handle:
        handle.seek(4096 * 6)
        handle.write(b"\xde\xad\xbe\xef" * 2048)
    conn = apsw.Connection(str(damaged))
    connection.connection_sqlite_vec(conn)
    violations = check_connection(conn)
    assert violations and violations[0].check == "integrity", violations


@pytest.mark.only_on("sqlite")
def test_doctor_check_and_repair_from_the_command_line(engine: Engine, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from mcp_server.cli import cli

    _fill(engine)
    execute(engine, DAMAGE["memory_without_vector"] + "; " + DAMAGE["terms_without_memory"])
    run = functools.partial(CliRunner().invoke, cli, catch_exceptions=False)
    checked = run(["--db", str(engine.backend.path), "doctor", "--check"])
    assert checked.exit_code == 1
    assert "memory_without_vector: memory" in checked.output and "terms_without_memory: keyword" in checked.output
    repaired = run(["--db", str(engine.backend.path), "doctor", "--repair"])
    assert repaired.exit_code == 0 and '"vectors_rebuilt": 1' in repaired.output
    assert run(["--db", str(engine.backend.path), "doctor", "--check", "--deep"]).exit_code == 0
    copy = tmp_path / "cli-backup.db"
    assert run(["--db", str(engine.backend.path), "backup", str(copy)]).exit_code == 0
    assert run(["--db", str(copy), "doctor", "--check"]).exit_code == 0
    assert run(["--db", str(engine.backend.path), "backup", str(copy)]).exit_code == 1  # never overwrites


# --- backup -----------------------------------------------------------------------------------


@pytest.mark.only_on("sqlite")
def test_backup_restores_to_the_same_memories(engine: Engine, tmp_path: Path, embedder, nlp, config) -> None:
    _fill(engine)
    target = tmp_path / "backups" / "copy.db"
    engine.backup(target)
    assert not list(target.parent.glob("*.partial")) and not Path(f"{target}-wal").exists()

    with pytest.raises(InvalidArgument, match="already exists"):
        engine.backup(target)
    with pytest.raises(InvalidArgument, match="live database"):
        engine.backup(engine.backend.path)

    restored_path = tmp_path / "restored.db"
    shutil.copy(target, restored_path)  # restore = put the file where the config points
    with Engine(config.replace("store", db_path=str(restored_path)), embedder=embedder, nlp=nlp) as restored:
        assert restored.check(deep=True) == []
        assert _snapshot(restored) == _snapshot(engine)
        for text in FACTS:
            assert [h.memory.id for h in restored.search(text, user_id="ana")] == [
                h.memory.id for h in engine.search(text, user_id="ana")
            ]


# --- processes ----------------------------------------------------------------------------------


@pytest.mark.only_on("sqlite")
def test_backup_while_another_process_writes(
    fork_server: ForkServer, engine: Engine, tmp_path: Path, embedder, nlp, config
) -> None:
    _fill(engine)
    worker = fork_server.start("write", config.database, "busy", 40, 7)
    fork_server.expect("ack", timeout=120)
    copies = []
    for n in range(3):
        copies.append(tmp_path / f"online-{n}.db")
        engine.backup(copies[-1])
        fork_server.drain(0.3)
    fork_server.wait_dead(worker, timeout=300)
    assert worker.status == 0, fork_server.stderr()
    for copy in copies:
        with Engine(config.replace("store", db_path=str(copy)), embedder=embedder, nlp=nlp) as restored:
            assert restored.check() == []
            assert _snapshot(restored) == _snapshot(engine)
            busy = {m.id for m in restored.list(user_id="busy", limit=100)}
            assert busy <= set(worker.acked)  # a consistent prefix of the writer's work


@pytest.mark.only_on("sqlite")
def test_crash_consistency_under_random_sigkill(fork_server: ForkServer, config, embedder, nlp) -> None:
    stats = crash_cycles(fork_server, config, embedder, nlp, kills=24, seed=5)
    print(f"\ncrash: {stats}")
    assert stats.kills >= 20 and stats.acknowledged > 0
    assert stats.kills_inside_transaction > 0  # some kills did land mid-transaction


def test_several_processes_share_one_file_without_losing_writes(
    fork_server: ForkServer, config, embedder, nlp
) -> None:
    stats = concurrent_writers(fork_server, config, embedder, nlp, processes=4, writes=50)
    print(f"\nwriters: {stats}")
    assert stats.stored == stats.acknowledged == 4 * 50


# --- hostile input (hypothesis) ---------------------------------------------------------------

STRESS = os.environ.get("TRIMEM_STRESS") == "1"
HOSTILE_EXAMPLES = 10_000 if STRESS else 1_000
ISOLATION_RUNS = 400 if STRESS else 40
ISOLATION_STEPS = 25 if STRESS else 12

HOSTILE_STRINGS = [
    "", " ", "\t\n", "\x00", "a\x00b", "\ud800", "lone \udfff surrogate", "\u202eevil\u202c text", "\ufeff\u200b",
    "e\u0301\u0302\u0303\u0304" * 40, "日本語のテキストを覚えて", "👩‍👩‍👧‍👦 🏳️‍🌈 🇺🇳", "مرحبا بالعالم", "NEAR(alice bob, 2)",
    '"unbalanced quote', "a* OR b* AND NOT c", "text_lemmatized:alice", "^alice", "{alice bob}", "-", "*", "AND",
    "'; DROP TABLE memories; --", "' OR '1'='1", "%_\\%", "memory_fts MATCH 'x'", "$.a[0]", "?1 :name @p",
    "x" * 20_001, "alice " * 3_333, "\uffff\U0010ffff",
]
TEXT = st.one_of(
    st.sampled_from(HOSTILE_STRINGS),
    st.text(max_size=60),
    st.text(st.characters(codec=None, categories=["Cs", "Cc", "Mn", "Lo", "So", "Zs", "Cf"]), max_size=30),
)
NUMBER = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.integers(-3, 120), st.floats(), st.booleans()
)
WRONG = st.one_of(
    st.none(), NUMBER, st.binary(max_size=8), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
)
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), NUMBER, TEXT),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)


def _nested(depth: int, key: str) -> dict:
    value: dict = {"category": "x"}
    for _ in range(depth):
        value = {key: [value]} if key in ("AND", "OR", "$or") else {key: value}
    return value


FILTER_KEYS = st.sampled_from(["AND", "OR", "NOT", "$and", "$or", "$not", "$regex", "category", "user_id", "a.b", "\x00", "", " "])
OPERATOR = st.dictionaries(
    st.sampled_from(["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "icontains", "regex", ""]), JSON, max_size=3
)
FILTERS = st.one_of(
    st.none(),
    st.none(),
    st.fixed_dictionaries({"category": TEXT}),
    st.dictionaries(
        st.one_of(FILTER_KEYS, TEXT),
        st.one_of(JSON, OPERATOR, st.lists(st.dictionaries(FILTER_KEYS, JSON, max_size=2), max_size=3)),
        max_size=4,
    ),
    st.builds(_nested, st.integers(1, 3_000), st.sampled_from(["AND", "OR", "NOT", "category", "$or"])),
    st.integers(0, 5_000).map(lambda n: {f"k{i}": i for i in range(n)}),
    WRONG,
)
METADATA = st.one_of(
    st.none(),
    st.none(),
    st.dictionaries(TEXT, JSON, max_size=5),
    st.dictionaries(TEXT, JSON, max_size=5),
    st.builds(_nested, st.integers(1, 3_000), st.just("deep")),
    st.integers(0, 3_000).map(lambda n: {f"key{i}": "v" * 10 for i in range(n)}),
    st.just({"user_id": "mallory", "note": "scope keys in metadata are ignored"}),
    st.just({1: "non-string key"}), st.just({"nan": float("nan")}), st.just({"set": {1, 2}}),
    WRONG,
)
SCOPE = st.one_of(  # mostly valid, so the other hostile arguments reach the database
    st.just({"user_id": "ana"}),
    st.just({"user_id": "ana", "agent_id": "helper", "run_id": "r1"}),
    st.just({"agent_id": "helper"}),
    st.fixed_dictionaries({}, optional={key: st.one_of(TEXT, WRONG) for key in ("user_id", "agent_id", "run_id")}),
)
MESSAGES = st.one_of(
    st.lists(
        st.fixed_dictionaries(
            {
                "role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]), WRONG),
                "content": st.one_of(TEXT, TEXT, WRONG),
            },
            optional={"name": st.one_of(st.just("ana"), TEXT, WRONG)},
        ),
        max_size=4,
    ),
    st.lists(st.one_of(WRONG, st.fixed_dictionaries({}, optional={"role": st.just("user"), "content": TEXT})), max_size=3),
)

SETTINGS = {"deadline": None, "suppress_health_check": list(HealthCheck), "derandomize": True}


def _hostile_calls(engine: Engine, known: list[str]) -> dict[str, dict[str, tuple[st.SearchStrategy, st.SearchStrategy]]]:
    """For each operation, each argument as (hostile strategy, ordinary strategy)."""
    scope = (SCOPE, st.just({"user_id": "ana"}))
    text = (st.one_of(TEXT, WRONG), st.sampled_from(FACTS).map(lambda t: f"{t} again"))
    memory_id = (st.one_of(TEXT, WRONG, st.sampled_from(known)), st.sampled_from(known))
    filters = (FILTERS, st.none())
    query = (st.one_of(TEXT, WRONG), st.sampled_from(["Where does Alice work?", "piano"]))
    return {
        "add": {"content": text, "scope": scope, "metadata": (METADATA, st.none()),
                "expiration_date": (st.one_of(st.just("2023-02-30"), st.just("2031-02-03"), TEXT, WRONG), st.none())},
        "add_messages": {"content": (MESSAGES, st.just([{"role": "user", "content": "I keep bees in Lyon"}])), "scope": scope},
        "search": {"query": query, "scope": scope, "top_k": (NUMBER, st.none()), "threshold": (NUMBER, st.none()),
                   "filters": filters, "show_expired": (WRONG, st.booleans()), "explain": (WRONG, st.booleans())},
        "explain": {"query": query, "scope": scope, "filters": filters},
        "list": {"scope": scope, "filters": filters, "limit": (NUMBER, st.just(100)), "offset": (NUMBER, st.just(0))},
        "get": {"memory_id": memory_id, "scope": scope},
        "update": {"memory_id": memory_id, "scope": scope, "text": (st.one_of(TEXT, WRONG), st.none()),
                   "metadata": (METADATA, st.just({"edited": True}))},
        "delete": {"memory_id": memory_id, "scope": scope},
        "history": {"memory_id": memory_id, "scope": scope},
    }


def _invoke(engine: Engine, op: str, args: dict) -> object:
    scope = args.pop("scope")
    if op in ("add", "add_messages"):
        return engine.add(args.pop("content"), **args, **scope)
    if op in ("search", "explain"):
        return getattr(engine, op)(args.pop("query"), **args, **scope)
    if op == "list":
        return engine.list(**args, **scope)
    return getattr(engine, op)(args.pop("memory_id"), **args, **scope)


def test_hostile_input_to_every_engine_call_is_served_or_refused_clearly(engine: Engine) -> None:
    known = _fill(engine)
    calls = _hostile_calls(engine, known)
    outcomes: dict[str, int] = {}

    @settings(max_examples=HOSTILE_EXAMPLES, **SETTINGS)
    @given(data=st.data())
    def call(data: st.DataObject) -> None:
        op = data.draw(st.sampled_from(sorted(calls)), label="operation")
        target = data.draw(st.sampled_from(sorted(calls[op])), label="hostile argument")
        args = {
            name: data.draw(hostile if name == target else ordinary, label=name)
            for name, (hostile, ordinary) in calls[op].items()
        }
        try:
            result = _invoke(engine, op, args)
            outcome = "ok"
        except (InvalidArgument, NotFound) as exc:
            assert str(exc), f"{type(exc).__name__} without a message"
            outcome = type(exc).__name__
        else:
            if op.startswith("add"):
                known.extend(added.memory.id for added in result)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        assert engine.check() == []

    call()
    print(f"\nhostile engine calls ({HOSTILE_EXAMPLES} examples): {dict(sorted(outcomes.items()))}")
    assert fullest_check(engine) == []
    sentinel = "the sentinel fact about Zanzibar survived the fuzzing"  # the engine still serves
    (added,) = engine.add(sentinel, user_id="ana")
    assert engine.search(sentinel, user_id="ana", top_k=1)[0].memory.id == added.memory.id


# --- scope isolation (hypothesis) ---------------------------------------------------------------

READ_SCOPES = st.fixed_dictionaries(
    {}, optional={"user_id": st.sampled_from(["u1", "u2"]), "agent_id": st.sampled_from(["a1", "a2"]), "run_id": st.just("r1")}
).filter(bool)
WORDS = ["Alice", "Bob", "Paris", "Lagos", "piano", "budget", "coffee", "Google", "the migration", "'quoted'"]


def _inside(memory, scope: dict[str, str]) -> bool:
    """The memory lies in the read scope: it has every id the read names."""
    return all(getattr(memory, key) == value for key, value in scope.items())


def _visible(written: dict[str, str], scope: dict[str, str]) -> bool:
    """A memory written with scope ``written`` lies in the read scope."""
    return all(written.get(key) == value for key, value in scope.items())


@pytest.mark.parametrize("pool", ["semantic", "union"])
def test_no_read_returns_another_scopes_memory(pool: str, another_store, embedder, nlp) -> None:
    runs = iter(range(10**6))
    reads = {"n": 0, "with_results": 0}

    class Isolation(RuleBasedStateMachine):
        """Random adds, updates and deletes in random scopes; every read is checked against its scope."""

        def __init__(self) -> None:
            super().__init__()
            cfg = another_store(f"isolation-{next(runs)}").replace("search", candidate_pool=pool, threshold=0.0)
            self.engine = Engine(cfg, embedder=embedder, nlp=nlp)
            self.memories: dict[str, dict[str, str]] = {}  # id -> the scope it was written with

        def teardown(self) -> None:
            assert self.engine.check() == []
            self.engine.close()

        def _check(self, memories, scope: dict[str, str]) -> None:
            reads["n"] += 1
            reads["with_results"] += bool(memories)
            for memory in memories:
                assert _inside(memory, scope), f"{memory} leaked into a read of {scope}"

        @rule(scope=READ_SCOPES, words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
        def add(self, scope: dict[str, str], words: list[str]) -> None:
            for added in self.engine.add(" and ".join(words) + " came up", **scope):
                self.memories[added.memory.id] = scope

        @rule(scope=READ_SCOPES, words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3), pick=st.randoms())
        def search_and_explain(self, scope: dict[str, str], words: list[str], pick) -> None:
            explanation = self.engine.explain(" ".join(words), top_k=100, **scope)
            self._check([hit.memory for hit in explanation.hits], scope)
            assert all(_visible(self.memories[d.id], scope) for d in explanation.dropped)
            self._check([hit.memory for hit in self.engine.search(" ".join(words), top_k=100, **scope)], scope)

        @rule(scope=READ_SCOPES)
        def list_(self, scope: dict[str, str]) -> None:
            self._check(self.engine.list(show_expired=True, **scope), scope)

        @rule(scope=READ_SCOPES, pick=st.randoms())
        def get_and_history_by_any_id(self, scope: dict[str, str], pick) -> None:
            if not self.memories:
                return
            memory_id = pick.choice(sorted(self.memories))
            written = self.memories[memory_id]
            visible = _visible(written, scope)
            try:
                memory = self.engine.get(memory_id, **scope)
                self._check([memory], scope)
                events = self.engine.history(memory_id, **scope)
                assert visible and {e.memory_id for e in events} == {memory_id}
            except NotFound:
                assert not visible, f"memory {memory_id} of {self.memories[memory_id]} hidden from {scope}"

        @rule(scope=READ_SCOPES, pick=st.randoms(), words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
        def update_or_delete_by_any_id(self, scope: dict[str, str], pick, words: list[str]) -> None:
            if not self.memories:
                return
            memory_id = pick.choice(sorted(self.memories))
            written = self.memories[memory_id]
            visible = _visible(written, scope)
            try:
                if pick.random() < 0.5:
                    self._check([self.engine.update(memory_id, text=" ".join(words) + " changed", **scope)], scope)
                else:
                    self._check([self.engine.delete(memory_id, **scope)], scope)
                    del self.memories[memory_id]
            except NotFound:
                assert not visible, f"memory {memory_id} of {written} hidden from {scope}"
            except InvalidArgument as exc:
                assert visible and "already stored" in str(exc)
            else:
                assert visible, f"memory {memory_id} of {written} written through {scope}"

    run_state_machine_as_test(
        Isolation, settings=settings(max_examples=ISOLATION_RUNS, stateful_step_count=ISOLATION_STEPS, **SETTINGS)
    )
    assert reads["with_results"] > 0, "no read returned anything, so no read was checked"
    print(f"\nscope isolation ({pool}): {ISOLATION_RUNS} runs x ≤{ISOLATION_STEPS} steps, {reads['n']} checked reads")
