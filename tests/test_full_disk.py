"""A full disk on every path, and reads that create nothing.

Each full disk here is real: a small tmpfs, filled until exactly the free space a case
needs is left. The CLI runs as a subprocess (the installed ``trimem`` with this checkout
first on ``PYTHONPATH``), so what is asserted is what a user sees. Mounting needs root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from mcp import Client

from mcp_server.tools.server import build_server
from store import Config, Engine
from store.engine import MemoryInput
from store.errors import DiskFull
from store.scope import Scope
from store.sqlite import connection
from store.sqlite.statements import SQLiteTransaction

# A full disk under an SQLite file: PostgreSQL's own disk is its server's (tests/test_postgres.py).
pytestmark = pytest.mark.only_on("sqlite")

ROOT = Path(__file__).resolve().parents[1]
TRIMEM = Path(sys.executable).with_name("trimem")
DISK_BYTES = 16 * 1024 * 1024
"""Room for a database with its vector chunks and much to spare."""

def full_disk_message(where: object) -> str:
    return f"Error: the disk holding {where} is full; nothing was written. Free some space and try again"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """An empty tmpfs of ``DISK_BYTES``, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs as a full disk needs root")
    folder = tmp_path / "disk"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)  # lazy: a failed test may hold a file open


def free_bytes(folder: Path) -> int:
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


def leave_free(folder: Path, free: int) -> None:
    """Fill the disk with a filler file (allocated, not sparse) until exactly ``free`` bytes are left."""
    filler = folder / ".filler"
    filler.unlink(missing_ok=True)
    with filler.open("wb") as out:
        os.posix_fallocate(out.fileno(), 0, free_bytes(folder) - free)
    assert free_bytes(folder) == free


def files_on(folder: Path) -> list[str]:
    """What the disk holds besides the filler."""
    return sorted(path.name for path in folder.iterdir() if path.name != ".filler")


def trimem(database: Path, *args: str, stdout: int | Path | None = None) -> subprocess.CompletedProcess[str]:
    """``trimem --db DATABASE ARGS`` as a user runs it; ``stdout`` a file to append the output to."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    argv = [str(TRIMEM), "--log-level", "WARNING", "--db", str(database), *args]
    if isinstance(stdout, Path):
        with stdout.open("a") as out:
            return subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, text=True, timeout=120, env=env, check=False)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a failed command prints: no traceback, exit status 1."""
    assert result.returncode == 1, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


def memories(engine_factory: Callable[..., Engine], config: Config, database: Path, count: int) -> None:
    """A database of ``count`` memories of the user 'ana', made with the session's models."""
    with engine_factory(config.replace("store", db_path=str(database))) as engine:
        engine.add_many([MemoryInput(f"Ana visited city number {i} and liked its food") for i in range(count)],
                        user_id="ana")


# --- 1. a new database -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("free", [0, 16 * 1024, 64 * 1024], ids=["nothing", "no room for -shm", "no room for schema"])
def test_a_new_database_on_a_full_disk_says_so_and_leaves_nothing(disk: Path, free: int) -> None:
    database = disk / "memories.db"
    leave_free(disk, free)
    assert refused(trimem(database, "add", "Ana likes green tea")) == full_disk_message(database)
    assert files_on(disk) == []


# --- 2. vectors ---------------------------------------------------------------------------------------------------


def test_adding_a_file_on_a_full_disk_says_so_and_writes_nothing(
    disk: Path, tmp_path: Path, config: Config, engine_factory: Callable[..., Engine]
) -> None:
    """With 96 KB free, the rows, postings and the user's first vector chunks (32 vectors each,
    about 50 KB a chunk) of twenty memories do not fit."""
    database = disk / "memories.db"
    engine_factory(config.replace("store", db_path=str(database))).close()  # the schema, no memory yet
    lines = tmp_path / "facts.jsonl"
    lines.write_text("".join(f'{{"text": "Ana visited city number {i} and liked its food"}}\n' for i in range(20)))
    leave_free(disk, 96 * 1024)
    assert refused(trimem(database, "add", "--user-id", "ana", "--file", str(lines))) == full_disk_message(database)
    (disk / ".filler").unlink()
    with engine_factory(config.replace("store", db_path=str(database))) as engine:
        assert engine.list(user_id="ana") == []
        assert engine.check() == []


def test_rewriting_vectors_on_a_full_disk_is_a_full_disk_and_changes_nothing(
    disk: Path, config: Config, engine_factory: Callable[..., Engine]
) -> None:
    """A page cache of one page makes every vector write go to disk at once, so sqlite-vec meets
    the full disk itself ("could not open vector blob", "could not write vector blob", ...)."""
    database = disk / "memories.db"
    memories(engine_factory, config, database, 20)
    conn = connection.connect(database)
    conn.execute("PRAGMA cache_size=1")
    rows = [(rowid, np.frombuffer(vector, dtype=np.float32)) for rowid, vector in
            conn.execute("SELECT memory_rowid, embedding FROM memory_vectors ORDER BY memory_rowid")]
    leave_free(disk, 0)
    with (pytest.raises(DiskFull, match=f"the disk holding {database} is full; nothing was written"),
          connection.write_transaction(conn)):
        for rowid, vector in rows:
            SQLiteTransaction(conn).put_memory_vector(rowid, vector[::-1].copy(), Scope("ana"))
    conn.close()
    (disk / ".filler").unlink()
    with engine_factory(config.replace("store", db_path=str(database))) as engine:
        assert engine.check() == []
    conn = connection.connect(database)
    after = [(rowid, np.frombuffer(vector, dtype=np.float32)) for rowid, vector in
             conn.execute("SELECT memory_rowid, embedding FROM memory_vectors ORDER BY memory_rowid")]
    conn.close()
    assert [rowid for rowid, _ in after] == [rowid for rowid, _ in rows]
    assert all(np.array_equal(old, new) for (_, old), (_, new) in zip(rows, after))


# --- 3. opening a database on a full disk --------------------------------------------------------------------------

READS_ON_A_FULL_DISK = [
    (["list", "--user-id", "ana"], "Ana visited city number 1 "),
    (["search", "--user-id", "ana", "Which cities did Ana visit?"], "Ana visited city number"),
    (["stats"], '"memories": 3'),
    (["users"], '"user_id": "ana"'),
    (["doctor"], '"read_only": true'),
    (["doctor", "--check"], "ok: no problems found"),
    (["export", "{elsewhere}/export.jsonl"], "exported 3 memories"),
    (["backup", "{elsewhere}/backup.db"], "backed up"),
]
WRITES_ON_A_FULL_DISK = [
    ["add", "--user-id", "ana", "Ana likes green tea"],
    ["delete-all", "--user-id", "ana", "--yes"],
    ["doctor", "--repair"],
]


@pytest.mark.parametrize("free", [0, 8 * 1024], ids=["nothing", "8 KB"])
def test_a_database_on_a_full_disk_is_read_and_never_written(
    disk: Path, free: int, tmp_path: Path, config: Config, engine_factory: Callable[..., Engine]
) -> None:
    """With no room for SQLite's -shm index, reads still work (on a snapshot of the file) and every
    write says the disk is full."""
    database = disk / "memories.db"
    memories(engine_factory, config, database, 3)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    leave_free(disk, free)
    before = database.read_bytes()
    for command, expected in READS_ON_A_FULL_DISK:
        result = trimem(database, *(argument.format(elsewhere=elsewhere) for argument in command))
        assert result.returncode == 0, (command, result.stderr[-3000:])
        assert expected in result.stdout + result.stderr, (command, result.stdout[-3000:])
    for command in WRITES_ON_A_FULL_DISK:
        assert refused(trimem(database, *command)) == full_disk_message(database), command
    assert database.read_bytes() == before
    (disk / ".filler").unlink()
    with engine_factory(config.replace("store", db_path=str(elsewhere / "backup.db"))) as copy:
        assert len(copy.list(user_id="ana")) == 3


# --- 4. export ----------------------------------------------------------------------------------------------------


def test_an_export_to_a_full_disk_says_so_and_leaves_no_partial_file(
    disk: Path, tmp_path: Path, config: Config, engine_factory: Callable[..., Engine]
) -> None:
    database = tmp_path / "memories.db"
    memories(engine_factory, config, database, 60)  # about 20 KB of JSON Lines
    leave_free(disk, 4096)
    target = disk / "export.jsonl"
    assert refused(trimem(database, "export", str(target))) == full_disk_message(target)
    assert files_on(disk) == []
    redirected = disk / "log.txt"
    redirected.write_text("an earlier line\n")
    result = trimem(database, "export", stdout=redirected)
    assert refused(result) == full_disk_message("the output file (stdout)")
    assert redirected.read_text() == "an earlier line\n"  # the partial export is taken back


# --- 5. backup ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("share", [0, 0.5], ids=["4 KB", "half the database"])
def test_a_backup_to_a_full_disk_says_so_and_leaves_nothing(
    disk: Path, share: float, tmp_path: Path, config: Config, engine_factory: Callable[..., Engine]
) -> None:
    database = tmp_path / "memories.db"
    memories(engine_factory, config, database, 3)
    leave_free(disk, max(4096, int(share * database.stat().st_size)) // 4096 * 4096)
    target = disk / "backup.db"
    assert refused(trimem(database, "backup", str(target))) == full_disk_message(target)
    assert files_on(disk) == []


# --- 6. a read creates nothing --------------------------------------------------------------------------------------

READS = [
    ["list"], ["search", "tea"], ["get", "0123abcd"], ["history", "0123abcd"], ["stats"], ["users"], ["export"],
    ["doctor"], ["doctor", "--check"], ["backup", "{tmp}/backup.db"], ["delete", "0123abcd"],
    ["import", "--dry-run", "{tmp}/facts.jsonl"],
]


def test_a_read_of_a_database_that_is_not_there_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "facts.jsonl").write_text('{"text": "Ana likes green tea"}\n')
    database = tmp_path / "no" / "such" / "folder" / "memories.db"
    for command in READS:
        message = refused(trimem(database, *(argument.format(tmp=tmp_path) for argument in command)))
        assert message == (
            f"Error: there is no database at {database} yet; the first add or import creates it (`trimem add`, "
            "`trimem import`, or an assistant's add_memory). If it should be there already, check --db or "
            "TRIMEM_DB_PATH"
        ), command
        assert not (tmp_path / "no").exists(), command


def test_an_empty_file_is_no_database_to_a_read_and_stays_empty(tmp_path: Path) -> None:
    database = tmp_path / "memories.db"
    database.touch()
    assert "there is no database at" in refused(trimem(database, "list"))
    assert database.read_bytes() == b""
    assert sorted(path.name for path in tmp_path.iterdir()) == ["memories.db"]


def test_an_sqlite_file_without_tables_gets_no_schema_from_a_read(tmp_path: Path) -> None:
    import apsw

    database = tmp_path / "memories.db"
    apsw.Connection(str(database)).execute("PRAGMA user_version = 1")  # a header, no table
    assert "there is no database at" in refused(trimem(database, "list"))
    assert apsw.Connection(str(database)).execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


def test_an_add_creates_the_database_and_its_folders(tmp_path: Path) -> None:
    database = tmp_path / "new" / "memories.db"
    result = trimem(database, "add", "Ana likes green tea")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"created new database at {database}" in result.stderr
    assert "Ana likes green tea" in trimem(database, "list").stdout


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_mcp_server_creates_its_database_as_before(
    tmp_path: Path, config: Config, engine_factory: Callable[..., Engine]
) -> None:
    database = tmp_path / "new" / "memories.db"
    async with Client(build_server(config.replace("store", db_path=str(database)), engine_factory)) as client:
        result = await client.call_tool("search_memory", {"query": "tea"})
    assert not result.is_error, result.content[0].text
    assert database.exists()
