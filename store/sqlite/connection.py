"""Opening an SQLite file: connection settings, and read and write transactions.

The binding is apsw: it bundles a current SQLite (JSON1, math functions) and can load sqlite-vec on
Pythons whose stdlib ``sqlite3`` cannot (macOS system Python, many pyenv builds).
The schema and its migrations live in ``store.sqlite.schema``.

Every failure to open a file becomes a ``TrimemError`` that names the file and the way
out, so neither the CLI nor a tool result ever shows a driver traceback, and a file that
is not trimem's is never changed. A disk with no space left says so (``DiskFull``), on
opening as on writing. A database made here, and the folder made for it, are their owner's
alone (``store.files``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import random
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import sqlite_vec

from store import files
from store.errors import DiskFull, InvalidArgument, SchemaMismatch, TrimemError, unwritable

from .migrations import SCHEMA_GUARD, refuse_newer_schema

BUSY_TIMEOUT_MS = 10_000
WRITE_RETRIES = 8
MEMORY_MAP_BYTES = 1 << 36
"""How much of a file SQLite reads through a memory map (``connection_memory_map``): 64 GiB of
address space, so all of any file this machine holds."""


# --- settings -------------------------------------------------------------------------


def connection_wal(conn: apsw.Connection) -> None:
    """WAL lets readers carry on while one process writes: several MCP clients share a file."""
    conn.execute("PRAGMA journal_mode=WAL")


def connection_busy_timeout(conn: apsw.Connection) -> None:
    """Wait for another process's write lock instead of failing with 'database is locked'."""
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)


def connection_wal_index(conn: apsw.Connection) -> None:
    """Read once in WAL mode: that builds the -shm index beside the file, so a disk too full
    for it fails here, on opening, rather than at a command's first read."""
    connection_readable(conn)


def connection_foreign_keys(conn: apsw.Connection) -> None:
    """Link rows vanish with their memory or entity (ON DELETE CASCADE)."""
    conn.execute("PRAGMA foreign_keys=ON")


def connection_synchronous(conn: apsw.Connection) -> None:
    """NORMAL is durable across application crashes in WAL mode and much faster than FULL."""
    conn.execute("PRAGMA synchronous=NORMAL")


def connection_sqlite_vec(conn: apsw.Connection) -> None:
    """Load sqlite-vec for vec0 tables, then close the door on further extension loading."""
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.enable_load_extension(False)


def connection_memory_map(conn: apsw.Connection) -> None:
    """Read pages through a memory map instead of a read call each, as SQLite can on every system
    it supports: a KNN reads each of its scope's vectors, and one scope of 100,000 memories in
    vec0 scanned in 62 ms instead of 86 (search p50 92–106 ms instead of 120–125). Writes still go
    through write calls, so a full disk fails them as before."""
    conn.execute(f"PRAGMA mmap_size={MEMORY_MAP_BYTES}")


def connection_readable(conn: apsw.Connection) -> None:
    """Read the schema now, so a file that is not SQLite fails here, before anything is written."""
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()




def connection_schema_guard(conn: apsw.Connection) -> None:
    """Let this process write tables whose guard triggers name a schema no newer than its own
    (``migrations.refuse_newer_schema``). A process of a trimem from before the guard
    (migration m013) lacks the function, so SQLite refuses its writes when it prepares them
    ("no such function: trimem_schema_check"), nothing of them kept; a newer trimem's migration
    that changes how writes are made raises the triggers' number, and this process's writes then
    fail with trimem's own message. Either way a server left running across an upgrade never
    stores a write that the upgraded schema cannot find."""
    conn.create_scalar_function(SCHEMA_GUARD, refuse_newer_schema, 1, deterministic=True)


def connection_trimem_or_new(conn: apsw.Connection) -> None:
    """Refuse another application's SQLite file before any setting (WAL) changes a byte of it."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if tables and "schema_version" not in tables:
        raise SchemaMismatch(
            f"{conn.db_filename('main')} is an SQLite database of another application, not trimem's; "
            "point --db or TRIMEM_DB_PATH at a trimem database or at a new file name"
        )


CONNECTION_SETTINGS: tuple[Callable[[apsw.Connection], None], ...] = (
    connection_busy_timeout,
    connection_sqlite_vec,
    connection_schema_guard,
    connection_readable,
    connection_trimem_or_new,
    connection_wal,
    connection_wal_index,
    connection_foreign_keys,
    connection_synchronous,
    connection_memory_map,
)
READ_ONLY_SETTINGS: tuple[Callable[[apsw.Connection], None], ...] = (
    connection_busy_timeout,
    connection_sqlite_vec,
    connection_schema_guard,
    connection_readable,
    connection_trimem_or_new,
    connection_memory_map,
)
"""A read-only file cannot switch journal mode; it is read as it is."""

NOT_SQLITE = (
    "{path} is not an SQLite database (a text file, or a damaged one); point --db or TRIMEM_DB_PATH "
    "at a trimem database or at a new file name"
)


def file_in_the_way(path: Path) -> Path | None:
    """The first of ``path``'s parents that exists but is not a folder, if any."""
    for parent in reversed(Path(path).absolute().parents):
        if parent.exists() and not parent.is_dir():
            return parent
    return None


def _writable(path: Path) -> bool:
    """Whether this process may write the file (or create it, and its -wal and -shm, in its folder)."""
    folder = os.access(path.parent, os.W_OK)
    return folder and (not path.exists() or os.access(path, os.W_OK))


def no_database_error(path: str | Path) -> TrimemError:
    """What a read says where no database has been made yet: a read creates none."""
    return TrimemError(
        f"there is no database at {path} yet; the first add or import creates it (`trimem add`, `trimem import`, "
        "or an assistant's add_memory). If it should be there already, check --db or TRIMEM_DB_PATH"
    )


def connect(path: Path, *, create: bool = True) -> apsw.Connection:
    """Open a database file with every setting applied. With ``create`` a missing file (and
    its folder) is made; without it, a missing or empty file is refused (``no_database_error``).

    A file this process may not write is opened read-only, so reads still work and a
    write fails with a message (see ``write_transaction``). ``connection.readonly('main')``
    tells which. A disk too full for SQLite's -shm index beside the file raises
    ``DiskFull``, unless the file was there already and its -wal holds nothing: then it is
    read as a snapshot instead (``full_disk_snapshot``), so reads work there too.
    """
    path = Path(path)
    if path.is_dir():
        raise InvalidArgument(f"{path} is a folder; point --db or TRIMEM_DB_PATH at a database file inside it")
    if (blocker := file_in_the_way(path)) is not None:
        raise InvalidArgument(
            f"cannot put the database at {path}: {blocker} is a file, not a folder; choose a path whose folders "
            "exist or can be created"
        )
    if not create and (not path.exists() or path.stat().st_size == 0):  # nothing SQLite wrote yet
        raise no_database_error(path)
    try:
        files.make_folder(path.parent)
    except OSError as exc:
        raise InvalidArgument(
            f"cannot create the folder {path.parent} for the database ({exc.strerror}); "
            "choose a path whose folders exist or can be created"
        ) from None
    read_only = path.exists() and not _writable(path)
    if not read_only and not os.access(path.parent, os.W_OK):
        raise InvalidArgument(f"cannot create {path}: its folder is not writable; choose another path")
    if read_only:
        return _open(str(path), apsw.SQLITE_OPEN_READONLY, READ_ONLY_SETTINGS, path)
    new = not path.exists()
    if new:  # so ``create``: a missing file without it was refused above
        _make_private(path)
    flags = apsw.SQLITE_OPEN_READWRITE | (apsw.SQLITE_OPEN_CREATE if create else 0)
    try:
        return _open(str(path), flags, CONNECTION_SETTINGS, path)
    except DiskFull:
        if new or not _wal_holds_nothing(path):
            raise
        return _open(_snapshot_uri(path), SNAPSHOT_FLAGS, READ_ONLY_SETTINGS, path)


def _make_private(path: Path) -> None:
    """Create the database file, empty and 0600, for SQLite to open: SQLite would make it 0644
    under the usual umask, and it gives the -wal, -shm and -journal beside it the file's mode."""
    try:
        os.close(files.create_private(path))
    except FileExistsError:  # another process made it a moment ago: its mode is that process's
        pass
    except OSError as exc:
        raise unwritable(path, exc, "the database ") from None


def _open(
    name: str, flags: int, settings: tuple[Callable[[apsw.Connection], None], ...], path: Path
) -> apsw.Connection:
    """Open ``name`` and apply ``settings``; every failure becomes a ``TrimemError`` about ``path``."""
    try:
        conn = apsw.Connection(name, flags=flags)
    except apsw.Error as exc:
        raise TrimemError(f"cannot open {path} ({exc}); check the path and its permissions") from None
    try:
        for setting in settings:
            setting(conn)
    except apsw.NotADBError:
        conn.close()
        raise InvalidArgument(NOT_SQLITE.format(path=path)) from None
    except TrimemError:
        conn.close()
        raise
    except apsw.Error as exc:
        full = disk_full(conn, exc)  # before closing: the system error belongs to the connection
        conn.close()
        if full:
            raise DiskFull(path) from None
        raise TrimemError(f"cannot open {path} ({exc}); check the file, or run `trimem doctor --check`") from None
    return conn


SNAPSHOT_FLAGS = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
"""A snapshot is the only connection ``connect`` opens by URI, which is how it is told apart."""


def _snapshot_uri(path: Path) -> str:
    """``path`` as SQLite's immutable file: read without locks, -shm or -wal. Only for a disk too
    full for the -shm index and a -wal holding nothing, so the file alone is the whole database;
    and a disk that full lets no other process write to it either."""
    return f"file:{urllib.parse.quote(str(path.absolute()))}?immutable=1"


def full_disk_snapshot(conn: apsw.Connection) -> bool:
    """Whether ``connect`` could only open the file as a read-only snapshot, the disk being full."""
    return (conn.open_flags & SNAPSHOT_FLAGS) == SNAPSHOT_FLAGS


def _wal_holds_nothing(path: Path) -> bool:
    """No -wal beside the file, or an empty one: every committed write is in the file itself."""
    wal = Path(f"{path}-wal")
    return not wal.exists() or wal.stat().st_size == 0


def database_files(path: Path) -> list[Path]:
    """The database file and those SQLite keeps beside it (the WAL, its index, the rollback journal)."""
    return [Path(f"{path}{suffix}") for suffix in ("", "-wal", "-shm", "-journal")]


def remove_database_files(path: Path) -> None:
    """Remove a database file this process made, and the files SQLite made beside it."""
    for file in database_files(path):
        with contextlib.suppress(OSError):
            file.unlink(missing_ok=True)


def disk_full(conn: apsw.Connection, exc: apsw.Error) -> bool:
    """Whether SQLite failed for want of space: its own full-disk error, or an I/O error whose
    system error says so (growing the -shm index reports only that)."""
    return isinstance(exc, apsw.FullError) or (isinstance(exc, apsw.IOError) and conn.system_errno == errno.ENOSPC)


def versions(conn: apsw.Connection) -> dict[str, str]:
    """SQLite, sqlite-vec and apsw versions, for ``trimem doctor``."""
    (vec_version,) = conn.execute("SELECT vec_version()").fetchone()
    return {"sqlite": apsw.sqlite_lib_version(), "sqlite_vec": vec_version, "apsw": apsw.apsw_version()}


# --- transactions ---------------------------------------------------------------------


def read_only_error(path: str | Path) -> TrimemError:
    """What a write to a file this process may only read says."""
    return TrimemError(
        f"{path} is read-only, so nothing can be added, changed or deleted; reads still work. "
        "Make the file and its folder writable, or copy it with `trimem backup` and use the copy"
    )


def write_refusal(conn: apsw.Connection) -> Callable[[], TrimemError]:
    """What a write on a connection opened read-only says: the disk is full when only a snapshot
    could be opened, else the file is read-only."""
    path = conn.db_filename("main")
    return functools.partial(DiskFull, path) if full_disk_snapshot(conn) else functools.partial(read_only_error, path)


def _write_failure(conn: apsw.Connection, exc: apsw.Error, *, ended: bool = False) -> TrimemError | None:
    """The message for a write SQLite refused for a reason the caller can act on, else None.

    ``ended`` says SQLite ended the transaction itself, which it does only when it cannot
    write a page. sqlite-vec reports that as its own error ("could not write vector blob",
    "Could not insert a new vector chunk", ...) without SQLite's full-disk code, so an
    error that ended the transaction is the full disk (a refused row never ends it).
    """
    path = conn.db_filename("main")
    if isinstance(exc, apsw.ReadOnlyError):
        return write_refusal(conn)()
    if disk_full(conn, exc) or (ended and isinstance(exc, apsw.SQLError)):
        return DiskFull(path)
    if isinstance(exc, apsw.IOError):
        return TrimemError(
            f"writing {path} failed with a disk I/O error ({exc}); nothing was written. "
            "Check the disk, then run `trimem doctor --check`"
        )
    return None


@contextlib.contextmanager
def write_transaction(conn: apsw.Connection) -> Iterator[None]:
    """One all-or-nothing write, taking the write lock up front.

    ``BEGIN IMMEDIATE`` avoids the deadlock where two deferred readers both try to
    upgrade; if the lock is still busy after ``busy_timeout`` we back off and retry.
    Any exception inside, or a failed ``COMMIT``, rolls everything back, but only when a
    transaction is still open: after a full disk or an I/O error SQLite may already
    have rolled back, and a second ``ROLLBACK`` would fail and hide the real cause.
    A full disk says so, even when sqlite-vec reported it (see ``_write_failure``).
    """
    for attempt in range(WRITE_RETRIES):
        try:
            conn.execute("BEGIN IMMEDIATE")
            break
        except apsw.BusyError:
            if attempt == WRITE_RETRIES - 1:
                raise TrimemError("the database stayed locked by another process; try again") from None
            time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))
        except apsw.Error as exc:
            if (failure := _write_failure(conn, exc)) is not None:
                raise failure from exc
            raise
    try:
        yield
        conn.execute("COMMIT")
    except BaseException as exc:
        ended = not conn.in_transaction
        if not ended:
            conn.execute("ROLLBACK")
        if isinstance(exc, apsw.Error) and (failure := _write_failure(conn, exc, ended=ended)) is not None:
            raise failure from exc
        raise


@contextlib.contextmanager
def read_transaction(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """Several reads that see one snapshot of the database.

    In WAL mode a transaction reads the database as it was at its first read, whatever
    other connections commit meanwhile: a search's KNN, keyword and row queries then
    agree, even if another process deletes a memory between them. ``with conn:`` is a
    savepoint, so this nests inside a write transaction too.
    """
    with conn:
        yield conn
