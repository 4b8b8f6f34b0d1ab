"""Issue 9, engine level: snapshots, transactions, concurrent readers, model checks, orphans.

Each test here failed on main before the fix it names.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from store import Config, Engine, TrimemError
from store.sqlite import connection

# --- 2. a search is one snapshot --------------------------------------------------------------------------------


def _trace_connections(monkeypatch: pytest.MonkeyPatch, tracer: Callable) -> None:
    """Every connection opened from now on runs ``tracer`` before each statement (apsw exec trace)."""
    original = connection.connect

    def traced(path: Path, **options: bool) -> apsw.Connection:
        conn = original(path, **options)
        conn.exec_trace = tracer
        return conn

    monkeypatch.setattr(connection, "connect", traced)


@pytest.mark.parametrize(
    "step",
    [
        r"FROM memories WHERE rowid IN",  # the rows of the KNN's hits (memories_by_rowid)
        r"SELECT id, text FROM entities WHERE id IN",  # the texts of the entity KNN's hits (knn_entities)
    ],
)
@pytest.mark.only_on("sqlite")
def test_a_search_sees_one_snapshot_while_another_connection_deletes(
    engine: Engine, engine_factory: Callable[[Config], Engine], config: Config,
    monkeypatch: pytest.MonkeyPatch, step: str,
) -> None:
    engine.add("Ana moved to Lisbon in 2023", user_id="ana")
    engine.add("Ana's sister Marta lives in Madrid", user_id="ana")
    other = engine_factory(config)  # another connection to the same file, as another process would have
    fired = []

    def delete_everything_before(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        if not fired and re.search(step, sql):
            fired.append(other.delete_all(user_id="ana"))
        return True

    _trace_connections(monkeypatch, delete_everything_before)
    engine.close()  # reopen so the engine's connections are traced
    with engine_factory(config) as traced:
        hits = traced.search("Where does Ana live?", user_id="ana")
    other.close()
    assert fired == [2], "the delete did not run between the search's statements"
    assert "Ana moved to Lisbon in 2023" in [hit.memory.text for hit in hits]  # the snapshot still had it


# --- 3. write transactions roll back only what is open, and never hide the cause ----------------------------------


class FailingCommit:
    """A connection whose COMMIT fails once, as on a full disk or a busy WAL (SQLite keeps the
    transaction open after a failed COMMIT)."""

    def __init__(self, conn: apsw.Connection, error: apsw.Error) -> None:
        self.conn, self.error = conn, error

    def execute(self, sql: str, *args: object) -> apsw.Cursor:
        if sql == "COMMIT" and self.error is not None:
            error, self.error = self.error, None
            raise error
        return self.conn.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.conn, name)


def _scratch(tmp_path: Path) -> apsw.Connection:
    conn = connection.connect(tmp_path / "scratch.db")
    conn.execute("CREATE TABLE t (x)")
    return conn


def test_a_failed_commit_is_rolled_back_and_the_next_write_works(tmp_path: Path) -> None:
    conn = _scratch(tmp_path)
    failing = FailingCommit(conn, apsw.IOError("disk I/O error"))
    with pytest.raises(TrimemError, match="disk I/O error") as caught, connection.write_transaction(failing):
        conn.execute("INSERT INTO t VALUES (1)")
    assert isinstance(caught.value.__cause__, apsw.IOError)
    assert not conn.in_transaction
    with connection.write_transaction(conn):  # on main: "cannot start a transaction within a transaction"
        conn.execute("INSERT INTO t VALUES (2)")
    assert conn.execute("SELECT x FROM t").fetchall() == [(2,)]


def test_when_sqlite_already_rolled_back_the_real_error_surfaces(tmp_path: Path) -> None:
    conn = _scratch(tmp_path)
    with pytest.raises(TrimemError, match="disk holding .* is full") as caught, connection.write_transaction(conn):
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("ROLLBACK")  # what SQLite does by itself on SQLITE_FULL or SQLITE_IOERR
        raise apsw.FullError("database or disk is full")
    assert isinstance(caught.value.__cause__, apsw.FullError)  # on main: "cannot rollback - no transaction"
    assert not conn.in_transaction and conn.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_other_errors_inside_a_write_roll_back_and_propagate_unchanged(tmp_path: Path) -> None:
    conn = _scratch(tmp_path)
    with pytest.raises(KeyError), connection.write_transaction(conn):
        conn.execute("INSERT INTO t VALUES (1)")
        raise KeyError("boom")
    assert not conn.in_transaction and conn.execute("SELECT count(*) FROM t").fetchone() == (0,)


# --- 4. reads never wait for a writer ---------------------------------------------------------------------------

HOLD_WRITE_LOCK = """
import sys, time, apsw
conn = apsw.Connection(sys.argv[1])
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()  # until the test closes our stdin
conn.execute("ROLLBACK")
"""


@pytest.mark.only_on("sqlite")
def test_a_search_answers_while_another_process_holds_the_write_lock(engine: Engine, db_path: Path) -> None:
    engine.add("Ana moved to Lisbon in 2023", user_id="ana")
    engine.search("warm the models", user_id="ana")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_WRITE_LOCK, str(db_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        writer = threading.Thread(target=engine.add, args=("Ana's sister Marta lives in Madrid",),
                                  kwargs={"user_id": "ana"})
        writer.start()  # runs its models, then waits for the other process's lock, holding ours
        time.sleep(2.0)
        assert writer.is_alive(), "the write should still be waiting for the other process"
        started = time.monotonic()
        hits = engine.search("Where does Ana live?", user_id="ana")
        listed = engine.list(user_id="ana")
        elapsed = time.monotonic() - started
        assert [hit.memory.text for hit in hits][:1] == ["Ana moved to Lisbon in 2023"]
        assert len(listed) == 1
        assert elapsed < 5.0, f"reads waited {elapsed:.1f}s behind a write"  # main: busy_timeout (10 s) or more
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    writer.join(timeout=60)
    assert next(m.text for m in engine.list(user_id="ana")) == "Ana's sister Marta lives in Madrid"


# --- 5. another model of the same dimension: tests/test_engine.py::test_a_database_built_with_another_model_is_refused


# --- 12. orphaned entities: one pass per transaction ------------------------------------------------------------


@pytest.mark.only_on("sqlite")
def test_delete_all_scans_for_orphan_entities_once(engine: Engine) -> None:
    for n in range(6):
        engine.add(f"Ana met Marta number {n} in Madrid and Lisbon", user_id="ana")
    scans = []

    def count(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        if "NOT EXISTS (SELECT 1 FROM memory_entities" in sql:
            scans.append(sql)
        return True

    engine.backend._conn.exec_trace = count
    assert engine.delete_all(user_id="ana") == 6
    engine.backend._conn.exec_trace = None
    assert len(scans) == 1  # main: two per deleted memory
    assert engine.status()["counts"]["entities"] == 0


# --- 6. quoted values are capped ----------------------------------------------------------------------------------


def test_every_quoted_value_is_capped_at_80_characters() -> None:
    from store.errors import InvalidArgument, shown
    from store.validation import check_id

    assert shown("x" * 1000) == repr("x" * 80) + "…"
    assert shown({"k": "v" * 500}).endswith("…") and len(shown({"k": "v" * 500})) == 81
    with pytest.raises(InvalidArgument) as spaced:
        check_id("a b" * 80, "user_id")  # 240 characters: under the length limit, so the message quotes it
    assert str(spaced.value) == (
        f"user_id={shown('a b' * 80)} contains whitespace; use an id without spaces, e.g. 'ana_lopez'"
    )
    assert len(str(spaced.value)) < 200


# --- 7. bad files and OS errors: one line, non-zero exit, file unchanged -------------------------------------------


def _cli(arguments: list[str], engine_factory: Callable[[Config], Engine], monkeypatch: pytest.MonkeyPatch):
    from click.testing import CliRunner

    from mcp_server.cli import cli

    monkeypatch.setattr("store.engine.Engine", engine_factory)
    return CliRunner().invoke(cli, arguments)


def _refused(result) -> str:
    """The one-line message of a command that must fail without a traceback."""
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # an exit with a message, no crash
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


BAD_FILES = {
    "text file": (lambda p: p.write_text("just some notes\n" * 100), "is not an SQLite database"),
    "random bytes": (lambda p: p.write_bytes(bytes(range(256)) * 64), "is not an SQLite database"),
    "another application's SQLite file": (
        lambda p: apsw.Connection(str(p)).execute("CREATE TABLE invoices (n); INSERT INTO invoices VALUES (1)"),
        "another application",
    ),
}


@pytest.mark.parametrize("kind", BAD_FILES)
@pytest.mark.parametrize("command", [["list"], ["doctor", "--check"], ["add", "a fact"]])
def test_a_file_that_is_not_trimems_is_refused_and_left_alone(
    tmp_path: Path, engine_factory: Callable[[Config], Engine], monkeypatch: pytest.MonkeyPatch,
    kind: str, command: list[str],
) -> None:
    make, expected = BAD_FILES[kind]
    path = tmp_path / "notes.db"
    make(path)
    before = path.read_bytes()
    line = _refused(_cli(["--db", str(path), *command], engine_factory, monkeypatch))
    assert expected in line and str(path) in line
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]  # no -wal or -shm left beside it


def test_a_database_path_under_a_file_is_refused(
    tmp_path: Path, engine_factory: Callable[[Config], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("x")
    line = _refused(_cli(["--db", str(tmp_path / "file" / "memories.db"), "list"], engine_factory, monkeypatch))
    assert line == (
        f"Error: cannot put the database at {tmp_path / 'file' / 'memories.db'}: {tmp_path / 'file'} is a file, "
        "not a folder; choose a path whose folders exist or can be created"
    )


@pytest.mark.only_on("sqlite")
def test_backup_into_a_folder_that_is_a_file_is_refused(
    engine: Engine, db_path: Path, tmp_path: Path, engine_factory: Callable[[Config], Engine],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine.add("Ana likes tea", user_id="ana")
    engine.close()
    (tmp_path / "file").write_text("x")
    line = _refused(_cli(["--db", str(db_path), "backup", str(tmp_path / "file" / "copy.db")], engine_factory,
                         monkeypatch))
    assert line == (
        f"Error: cannot write the backup {tmp_path / 'file' / 'copy.db'}: {tmp_path / 'file'} is a file, not a "
        "folder; choose a path in a folder you can write"
    )


def test_an_offset_beyond_sqlite_integers_is_refused(
    db_path: Path, engine_factory: Callable[[Config], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _cli(["--db", str(db_path), "list", "--offset", str(2**63)], engine_factory, monkeypatch)
    assert result.exit_code == 2 and "Traceback" not in result.output  # a usage error, before the database opens
    assert result.output.strip().splitlines()[-1] == (
        "Error: Invalid value for '--offset': 9223372036854775808 is not in the range 0<=x<=9223372036854775807."
    )


READ_ONLY_COMMANDS = [
    (["list", "--user-id", "ana"], 0, "Ana likes tea"),
    (["doctor", "--check"], 0, "ok: no problems found"),
    (["doctor"], 0, '"read_only": true'),
    (["backup", "{folder}/copy.db"], 0, "backed up"),
    (["add", "--user-id", "ana", "Ana likes coffee"], 1, "is read-only, so nothing can be added"),
]


def _without_root_override() -> None:
    """In the child, before exec: drop CAP_DAC_OVERRIDE, so root obeys file modes like any user."""
    import ctypes

    pr_capbset_drop, cap_dac_override = 24, 1
    if ctypes.CDLL(None, use_errno=True).prctl(pr_capbset_drop, cap_dac_override, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.mark.only_on("sqlite")
def test_a_read_only_database_is_read_and_never_written(engine: Engine, db_path: Path, tmp_path: Path) -> None:
    import os
    import shutil

    engine.add("Ana likes tea", user_id="ana")
    engine.close()
    folder = tmp_path / "ro"
    folder.mkdir()
    database = folder / "memories.db"
    shutil.copy(db_path, database)
    os.chmod(database, 0o444)
    before = database.read_bytes()
    as_user = {"preexec_fn": _without_root_override} if os.geteuid() == 0 else {}
    trimem = Path(sys.executable).with_name("trimem")
    for command, status, expected in READ_ONLY_COMMANDS:
        argv = [str(trimem), "--log-level", "WARNING", "--db", str(database),
                *(a.format(folder=folder) for a in command)]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=folder,
                                env={**os.environ, "TRIMEM_HOME": str(folder / "home")}, **as_user, check=False)
        assert result.returncode == status, (command, result.stderr[-2000:])
        assert expected in result.stdout + result.stderr, (command, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr, result.stderr
        if status:
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert database.read_bytes() == before


# --- 8. every setting is checked at start-up ------------------------------------------------------------------------

BAD_SETTINGS = [
    ({"TRIMEM_MAX_RESULT_CHARS": "-5"},
     ("configuration [server] max_result_chars = -5 is not allowed: it must be a whole number of at least 1 "
     "(set it in a --config file or TRIMEM_MAX_RESULT_CHARS)")),
    ({"TRIMEM_USER_ID": ""},
     ("configuration [server] user_id = '' is not allowed: it must be a non-empty id without spaces, "
     "e.g. 'ana_lopez' (set it in a --config file or TRIMEM_USER_ID)")),
    ({"TRIMEM_LOG_LEVEL": "LOUD"},
     ("configuration [server] log_level = 'LOUD' is not allowed: use one of DEBUG, INFO, WARNING, ERROR, "
     "CRITICAL (set it in a --config file or TRIMEM_LOG_LEVEL)")),
    ({"TRIMEM_INFERENCE_THREADS": "0"}, "[store] inference_threads = 0 is not allowed"),
    ({"TRIMEM_EMBEDDING_BACKEND": "cuda"}, "[store] embedding_backend = 'cuda' is not allowed: use one of onnx, onnx-int8, torch"),
    ({"TRIMEM_THRESHOLD": "nan"}, "[search] threshold = nan is not allowed"),
    ({"TRIMEM_USER_ID": "ana lopez"}, "[server] user_id = 'ana lopez' is not allowed"),
    ({"TRIMEM_ENTITY_MATCH": "some"}, "[search] entity_match = 'some' is not allowed: use one of all, best, names"),
    ({"TRIMEM_KEYWORD_CONTEXT_SHARE": "half"},
     "[search] keyword_context_share = 'half' is not allowed: use one of raw, score"),
    ({"TRIMEM_QUESTION_KEYWORDS": "1.5"},
     "[search] question_keywords = 1.5 is not allowed: it must be between 0 and 1; 1 turns it off"),
]


@pytest.mark.parametrize(("environ", "message"), BAD_SETTINGS, ids=[next(iter(e)) for e, _ in BAD_SETTINGS])
def test_a_bad_setting_stops_start_up_with_its_key_value_and_what_is_allowed(
    environ: dict[str, str], message: str, db_path: Path, engine_factory: Callable[[Config], Engine],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    for command in (["list"], ["serve"]):
        line = _refused(_cli(["--db", str(db_path), *command], engine_factory, monkeypatch))
        assert message in line


def test_a_config_file_value_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    from store import InvalidArgument, load_config

    override = tmp_path / "trimem.toml"
    override.write_text('[server]\nmax_result_chars = "lots"\n')
    refused = r"\[server\] max_result_chars = 'lots' is not allowed: it must be of type int, not str"
    with pytest.raises(InvalidArgument, match=refused):
        load_config(override, environ={})


# --- 10. scopes: the default user whenever user_id is absent ------------------------------------------------------

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_server.call_scope import default_scope, named_scope
from store import InvalidArgument

USERS, AGENTS, RUNS = ("default", "ana", "bob"), ("", "planner"), ("", "r1")


@pytest.fixture
def scoped(engine: Engine) -> Engine:
    """One memory in every combination of user, agent and run ('' = not set)."""
    for user in USERS:
        for agent in AGENTS:
            for run in RUNS:
                engine.add(f"note of {user}/{agent or '-'}/{run or '-'}", user_id=user,
                           agent_id=agent or None, run_id=run or None)
    return engine


def _expected(user: str | None, agent: str | None, run: str | None) -> set[str]:
    return {
        f"note of {u}/{a or '-'}/{r or '-'}"
        for u in USERS for a in AGENTS for r in RUNS
        if u == (user or "default") and (agent is None or a == agent) and (run is None or r == run)
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    user=st.sampled_from([None, "default", "ana", "bob", "zed"]),
    agent=st.sampled_from([None, "planner", "other"]),
    run=st.sampled_from([None, "r1", "r2"]),
)
def test_every_call_reaches_exactly_its_users_scope(
    scoped: Engine, config: Config, user: str | None, agent: str | None, run: str | None
) -> None:
    scope = default_scope(config, user, agent, run)
    expected = _expected(user, agent, run)
    assert {m.text for m in scoped.list(**scope)} == expected
    hits = scoped.search("note", **scope, threshold=0.0, top_k=100)
    assert {hit.memory.text for hit in hits} <= expected
    if user is None and agent is None and run is None:
        with pytest.raises(InvalidArgument, match="name a scope"):
            named_scope(config, user, agent, run)
    else:
        assert named_scope(config, user, agent, run) == scope


@pytest.mark.parametrize(
    ("user", "agent", "run"), [(None, "planner", None), (None, None, "r1"), ("ana", "planner", None)]
)
def test_cli_delete_all_follows_the_same_rule(
    scoped: Engine, db_arg: str, engine_factory: Callable[[Config], Engine], monkeypatch: pytest.MonkeyPatch,
    user: str | None, agent: str | None, run: str | None,
) -> None:
    options = [f"--{k}-id={v}" for k, v in (("user", user), ("agent", agent), ("run", run)) if v]
    result = _cli(["--db", db_arg, "delete-all", "--yes", *options], engine_factory, monkeypatch)
    assert result.exit_code == 0, result.output
    everything = _expected("default", None, None) | _expected("ana", None, None) | _expected("bob", None, None)
    remaining = {m.text for u in USERS for m in scoped.list(user_id=u)}
    assert remaining == everything - _expected(user, agent, run)  # main: every user's planner notes went


# --- 11. expired memories are skipped inside each signal ---------------------------------------------------------


def test_expired_memories_take_no_slot_and_no_share_of_the_denominator(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datetime as dt

    from store.engine import MemoryInput

    today = dt.datetime.now(dt.UTC).date()
    expired = [MemoryInput(f"Ana's parking permit number {n} for the garage is valid") for n in range(65)]
    engine.add_many(expired, user_id="ana", expiration_date=today.isoformat())
    engine.add("Ana may leave her car in the office garage", user_id="ana")
    monkeypatch.setattr("store.clock.today", lambda: (today + dt.timedelta(days=1)).isoformat())

    explained = engine.explain("parking permit", user_id="ana", top_k=1, threshold=0.0)
    assert [hit.memory.text for hit in explained.hits] == ["Ana may leave her car in the office garage"]  # main: []
    assert "bm25" not in explained.analysis.signals_active  # main: the expired keyword hits counted
    assert explained.analysis.max_possible_score == 1.0
    assert {d.reason for d in explained.dropped} == {"expired"}
    assert len(explained.dropped) == 60  # the nearest of them, as the unfiltered over-fetch sees them
    everything = engine.search("parking permit", user_id="ana", top_k=1, threshold=0.0, show_expired=True)
    assert "parking permit" in everything[0].memory.text


# --- stale promises found in review --------------------------------------------------------------------------------


def test_timestamps_always_carry_six_digits_of_microseconds(monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as dt

    from store import clock

    class OnTheSecond(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime(2026, 12, 2, 16, 0, 0, 0, tzinfo=tz)

    monkeypatch.setattr(clock.dt, "datetime", OnTheSecond)
    assert clock.now() == "2026-12-02T16:00:00.000000+00:00"  # main: "2026-12-02T16:00:00+00:00"
