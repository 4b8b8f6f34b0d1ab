"""Hand-written SQL on a test's PostgreSQL database, as trimem itself writes: the session names
the schema this code knows (``store.postgres.schema.SCHEMA_SETTING``), which the guard triggers
require of every write, so a test's own damage or recount is not refused as an older trimem's."""

from __future__ import annotations

import psycopg

from store.postgres.schema import SCHEMA_SETTING, SCHEMA_VERSION


def connect(url: str, *, autocommit: bool = True) -> psycopg.Connection:
    """A connection to ``url`` whose writes the guard lets through."""
    return psycopg.connect(url, autocommit=autocommit, options=f"-c {SCHEMA_SETTING}={SCHEMA_VERSION}")
