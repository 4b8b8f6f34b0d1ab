"""Files that hold memories are their owner's alone (``store.files``), under the usual umask
(022), in which SQLite and ``open`` make files 0644: the database, its -wal and -shm, the
folder trimem makes for it, exports and backups are 0600 (folders 0700). A folder the user
made is left as it is, and ``doctor --check`` warns, still passing, about what others can read.

Real SQLite files through the engine and the real CLI; the PostgreSQL run checks that the
doctor looks at no file there.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mcp_server.cli import cli
from store import Config, Engine


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def trimem(engine_factory: Callable[[Config], Engine], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """``trimem(*args)``: the CLI in process, with the session's models."""
    monkeypatch.setattr("store.engine.Engine", engine_factory)
    return lambda *args: CliRunner().invoke(cli, list(args))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def warning(path: Path, who_may: str, private: int) -> str:
    """The line ``doctor --check`` prints for ``path`` (``store.files.open_to_others``)."""
    return (f"warning: {path} can be {who_may} (mode {mode(path):o}); `chmod {private:o} {shlex.quote(str(path))}` "
            "makes it its owner's alone")


@pytest.mark.only_on("sqlite")
def test_a_new_database_its_wal_and_shm_and_the_data_folder_are_private(
    config: Config, engine_factory: Callable[[Config], Engine], trimem_home: Path
) -> None:
    config = config.replace("store", db_path="")  # the default: memories.db in the data folder, made now
    assert config.database == trimem_home / "memories.db" and not trimem_home.exists()
    with engine_factory(config) as engine:
        engine.add("Ana's locker code is 4711", user_id="ana")
        beside = {path.name: mode(path) for path in trimem_home.iterdir()}  # while open: the -wal and -shm too
    assert beside == {"memories.db": 0o600, "memories.db-wal": 0o600, "memories.db-shm": 0o600}
    assert mode(trimem_home) == 0o700


@pytest.mark.only_on("sqlite")
def test_exports_and_backups_are_private_and_so_is_a_folder_made_for_a_backup(
    config: Config, engine: Engine, trimem: Callable[..., Result], tmp_path: Path
) -> None:
    engine.add("Ana's locker code is 4711", user_id="ana")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    exported, copy, made = shared / "ana.jsonl", shared / "copy.db", shared / "backups" / "copy.db"
    exported.write_text("an older export, readable by all")  # replaced by the new, private one
    assert trimem("--db", config.store.db_path, "export", str(exported)).exit_code == 0
    assert trimem("--db", config.store.db_path, "backup", str(copy)).exit_code == 0
    engine.backup(made)
    assert (mode(exported), mode(copy), mode(made), mode(made.parent)) == (0o600, 0o600, 0o600, 0o700)
    assert "4711" in exported.read_text() and sorted(path.name for path in shared.iterdir()) == [
        "ana.jsonl", "backups", "copy.db"]  # no partial file left beside them
    assert mode(shared) == 0o755  # a folder the user made is theirs to set


@pytest.mark.only_on("sqlite")
def test_doctor_warns_about_files_and_a_folder_others_can_read_and_still_passes(
    config: Config, engine_factory: Callable[[Config], Engine], trimem: Callable[..., Result], tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    database = shared / "memories.db"
    with engine_factory(config.using(str(database))) as engine:
        engine.add("Ana's locker code is 4711", user_id="ana")
    assert mode(shared) == 0o755 and mode(database) == 0o600  # the folder left as it was, the file private
    folder_only = trimem("--db", str(database), "doctor", "--check")
    assert folder_only.exit_code == 0 and folder_only.stdout == "ok: no problems found\n"
    assert folder_only.stderr == warning(shared, "read by its group and others", 0o700) + "\n"

    database.chmod(0o664)  # as a database made before trimem made them private, by a group-writable umask
    checked = trimem("--db", str(database), "doctor", "--check")
    assert checked.exit_code == 0 and checked.stdout == "ok: no problems found\n"
    lines = checked.stderr.splitlines()
    who_may = "read and written by its group, and read by others"
    assert warning(database, who_may, 0o600) in lines  # SQLite made the -wal and -shm with the file's mode
    assert f"warning: {database}-wal can be {who_may} (mode 664); " in checked.stderr
    assert len(lines) == 4 and "Traceback" not in checked.output  # the file, its -wal and -shm, the folder

    for path in (database, shared):
        path.chmod(0o700 if path.is_dir() else 0o600)
    assert trimem("--db", str(database), "doctor", "--check").stderr == ""


@pytest.mark.only_on("postgres")
def test_on_postgresql_the_doctor_reads_no_file(
    config: Config, engine: Engine, trimem: Callable[..., Result], trimem_home: Path
) -> None:
    """No warning, though the data folder and an SQLite file in it are open: PostgreSQL keeps its
    own files, and the ones here are not this store's."""
    engine.add("Ana's locker code is 4711", user_id="ana")
    trimem_home.mkdir(exist_ok=True)
    trimem_home.chmod(0o755)
    (trimem_home / "memories.db").touch(mode=0o644)
    checked = trimem("--db", config.store.database_url, "doctor", "--check")
    assert checked.exit_code == 0 and checked.stdout == "ok: no problems found\n" and checked.stderr == ""
