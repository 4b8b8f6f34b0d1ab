"""The invariants of an SQLite store, as queries naming the rows that break each one, and the
few reads and writes ``store.sqlite.maintenance`` needs beside them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import apsw

from store.analysis.reanalysis import DEGRADED_CHECK, DEGRADED_DETAIL
from store.backend import MemoryRow
from store.sql.text import DEGRADED_COUNT_SQL, memory_columns

from .keywords import USERS_SQL
from .sql import DIALECT

_SCOPE_DIFFERS = "{a}.user_id IS NOT {b}.user_id OR {a}.agent_id IS NOT {b}.agent_id OR {a}.run_id IS NOT {b}.run_id"

REQUIRED_TABLES = (
    "meta", "schema_version", "memories", "memory_vectors", "memory_terms", "keyword_users",
    "entities", "entity_vectors", "memory_entities", "history",
)

class Probe(NamedTuple):
    """One invariant: the SQL naming the rows that break it, and how each such row reads
    in a report (``str.format`` over the row's columns)."""

    sql: str
    message: str


INVARIANT_PROBES: dict[str, Probe] = {
    # every memory has exactly one vector, in its own scope
    "memory_without_vector": Probe(
        "SELECT rowid, id FROM memories WHERE rowid NOT IN (SELECT memory_rowid FROM memory_vectors)",
        "memory '{1}' (rowid {0}) has no vector",
    ),
    "vector_without_memory": Probe(
        "SELECT memory_rowid FROM memory_vectors WHERE memory_rowid NOT IN (SELECT rowid FROM memories)",
        "vector for rowid {0} belongs to no memory",
    ),
    "vector_scope": Probe(
        "SELECT m.rowid, m.id FROM memory_vectors v JOIN memories m ON m.rowid = v.memory_rowid "
        f"WHERE {_SCOPE_DIFFERS.format(a='v', b='m')}",
        "memory '{1}' (rowid {0}) has a vector filed under another scope",
    ),
    # keyword postings belong to a memory, filed under its user, and each user's statistics
    # count that user's memories (whether each memory's postings are its text's: keywords.misposted)
    "terms_without_memory": Probe(
        "SELECT DISTINCT memory_rowid FROM memory_terms WHERE memory_rowid NOT IN (SELECT rowid FROM memories)",
        "keyword postings of rowid {0} belong to no memory",
    ),
    "terms_scope": Probe(
        "SELECT DISTINCT m.rowid, m.id FROM memory_terms p JOIN memories m ON m.rowid = p.memory_rowid "
        "WHERE p.user_id IS NOT m.user_id",
        "memory '{1}' (rowid {0}) has keyword postings filed under another user",
    ),
    "keyword_users": Probe(
        f"SELECT coalesce(c.user_id, u.user_id) FROM ({USERS_SQL}) c "
        "FULL JOIN keyword_users u ON u.user_id = c.user_id "
        "WHERE c.memories IS NOT u.memories OR c.terms IS NOT u.terms",
        "the keyword statistics of user_id={0!r} do not count that user's memories",
    ),
    # links join a memory and an entity of the same scope (these two cover the only foreign keys)
    "link_without_memory": Probe(
        "SELECT memory_rowid, entity_id FROM memory_entities WHERE memory_rowid NOT IN (SELECT rowid FROM memories)",
        "entity link {0}→{1} points to no memory",
    ),
    "link_without_entity": Probe(
        "SELECT memory_rowid, entity_id FROM memory_entities WHERE entity_id NOT IN (SELECT id FROM entities)",
        "entity link {0}→{1} points to no entity",
    ),
    "link_scope": Probe(
        "SELECT l.memory_rowid, l.entity_id FROM memory_entities l JOIN memories m ON m.rowid = l.memory_rowid "
        f"JOIN entities e ON e.id = l.entity_id WHERE {_SCOPE_DIFFERS.format(a='m', b='e')}",
        "memory rowid {0} is linked to entity {1} of another scope",
    ),
    # every entity is linked and has exactly one vector, in its own scope
    "entity_without_links": Probe(
        "SELECT id, normalized FROM entities WHERE id NOT IN (SELECT entity_id FROM memory_entities)",
        "entity {0} ({1!r}) is linked to no memory",
    ),
    "entity_without_vector": Probe(
        "SELECT id, normalized FROM entities WHERE id NOT IN (SELECT entity_id FROM entity_vectors)",
        "entity {0} ({1!r}) has no vector",
    ),
    "entity_vector_without_entity": Probe(
        "SELECT entity_id FROM entity_vectors WHERE entity_id NOT IN (SELECT id FROM entities)",
        "entity vector {0} belongs to no entity",
    ),
    "entity_vector_scope": Probe(
        "SELECT e.id, e.normalized FROM entity_vectors v JOIN entities e ON e.id = v.entity_id "
        f"WHERE {_SCOPE_DIFFERS.format(a='v', b='e')}",
        "entity {0} ({1!r}) has a vector filed under another scope",
    ),
    # every memory was analysed by the language model (its failure left plain terms and a mark)
    DEGRADED_CHECK: Probe(DEGRADED_COUNT_SQL, DEGRADED_DETAIL),
}


def missing_tables(conn: apsw.Connection) -> list[str]:
    """Tables that this database lacks."""
    present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return [table for table in REQUIRED_TABLES if table not in present]


def integrity_check(conn: apsw.Connection) -> list[str]:
    """SQLite's own page, index and constraint check: ``['ok']`` when healthy."""
    return [row[0] for row in conn.execute("PRAGMA integrity_check")]


def probe(conn: apsw.Connection, name: str) -> list[tuple[Any, ...]]:
    """The rows that break the invariant ``INVARIANT_PROBES[name]``."""
    return conn.execute(INVARIANT_PROBES[name].sql).fetchall()


def memories_without_links(conn: apsw.Connection) -> list[MemoryRow]:
    """Memories linked to no entity (most have none to link; a check or repair re-reads them)."""
    return [
        DIALECT.memory_row(row)
        for row in conn.execute(
            f"SELECT {memory_columns()} FROM memories WHERE rowid NOT IN (SELECT memory_rowid FROM memory_entities)"
        )
    ]


def entity_names(conn: apsw.Connection, entity_ids: Sequence[int]) -> dict[int, str]:
    """Normalised text of entities by id (what their vectors embed)."""
    if not entity_ids:
        return {}
    among, params = DIALECT.in_sql("id", entity_ids)
    return dict(conn.execute(f"SELECT id, normalized FROM entities WHERE {among}", params))

