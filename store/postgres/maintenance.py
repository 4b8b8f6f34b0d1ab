"""What ``trimem doctor`` reads of a PostgreSQL database: versions, and the checks it can run.

A backup is PostgreSQL's own ``pg_dump`` (``docs/postgres.md``), not something trimem redoes.
"""

from __future__ import annotations

from typing import Any

import psycopg

from store.analysis.reanalysis import DEGRADED_CHECK, DEGRADED_DETAIL
from store.records import Violation
from store.sql.text import DEGRADED_COUNT_SQL

from .schema import SCHEMA_VERSION

PROBES = {
    "memory_terms": (
        ("SELECT m.rowid FROM memories m WHERE m.terms <> coalesce((SELECT sum(p.frequency) FROM memory_terms p "
        "WHERE p.user_id = m.user_id AND p.memory_rowid = m.rowid), 0) OR EXISTS (SELECT 1 FROM memory_terms p "
        "WHERE p.user_id = m.user_id AND p.memory_rowid = m.rowid AND p.length <> m.terms) ORDER BY m.rowid LIMIT 100"),
        "memory {} has keyword postings that disagree with its length in terms",
    ),
    "keyword_counts": (
        ("SELECT coalesce(m.user_id, k.user_id) FROM (SELECT user_id, count(*) AS n, coalesce(sum(terms), 0) AS t "
        "FROM memories GROUP BY user_id) m FULL JOIN (SELECT user_id, sum(memories) AS n, sum(terms) AS t "
        "FROM keyword_counts GROUP BY user_id) k ON k.user_id = m.user_id "
        "WHERE coalesce(m.n, 0) <> coalesce(k.n, 0) OR coalesce(m.t, 0) <> coalesce(k.t, 0) ORDER BY 1 LIMIT 100"),
        "user {} has keyword counts (its memories and their length in terms) that disagree with its memories",
    ),
    "orphan_entities": (
        ("SELECT e.id FROM entities e WHERE NOT EXISTS (SELECT 1 FROM memory_entities l "
        "WHERE l.user_id = e.user_id AND l.entity_id = e.id) ORDER BY e.id LIMIT 100"),
        "entity {} is linked to no memory",
    ),
    "link_scope": (
        ("SELECT l.memory_rowid, l.entity_id FROM memory_entities l "
        "JOIN memories m ON m.user_id = l.user_id AND m.rowid = l.memory_rowid "
        "JOIN entities e ON e.user_id = l.user_id AND e.id = l.entity_id "
        "WHERE (m.agent_id, m.run_id) <> (e.agent_id, e.run_id) ORDER BY 1, 2 LIMIT 100"),
        "memory {} is linked to entity {} of another scope",
    ),
    DEGRADED_CHECK: (DEGRADED_COUNT_SQL, DEGRADED_DETAIL),
}
"""Each derived-row invariant: the rows that break it, and the sentence for each."""


def versions(conn: psycopg.Connection) -> dict[str, Any]:
    """The server's and the extensions' versions."""
    extensions = dict(conn.execute("SELECT extname, extversion FROM pg_extension ORDER BY extname").fetchall())
    return {"postgresql": conn.execute("SHOW server_version").fetchone()[0], "extensions": extensions}


def check(conn: psycopg.Connection) -> list[Violation]:
    """Every broken invariant: the schema version, the pgvector extension, indexes left
    invalid (a ``CREATE INDEX CONCURRENTLY`` that failed), and the derived rows."""
    violations = []
    version = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0]
    if version != SCHEMA_VERSION:
        violations.append(Violation("schema", f"schema version {version}, this trimem writes {SCHEMA_VERSION}"))
    if "vector" not in versions(conn)["extensions"]:
        violations.append(Violation("extension", "the pgvector extension is not installed in this database"))
    for (index,) in conn.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND NOT (i.indisvalid AND i.indisready) ORDER BY c.relname"
    ):
        violations.append(Violation("index", f"index {index} is not valid; REINDEX INDEX {index}"))
    for name, (sql, message) in PROBES.items():
        violations += [Violation(name, message.format(*row)) for row in conn.execute(sql)]
    return violations
