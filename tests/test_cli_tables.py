"""What a person at a terminal reads from ``trimem``: the real command in a subprocess, its
stdout on a pseudo-terminal of a chosen width (piped, it prints JSON); and what an id
prefix that names no single memory says, on the command line and over MCP."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import tempfile
import termios
import types
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_server.tools.server import build_server
from store import Config, Engine

TRIMEM = Path(sys.executable).with_name("trimem")


@dataclass(frozen=True)
class Ran:
    status: int
    stdout: str
    stderr: str


def trimem(database: str, *args: str, width: int | None = None) -> Ran:
    """``trimem --db database args`` in a subprocess; with ``width``, stdout is a terminal that
    many columns wide (its own size, as a person's terminal reports it: no COLUMNS)."""
    argv = [str(TRIMEM), "--log-level", "WARNING", "--db", database, *args]
    env = {name: value for name, value in os.environ.items() if name not in ("COLUMNS", "LINES")}
    with tempfile.TemporaryFile() as stderr:
        if width is None:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, env=env,
                                  timeout=120, check=False)
            status, stdout = done.returncode, done.stdout.decode()
        else:
            status, stdout = on_terminal(argv, env, width, stderr)
        stderr.seek(0)
        ran = Ran(status, stdout, stderr.read().decode())
    assert "Traceback" not in ran.stderr, ran.stderr
    return ran


def on_terminal(argv: list[str], env: dict[str, str], width: int, stderr: Any) -> tuple[int, str]:
    """Run ``argv`` with stdout on a new pseudo-terminal ``width`` columns wide; its status and output."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, width, 0, 0))
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=stderr, env=env) as child:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child has closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        status = child.wait(timeout=120)
    os.close(leader)
    return status, b"".join(chunks).decode().replace("\r\n", "\n")


def flat(text: str) -> str:
    """``text`` with every run of whitespace as one space: a wrapped text reads the same."""
    return " ".join(text.split())


def ok(ran: Ran) -> str:
    assert ran.status == 0, ran.stderr
    return ran.stdout


# --- an id prefix that names no single memory --------------------------------------------------------

INES = ("My wife Ines is a pediatrician at the children's hospital in Porto and works night shifts twice a week, "
        "so she sleeps until noon on Tuesdays and Fridays")


@pytest.fixture
def fixed_ids(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``fixed_ids(*ids)``: the next memories added get these ids, in order."""

    def use(*ids: str) -> None:
        queue = iter(uuid.UUID(value) for value in ids)
        monkeypatch.setattr("store.engine.uuid", types.SimpleNamespace(uuid4=lambda: next(queue)))

    return use


WIFE, NURSE, THEIRS, BOB = ("9d4a1111-0000-4000-8000-000000000000", "9d4b2222-0000-4000-8000-000000000000",
                            "9d4c3333-0000-4000-8000-000000000000", "5e6f0000-0000-4000-8000-000000000000")


@pytest.fixture
def shared_start(engine: Engine, fixed_ids: Callable[..., None]) -> Engine:
    """Two of the default user's ids start with 9d4, as does one of another user's; one starts with 5e6."""
    fixed_ids(WIFE, NURSE, THEIRS, BOB)
    engine.add(INES, user_id="default")
    engine.add("Ana is a nurse at Santa Maria", user_id="default")
    engine.add("Carla keeps bees", user_id="carla")
    engine.add("Bob repairs old bicycles", user_id="default")
    return engine


AMBIGUOUS = ("Error: memory id '9d4' is the start of 2 ids in this scope; give more of it to say which:\n"
             "  9d4a1111  \"My wife Ines is a pediatrician at the children's hospital in\"…\n"
             "  9d4b2222  'Ana is a nurse at Santa Maria'\n")


def test_an_ambiguous_prefix_lists_the_candidates_on_the_command_line(shared_start: Engine, db_arg: str) -> None:
    for command in (["get", "9d4"], ["update", "9d4", "--metadata", '{"x": 1}'], ["delete", "9d4"],
                    ["history", "9d4"], ["get", "9d4", "--json"]):
        ran = trimem(db_arg, *command)
        assert (ran.status, ran.stdout, ran.stderr) == (1, "", AMBIGUOUS), command  # never carla's 9d4c3333
    assert [m.metadata for m in shared_start.list(user_id="default")] == [{}, {}, {}]  # nothing changed
    assert json.loads(ok(trimem(db_arg, "get", "9d4b")))["id"] == NURSE  # one id: as before
    shared_start.update(NURSE, text="Ana is a nurse at São João", user_id="default")
    for memory_id, user in ((WIFE, "default"), (NURSE, "default"), (THEIRS, "carla")):
        shared_start.delete(memory_id, user_id=user)
    ran = trimem(db_arg, "restore", "9d4")  # history's ids, each with its text when deleted
    assert (ran.status, ran.stderr) == (1, AMBIGUOUS.replace("Santa Maria", "São João"))
    assert [m.id for m in shared_start.list(user_id="default")] == [BOB]  # neither came back


def test_a_prefix_too_short_for_its_one_id_names_it(shared_start: Engine, db_arg: str) -> None:
    ran = trimem(db_arg, "delete", "5e6")
    assert (ran.status, ran.stderr) == (1, (
        "Error: memory id '5e6' is too short to stand for an id; give at least 4 characters, such as those of "
        "the one id in this scope that starts with it:\n  5e6f0000  'Bob repairs old bicycles'\n"))
    assert shared_start.get(BOB, user_id="default").text == "Bob repairs old bicycles"  # not deleted
    assert json.loads(ok(trimem(db_arg, "delete", "5e6f")))["deleted"]["id"] == BOB  # 4 characters: enough
    ran = trimem(db_arg, "get", "9d4c")  # carla's only: for the default user, nothing starts so
    assert (ran.status, ran.stderr) == (1, ("Error: memory '9d4c' not found for --user-id='default'; listing the "
                                           "memories shows the ids in this scope\n"))
    assert json.loads(ok(trimem(db_arg, "get", "9d4c", "--user-id", "carla")))["id"] == THEIRS


def test_many_candidates_are_counted_and_told_apart(engine: Engine, db_arg: str,
                                                    fixed_ids: Callable[..., None]) -> None:
    ids = [f"abcd1234-0000-4000-8000-00000000000{i}" for i in range(7)]
    fixed_ids(*ids)
    for i in range(7):
        engine.add(f"Fact number {i} about the garden", user_id="default")
    error = trimem(db_arg, "history", "abcd").stderr.splitlines()
    assert error[0] == "Error: memory id 'abcd' is the start of 7 ids in this scope; give more of it to say which:"
    assert error[1:] == [*(f"  {ids[i]}  'Fact number {i} about the garden'" for i in range(5)), "  … and 2 more"]


TOOL_CALLS = (("get_memory", {}), ("update_memory", {"metadata": {"x": 1}}), ("delete_memory", {}),
              ("memory_history", {}))


def test_an_ambiguous_prefix_over_mcp_lists_the_candidates(shared_start: Engine, config: Config,
                                                           engine_factory: Callable[[Config], Engine]) -> None:
    async def errors() -> list[str]:
        async with Client(build_server(config, open_engine=engine_factory)) as client:
            results = [await client.call_tool(tool, {"memory_id": "9d4", **extra}) for tool, extra in TOOL_CALLS]
            assert all(result.is_error for result in results)
            return [result.content[0].text.removeprefix(f"Error executing tool {tool}: ")
                    for result, (tool, _) in zip(results, TOOL_CALLS, strict=True)]

    assert anyio.run(errors) == [AMBIGUOUS.removeprefix("Error: ").rstrip("\n")] * len(TOOL_CALLS)
    assert [m.metadata for m in shared_start.list(user_id="default")] == [{}, {}, {}]


# --- memory text is wrapped, never cut ---------------------------------------------------------------

QUESTION = "Where does Ines work?"


def test_every_table_wraps_the_memory_text_within_the_terminal(engine: Engine, db_arg: str) -> None:
    engine.add("Bob repairs old bicycles", user_id="default")
    memory_id = engine.add(INES, user_id="default", metadata={"category": "home"})[0].memory.id
    engine.update(memory_id, metadata={"category": "family"}, user_id="default")  # a second event in its history
    short = memory_id[:8]
    for width, command in ((80, ["list"]), (80, ["search", QUESTION]), (80, ["get", short]), (80, ["history", short]),
                           (80, ["search", QUESTION, "--explain"]), (120, ["search", QUESTION, "--explain"]),
                           (120, ["search", "bicycles", "--explain", "--threshold", "0.3"])):  # Ines is dropped
        screen = ok(trimem(db_arg, *command, width=width))
        assert max(len(line) for line in screen.splitlines()) <= width, (command, screen)
        assert flat(INES) in flat(screen), (command, screen)  # whole, and in one piece
        assert "…" not in screen, (command, screen)
    listed = ok(trimem(db_arg, "list", width=80)).splitlines()
    assert listed[0].split() == ["id", "created", "expires", "metadata", "text"]
    assert listed[1].split()[:4] == [short, engine.get(short, user_id="default").created_at[:10], "-",
                                     "category=family"]  # the other columns as they were
    column = listed[0].index("text")
    assert listed[1][column:].startswith("My wife Ines") and listed[2][:column].isspace()
    assert listed[2][column:] == listed[2].strip()  # its second line, under its first
    assert json.loads(ok(trimem(db_arg, "get", short)))["text"] == INES  # piped: JSON, as always


def test_a_narrow_terminal_puts_the_text_below_its_row(engine: Engine, db_arg: str) -> None:
    memory_id = engine.add(INES, user_id="default", metadata={"source": "a chat with Ana on Sunday"})[0].memory.id
    screen = ok(trimem(db_arg, "list", width=80)).splitlines()
    assert screen[0].split() == ["id", "created", "expires", "metadata"]  # the text has no room beside them
    assert screen[1] == "    text"
    assert screen[2].startswith(memory_id[:8]) and screen[2].endswith("source=a chat with Ana on S…")
    assert screen[3].startswith("    My wife Ines is a pediatrician") and all(len(line) <= 80 for line in screen)
    assert flat(" ".join(screen[3:])) == flat(INES)


# --- add --file and doctor: words on a terminal, JSON for scripts ----------------------------------


def test_add_file_prints_words_on_a_terminal_and_json_when_piped(engine: Engine, db_arg: str,
                                                                  tmp_path: Path) -> None:
    engine.add("Ana likes tea", user_id="default")
    facts = tmp_path / "facts.jsonl"
    facts.write_text('{"text": "Ana likes tea"}\n{"text": "Bob repairs old bicycles"}\n')
    assert ok(trimem(db_arg, "add", "--file", str(facts), width=80)) == (
        "added:          1\nalready stored: 1 (duplicates, skipped)\n")
    assert ok(trimem(db_arg, "add", "--file", str(facts))) == '{"added": 0, "duplicates": 2}\n'  # as always


def test_doctor_prints_words_on_a_terminal_and_json_when_piped(engine: Engine, db_arg: str) -> None:
    engine.add("Ana likes tea", user_id="default")
    engine.add("Bob repairs old bicycles", user_id="default")
    screen = ok(trimem(db_arg, "doctor", width=80)).splitlines()
    assert f"database:            {engine.location}" in screen and "  memories:        2" in screen
    assert "configuration:" in screen and "    - options: --db, --log-level" in screen
    assert "      max_top_k:          100" in screen  # settings under their section, values aligned
    status = json.loads(ok(trimem(db_arg, "doctor")))
    assert (status["database"], status["counts"]["memories"]) == (engine.location, 2)
    assert json.loads(ok(trimem(db_arg, "doctor", "--json", width=80)))["database"] == engine.location


@pytest.mark.only_on("sqlite")
def test_doctor_repair_prints_words_on_a_terminal_and_json_when_piped(engine: Engine, db_arg: str) -> None:
    engine.add("Ana likes tea", user_id="default")

    assert ok(trimem(db_arg, "doctor", "--repair", width=80)) == (
        "vectors rebuilt:       0\nkeyword index rebuilt: no\nentity links rebuilt:  0\norphan rows removed:   0\n")
    assert json.loads(ok(trimem(db_arg, "doctor", "--repair"))) == {
        "vectors_rebuilt": 0, "fts_rebuilt": False, "entity_links_rebuilt": 0, "orphans_removed": 0, "remaining": []}


# --- users: every column has a label ------------------------------------------------------------------


def test_users_labels_every_column(engine: Engine, db_arg: str) -> None:
    engine.add("Ana likes tea", user_id="default")
    engine.add("Bob's planner books trains", user_id="bob", agent_id="planner")
    screen = [line.split() for line in ok(trimem(db_arg, "users", width=80)).splitlines()]
    assert screen == [["user_id", "agent_id", "run_id", "memories", "expired", "default"],
                      ["bob", "planner", "-", "1", "0", "no"],
                      ["default", "-", "-", "1", "0", "yes"]]
