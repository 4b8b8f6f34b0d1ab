"""The SQLite schema: running its numbered migrations (``migrations.py``), the embedding model it
records, and opening a file ready for use (``open_database``)."""

from __future__ import annotations

import shlex
from pathlib import Path

import apsw

from store.errors import DiskFull, SchemaMismatch
from store.sql.migrations import Migrations

from .connection import (
    connect,
    no_database_error,
    read_transaction,
    remove_database_files,
    write_transaction,
)
from .migrations import MIGRATIONS
from .sql import DIALECT


def _schema_state(conn: apsw.Connection) -> tuple[int, dict[str, str]]:
    """The schema version (0 for a new file) and the ``meta`` rows."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    version = 0
    if "schema_version" in tables:
        version = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] or 0
    stored = dict(conn.execute("SELECT key, value FROM meta").fetchall()) if "meta" in tables else {}
    return version, stored


def _model_mismatch(recorded: str, sizes: str, model_name: str) -> str:
    """Another model's vectors: re-embed with the configured one, or configure the recorded one."""
    return (
        f"this database was built with the embedding model '{recorded}'{sizes}, but the configured model is "
        f"'{model_name}'; their vectors cannot be compared, even at the same size. Run "
        f"`trimem reembed --model {shlex.quote(model_name)}` to re-embed every memory with it (the old index "
        f"stays in use until that completes), or configure '{recorded}' again (store.embedding_model, "
        "TRIMEM_EMBEDDING_MODEL) or use another database file"
    )


_MIGRATIONS = Migrations(
    MIGRATIONS, DIALECT, "this database", state=_schema_state, reading=read_transaction, locked=write_transaction,
    missing=lambda conn: no_database_error(conn.db_filename("main")), model_mismatch=_model_mismatch,
)
"""SQLite's migrations run under its write transaction (``BEGIN IMMEDIATE``): one process migrates."""


def require_model(conn: apsw.Connection, model_name: str, dimension: int) -> None:
    """Refuse to go on when the database records another model than this process runs: it was
    re-embedded (``trimem reembed``) after this process opened it, so the way out is the new
    model, not re-embedding back."""
    (recorded,) = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
    if recorded != model_name:
        raise SchemaMismatch(
            f"this database now uses the embedding model '{recorded}', not '{model_name}' that this process "
            f"runs: it was re-embedded after this process opened it (or waits for this engine's reembed). "
            f"Set store.embedding_model (TRIMEM_EMBEDDING_MODEL) to '{recorded}' and restart"
        )


def ensure_schema(
    conn: apsw.Connection, model_name: str, dimension: int, *, check_model: bool = True, create: bool = True
) -> None:
    """Create or upgrade the schema, and refuse a database built for another embedding model
    (``store.sql.migrations``). The ``meta`` rows record the model's name and dimension when the
    file is created. ``connect`` has already refused another application's SQLite file; without
    ``create`` a file holding no schema yet is refused as no database (``no_database_error``)."""
    _MIGRATIONS.ensure(conn, model_name, dimension, check_model=check_model, create=create)


def open_database(
    path: Path, model_name: str, dimension: int, *, check_model: bool = True, create: bool = True
) -> apsw.Connection:
    """``connect``, then ``ensure_schema``: a database ready for use. A file made by this call
    that the disk is too full to set up is removed again, so a full disk leaves nothing behind."""
    new = not Path(path).exists()
    try:
        conn = connect(path, create=create)
        try:
            ensure_schema(conn, model_name, dimension, check_model=check_model, create=create)
        except BaseException:
            conn.close()
            raise
    except DiskFull:
        if new:
            remove_database_files(Path(path))
        raise
    return conn


def meta(conn: apsw.Connection) -> dict[str, str]:
    """The stored model name and dimension (``ensure_schema`` compares both on every open)."""
    return dict(conn.execute("SELECT key, value FROM meta").fetchall())
