"""The PostgreSQL schema is ready to be sharded by user with Citus, read from the catalog of a
migrated store.

``create_distributed_table(table, 'user_id')`` applies to a table only if every primary key,
unique constraint and unique index holds ``user_id``, and a foreign key between two such
tables joins ``user_id`` to ``user_id``. A table without the column is a reference table
(``create_reference_table``), copied whole to every node: it must stay small and global, and
no foreign key may lead from it into a user's rows.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from store import Config, Engine

DISTRIBUTION_COLUMN = "user_id"
REFERENCE_TABLES = {"meta", "schema_version", "tokens"}
"""The tables every node holds whole: the store's settings and version, and the access tokens
(few, and looked up by hash before any user is known, so a token's own ``user_id`` is data,
not its place)."""

CONSTRAINTS_SQL = """
SELECT c.relname, con.contype, con.conname,
       ARRAY(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY k(n, i)
             JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.n ORDER BY k.i),
       f.relname,
       ARRAY(SELECT a.attname FROM unnest(con.confkey) WITH ORDINALITY k(n, i)
             JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.n ORDER BY k.i)
FROM pg_constraint con
JOIN pg_class c ON c.oid = con.conrelid
LEFT JOIN pg_class f ON f.oid = con.confrelid
WHERE c.relnamespace = current_schema()::regnamespace AND con.contype IN ('p', 'u', 'f')
"""
UNIQUE_INDEXES_SQL = """
SELECT t.relname, i.relname,
       ARRAY(SELECT a.attname FROM unnest(x.indkey) k(n) JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.n)
FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
WHERE t.relnamespace = current_schema()::regnamespace AND x.indisunique
"""
TABLES_SQL = """
SELECT c.relname, bool_or(a.attname = %s)
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
GROUP BY c.relname
"""


@pytest.mark.only_on("postgres")
def test_every_users_table_can_be_distributed_by_user_id(
    config: Config, engine_factory: Callable[[Config], Engine]
) -> None:
    with engine_factory(config):  # opening migrates the store to the current schema
        pass
    with psycopg.connect(config.store.database_url) as conn:
        tables = dict(conn.execute(TABLES_SQL, (DISTRIBUTION_COLUMN,)).fetchall())
        constraints = conn.execute(CONSTRAINTS_SQL).fetchall()
        unique_indexes = conn.execute(UNIQUE_INDEXES_SQL).fetchall()

    distributed = set(tables) - REFERENCE_TABLES
    assert REFERENCE_TABLES <= set(tables)
    assert [table for table in sorted(distributed) if not tables[table]] == [], f"a user's table without {DISTRIBUTION_COLUMN}"
    assert {"memories", "memory_terms", "entities", "memory_entities", "history"} <= distributed
    broken = []
    for table, kind, name, columns, target, target_columns in constraints:
        if kind in ("p", "u") and table in distributed and DISTRIBUTION_COLUMN not in columns:
            broken.append(f"{table}.{name}: a key without {DISTRIBUTION_COLUMN}")
        if kind == "f" and table in distributed and (
            DISTRIBUTION_COLUMN not in columns or target_columns[columns.index(DISTRIBUTION_COLUMN)] != DISTRIBUTION_COLUMN
        ):
            broken.append(f"{table}.{name}: a foreign key that does not join {DISTRIBUTION_COLUMN} to {DISTRIBUTION_COLUMN}")
        if kind == "f" and table in REFERENCE_TABLES and target in distributed:
            broken.append(f"{table}.{name}: a reference table pointing into a user's rows")
    for table, index, columns in unique_indexes:
        if table in distributed and DISTRIBUTION_COLUMN not in columns:
            broken.append(f"{table}.{index}: a unique index without {DISTRIBUTION_COLUMN}")
    assert broken == []
    assert {table for table, kind, *_ in constraints if kind == "p"} >= distributed, "a user's table without a key"
