"""``trimem doctor --check`` offers what the backend can do and refuses the rest in one line:
``--deep`` needs the ``deep_check`` capability, and a failed check suggests ``--repair`` only
where the ``repair`` capability exists (``store.backend.CAPABILITIES``). Both backends, through
the real CLI on a real store.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

from mcp_server.cli import cli
from store import Config, Engine
from store.backend import WAYS_AROUND, Unsupported


@pytest.fixture
def doctor(db_arg: str, engine_factory: Callable[[Config], Engine],
           monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """``doctor(*options)``: ``trimem --db <the test's store> doctor OPTIONS`` in process, with the session's models."""
    monkeypatch.setattr("store.engine.Engine", engine_factory)
    return lambda *options: CliRunner().invoke(cli, ["--db", db_arg, "doctor", *options])


def unlink_every_entity(config: Config, engine: Engine) -> None:
    """Damage behind the engine's back that both backends' checks find: entities left linked to no memory."""
    if config.store.database_url:
        import psycopg

        with psycopg.connect(config.store.database_url, autocommit=True) as conn:
            conn.execute("DELETE FROM memory_entities")
    else:
        from sqlite_files import execute

        execute(engine, "DELETE FROM memory_entities")


def test_a_deep_check_runs_where_the_backend_can_and_is_refused_in_one_line_where_not(
    doctor: Callable[..., Result], config: Config, engine: Engine
) -> None:
    engine.add("Ana works at Globex in Lisbon", user_id="ana")
    deep = doctor("--check", "--deep")
    if not config.store.database_url:  # SQLite runs the entity analysis again
        assert deep.exit_code == 0 and deep.stdout == "ok: no problems found\n"
        return
    refusal = f"a deep check is not available on {engine.location}: {WAYS_AROUND['deep_check']}"
    assert deep.exit_code == 1 and deep.output == f"Error: {refusal}\n"  # one line, no traceback
    with pytest.raises(Unsupported, match="^a deep check is not available on "):
        engine.check(deep=True)
    assert doctor("--check").stdout == "ok: no problems found\n"  # the check it has still runs


def test_a_failed_check_suggests_repair_only_where_the_backend_can_repair(
    doctor: Callable[..., Result], config: Config, engine: Engine
) -> None:
    engine.add("Ana works at Globex in Lisbon", user_id="ana")
    unlink_every_entity(config, engine)
    checked = doctor("--check")
    assert checked.exit_code == 1 and "Traceback" not in checked.output
    *problems, last = checked.output.splitlines()
    assert problems and last.startswith(f"Error: {len(problems)} problem(s) found; ")
    if not config.store.database_url:  # SQLite rebuilds derived rows
        assert last.endswith("; `trimem doctor --repair` fixes derived rows")
        assert doctor("--repair").exit_code == 0 and engine.check() == []
    else:
        assert "--repair" not in checked.output and last.endswith(f"; {WAYS_AROUND['repair']}")
