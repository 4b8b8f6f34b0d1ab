"""The PostgreSQL schema: its numbered migrations, the embedding model it records, and making a
database ready for use (``ensure_schema``).

Every table carries the scope and leads its key with ``user_id``, and every key that
joins two tables includes it, so the tables can be distributed by ``user_id`` (Citus)
without changing a statement (``docs/postgres.md``). Text columns compare bytewise
(``COLLATE "C"``), as SQLite does, so ids, names and timestamps sort the same on both.

Migrations are never edited once released; a change to the schema is a new one. They run
under an advisory lock, so several servers starting at once migrate once.
"""

from __future__ import annotations

import shlex
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

import psycopg

from store.errors import SchemaMismatch
from store.scope import SCOPE_KEYS
from store.sql.migrations import Migrations

from .sql import DIALECT

TEXT = 'text COLLATE "C"'
SCOPE_COLUMNS = ",\n            ".join(f"{key} {TEXT} NOT NULL DEFAULT ''" for key in SCOPE_KEYS)
"""The scope's columns, as the tables of ``initial_sql`` list them (at its indentation)."""

MIGRATION_LOCK = 0x7472696D656D  # "trimem": the advisory lock migrations run under


def initial_sql(dimension: int) -> str:
    """The first migration's SQL (``docs/schema.md`` shows it)."""
    return textwrap.dedent(f"""
        CREATE TABLE meta (key {TEXT} PRIMARY KEY, value {TEXT} NOT NULL);
        CREATE SEQUENCE memory_keys;
        CREATE TABLE memories (
            {SCOPE_COLUMNS},
            rowid bigint NOT NULL DEFAULT nextval('memory_keys'),
            id {TEXT} NOT NULL,
            text {TEXT} NOT NULL,
            text_lemmatized {TEXT} NOT NULL,
            terms integer NOT NULL,
            hash {TEXT} NOT NULL,
            actor_id {TEXT},
            role {TEXT},
            metadata jsonb NOT NULL DEFAULT '{{}}',
            created_at {TEXT} NOT NULL,
            updated_at {TEXT} NOT NULL,
            expiration_date {TEXT},
            embedding vector({dimension}) NOT NULL,
            PRIMARY KEY (user_id, rowid),
            UNIQUE (user_id, id),
            -- one memory per normalised text per scope, even with several writers
            UNIQUE (user_id, agent_id, run_id, hash)
        );
        CREATE INDEX memories_key ON memories (rowid);
        CREATE INDEX memories_id ON memories (id);
        CREATE INDEX memories_agent ON memories (agent_id, run_id);
        CREATE INDEX memories_run ON memories (run_id);
        CREATE INDEX memories_expiration ON memories (user_id, expiration_date) WHERE expiration_date IS NOT NULL;
        CREATE INDEX memories_embedding ON memories USING hnsw (embedding vector_cosine_ops);
        CREATE TABLE memory_terms (
            user_id {TEXT} NOT NULL,
            term {TEXT} NOT NULL,
            memory_rowid bigint NOT NULL,
            frequency integer NOT NULL,
            PRIMARY KEY (user_id, term, memory_rowid),
            FOREIGN KEY (user_id, memory_rowid) REFERENCES memories (user_id, rowid) ON DELETE CASCADE
        );
        CREATE INDEX memory_terms_memory ON memory_terms (user_id, memory_rowid);
        CREATE SEQUENCE entity_ids;
        CREATE TABLE entities (
            {SCOPE_COLUMNS},
            id bigint NOT NULL DEFAULT nextval('entity_ids'),
            text {TEXT} NOT NULL,
            normalized {TEXT} NOT NULL,
            entity_type {TEXT} NOT NULL,
            embedding vector({dimension}) NOT NULL,
            PRIMARY KEY (user_id, id),
            UNIQUE (user_id, agent_id, run_id, normalized)
        );
        CREATE INDEX entities_id ON entities (id);
        CREATE INDEX entities_embedding ON entities USING hnsw (embedding vector_cosine_ops);
        CREATE TABLE memory_entities (
            user_id {TEXT} NOT NULL,
            memory_rowid bigint NOT NULL,
            entity_id bigint NOT NULL,
            PRIMARY KEY (user_id, memory_rowid, entity_id),
            FOREIGN KEY (user_id, memory_rowid) REFERENCES memories (user_id, rowid) ON DELETE CASCADE,
            FOREIGN KEY (user_id, entity_id) REFERENCES entities (user_id, id) ON DELETE CASCADE
        );
        CREATE INDEX memory_entities_memory ON memory_entities (memory_rowid);
        CREATE INDEX memory_entities_entity ON memory_entities (entity_id);
        CREATE SEQUENCE history_ids;
        CREATE TABLE history (
            {SCOPE_COLUMNS},
            id bigint NOT NULL DEFAULT nextval('history_ids'),
            memory_id {TEXT} NOT NULL,
            event {TEXT} NOT NULL CHECK (event IN ('ADD', 'UPDATE', 'DELETE', 'RESTORE')),
            old_text {TEXT},
            new_text {TEXT},
            old_metadata jsonb,
            new_metadata jsonb,
            created_at {TEXT} NOT NULL,
            PRIMARY KEY (user_id, id)
        );
        CREATE INDEX history_memory ON history (memory_id);
    """).strip()


def m001_initial(conn: psycopg.Connection, dimension: int) -> None:
    """Memories with their vectors and keyword postings, entities and links, history."""
    conn.execute(initial_sql(dimension))


def tokens_sql() -> str:
    """The second migration's SQL (``docs/schema.md`` shows it)."""
    return textwrap.dedent(f"""
        CREATE TABLE tokens (
            name {TEXT} PRIMARY KEY,
            prefix {TEXT} NOT NULL,
            hash {TEXT} NOT NULL UNIQUE,
            {SCOPE_COLUMNS},
            admin boolean NOT NULL DEFAULT false,
            created_at {TEXT} NOT NULL,
            expires_on {TEXT},
            last_used_at {TEXT}
        );
    """).strip()


def m002_tokens(conn: psycopg.Connection, dimension: int) -> None:
    """Access tokens for ``trimem serve --auth tokens``: a secret's hash, never the secret. Not
    per-user data (one lookup by hash per request, from any user's server): under Citus it is a
    reference table (``docs/postgres.md``)."""
    conn.execute(tokens_sql())


def token_sessions_sql() -> str:
    """The third migration's SQL (``docs/schema.md`` shows it)."""
    return f"ALTER TABLE tokens ADD COLUMN sessions_cleared_at {TEXT};"


def m003_token_sessions_cleared(conn: psycopg.Connection, dimension: int) -> None:
    """When ``trimem token clear-sessions`` last ended a token's sessions: sessions live in each
    server's memory, so every server reads this mark with the token and ends those opened before it."""
    conn.execute(token_sessions_sql())


def analysis_degraded_sql() -> str:
    """The fourth migration's SQL (``docs/schema.md`` shows it)."""
    return textwrap.dedent("""
        ALTER TABLE memories ADD COLUMN analysis_degraded boolean NOT NULL DEFAULT false;
        CREATE INDEX memories_analysis_degraded ON memories (user_id, rowid) WHERE analysis_degraded;
    """).strip()


def m004_analysis_degraded(conn: psycopg.Connection, dimension: int) -> None:
    """The mark SQLite's ``m007_analysis_degraded`` adds (a memory the language model failed on,
    analysed again later), as a boolean; its index, keyed by user first as every key here, holds
    only the marked rows."""
    conn.execute(analysis_degraded_sql())


def keyword_index_sql() -> str:
    """The fifth migration's SQL (``docs/schema.md`` shows it)."""
    return "CREATE INDEX memories_keywords ON memories (user_id, rowid) INCLUDE (terms, expiration_date);"


def m005_keyword_index(conn: psycopg.Connection, dimension: int) -> None:
    """What the keyword signal reads of a memory (its length in terms, whether it has expired),
    beside its key: the user's statistics are counted, and each posting meets its memory, from
    this index alone instead of the table's wide rows (a scan of 100,000 rows of one user took
    82 ms, the index 10 ms)."""
    conn.execute(keyword_index_sql())


def posting_lengths_sql() -> str:
    """The sixth migration's SQL (``docs/schema.md`` shows it)."""
    return textwrap.dedent("""
        ALTER TABLE memory_terms ADD COLUMN length integer NOT NULL DEFAULT 0;
        UPDATE memory_terms p SET length = m.terms FROM memories m WHERE m.user_id = p.user_id AND m.rowid = p.memory_rowid;
        ALTER TABLE memory_terms ALTER COLUMN length DROP DEFAULT;
    """).strip()


def m006_posting_lengths(conn: psycopg.Connection, dimension: int) -> None:
    """SQLite's ``m011_posting_lengths``: each keyword posting carries its memory's length in
    terms, so a search in a user's whole scope scores the postings of its terms without reading
    their memories (``store.postgres.keywords.USER_POSTINGS_SQL``). The column keeps no default: a
    server of an earlier trimem still running on the database posts without a length, and its
    write is refused (nothing of it kept) rather than stored with a wrong one."""
    conn.execute(posting_lengths_sql())


def vectors_inline_sql() -> str:
    """The seventh migration's SQL (``docs/schema.md`` shows it)."""
    return textwrap.dedent("""
        ALTER TABLE memories ALTER COLUMN embedding SET STORAGE MAIN;
        ALTER TABLE entities ALTER COLUMN embedding SET STORAGE MAIN;
    """).strip()


def m007_vectors_inline(conn: psycopg.Connection, dimension: int) -> None:
    """Each vector kept in its row. pgvector lets PostgreSQL move a vector out of its row, into
    the table's TOAST table, once the row passes about 2 kB, as 4 in 10 LoCoMo turns with 384 floats do;
    an exact scan of a scope then reads each vector through the TOAST index (10,000 memories of
    one user: 17 ms; kept in their rows, 8 ms). ``MAIN`` moves a vector out only when its row would
    not fit in a page. Rows written before keep their vectors where they are until the table is
    rewritten (docs/postgres.md)."""
    conn.execute(vectors_inline_sql())


def denser_graphs_sql() -> str:
    """The eighth migration's SQL (``docs/schema.md`` shows it)."""
    return textwrap.dedent("""
        ALTER INDEX memories_embedding SET (ef_construction = 128);
        ALTER INDEX entities_embedding SET (ef_construction = 128);
    """).strip()


def m008_denser_graphs(conn: psycopg.Connection, dimension: int) -> None:
    """HNSW graphs built with twice pgvector's default candidate list (``ef_construction`` 64).
    Searching one scope of 100,000 LoCoMo turns (``hnsw.ef_search`` 800), two builds at 64 found
    0.967 and 0.989 of the exact ten nearest; two at 128, 0.990 and 1.000 (docs/benchmarks.md).
    Each vector inserted after it is linked with the longer list (about 0.4 ms more per row at
    100,000); an index built before keeps its graph until it is rebuilt (docs/postgres.md)."""
    conn.execute(denser_graphs_sql())


def postings_covered_sql() -> str:
    """The ninth migration's SQL (``docs/schema.md`` shows it)."""
    return textwrap.dedent("""
        ALTER TABLE memory_terms DROP CONSTRAINT memory_terms_pkey,
            ADD PRIMARY KEY (user_id, term, memory_rowid) INCLUDE (frequency, length);
    """).strip()


def m009_postings_covered(conn: psycopg.Connection, dimension: int) -> None:
    """The keyword index's primary key carries each posting's frequency and length, so the
    postings of a user's terms are read from the index alone (an index-only scan), not from the
    table's pages: the 44,000 postings of four common terms in one scope of 100,000 chat turns
    took 56 ms through the table, 9 from the index (``store.postgres.keywords.USER_POSTINGS_SQL``).
    The key is rebuilt under the migration's lock, about 2 s per million postings."""
    conn.execute(postings_covered_sql())


def links_counted_sql() -> str:
    """The tenth migration's SQL (``docs/schema.md`` shows it)."""
    return textwrap.dedent("""
        DROP INDEX memory_entities_entity;
        CREATE INDEX memory_entities_entity ON memory_entities (entity_id, user_id);
    """).strip()


def m010_links_counted(conn: psycopg.Connection, dimension: int) -> None:
    """An entity's links within its user are counted from the index alone (an index-only scan)
    instead of through the table's pages: the entity signal weighs each matched entity by its
    count of links, and the two most linked names of one scope of 100,000 chat turns have 52,452
    links, counted in 10-11 ms through the table and 3 from this index. It still leads with the
    entity, as the index it replaces did, so a read without a user (an agent's or a run's scope)
    and the cascade from a deleted entity find their links the same way."""
    conn.execute(links_counted_sql())


def keyword_counts_sql() -> str:
    """The eleventh migration's SQL (``docs/schema.md`` shows it)."""
    return textwrap.dedent(f"""
        CREATE TABLE IF NOT EXISTS keyword_counts (
            user_id {TEXT} NOT NULL,
            slot integer NOT NULL,
            memories bigint NOT NULL,
            terms bigint NOT NULL,
            PRIMARY KEY (user_id, slot)
        );
        LOCK TABLE keyword_counts IN EXCLUSIVE MODE;
        DELETE FROM keyword_counts;
        INSERT INTO keyword_counts (user_id, slot, memories, terms)
        SELECT user_id, 0, count(*), coalesce(sum(terms), 0) FROM memories GROUP BY user_id;
    """).strip()


def m011_keyword_counts(conn: psycopg.Connection, dimension: int) -> None:
    """Each user's N and total length in terms, kept as the memories change instead of counted by
    every search (4 to 5 ms of a search in one scope of 100,000). A user's counts are the sum of
    up to ``memories.KEYWORD_SLOTS`` rows; a write transaction adds its changes to the row of its
    server session's slot just before it commits (``MemoryWrites.write_keyword_counts``), so two
    writers of the same user wait on each other only when their sessions share a slot, and then
    only for the other's commit. Counted afresh from the memories, so running it again (in one
    transaction) recounts: the lock holds back the writers' additions, whose memories are not
    committed yet, while searches go on reading the counts before it."""
    conn.execute(keyword_counts_sql())


SCHEMA_SETTING = "trimem.schema_version"
"""The session setting in which each connection of trimem names the schema its code knows
(``store.postgres.connection.connection_schema_version``); the guard triggers read it."""
SCHEMA_GUARD_STATE = "TM001"
"""The SQLSTATE the guard raises (class ``TM`` is none of PostgreSQL's): trimem reads it as
``SchemaMismatch`` (``store.postgres.connection.driver_error``)."""
GUARDED_TABLES = ("memories", "memory_terms", "entities", "memory_entities", "history", "keyword_counts", "tokens",
                  "meta")
"""Every table a write of trimem touches (``schema_version`` is written by migrations alone)."""


def schema_guard_function_sql() -> str:
    """The twelfth migration's function (``docs/schema.md`` shows it): refuse the statement of a
    session that names no schema (a trimem from before the guard, or a client such as ``psql``)
    or an older one than its trigger's argument."""
    return textwrap.dedent(f"""
        CREATE OR REPLACE FUNCTION trimem_schema_guard() RETURNS trigger LANGUAGE plpgsql AS $guard$
        DECLARE
            writer text := nullif(current_setting('{SCHEMA_SETTING}', true), '');
            guard integer := TG_ARGV[0]::integer;
        BEGIN
            IF writer IS NULL THEN
                RAISE EXCEPTION 'this database was upgraded by a newer trimem: restart or upgrade the trimem that '
                    'writes to it' USING ERRCODE = '{SCHEMA_GUARD_STATE}';
            ELSIF writer::integer < guard THEN
                RAISE EXCEPTION 'this database was upgraded to schema version % by a newer trimem while this one '
                    '(schema version %) had it open, so nothing was written; restart this server (or command) so '
                    'that the newer trimem writes, then try again', guard, writer USING ERRCODE = '{SCHEMA_GUARD_STATE}';
            END IF;
            RETURN NULL;
        END
        $guard$;
    """).strip()


def schema_guard_sql(version: int, tables: tuple[str, ...] = GUARDED_TABLES) -> str:
    """Triggers that run ``trimem_schema_guard(version)`` before each statement that inserts,
    updates, deletes or truncates ``tables``: only a session whose code knows schema ``version``
    may write them. Made again if there, so a later migration that changes how writes are made
    raises the number by calling this with its own. Once a statement, not once a row: a COPY of
    a thousand postings asks once."""
    return "\n".join(
        f"DROP TRIGGER IF EXISTS {table}_schema_guard ON {table};\n"
        f"CREATE TRIGGER {table}_schema_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION trimem_schema_guard('{version}');"
        for table in tables
    )


def m012_schema_guard(conn: psycopg.Connection, dimension: int) -> None:
    """A server of an earlier trimem left running while a newer one migrates the database goes on
    writing as its code did: it was refused after m006 only because that column had no default,
    by chance. Every table a write touches now runs ``trimem_schema_guard`` first
    (``schema_guard_sql``), which reads the setting each connection of this trimem and later ones
    makes (``SCHEMA_SETTING``): an earlier one's write fails whole, and a later migration that
    raises the number refuses this trimem's writes with its own message. Reads are not guarded."""
    conn.execute(schema_guard_function_sql())
    conn.execute(schema_guard_sql(12))


MIGRATIONS: tuple[Callable[[psycopg.Connection, int], None], ...] = (
    m001_initial, m002_tokens, m003_token_sessions_cleared, m004_analysis_degraded, m005_keyword_index,
    m006_posting_lengths, m007_vectors_inline, m008_denser_graphs, m009_postings_covered, m010_links_counted,
    m011_keyword_counts, m012_schema_guard,
)
SCHEMA_VERSION = len(MIGRATIONS)


def _schema_state(conn: psycopg.Connection) -> tuple[int, dict[str, str]]:
    """The schema version (0 for a new database) and the ``meta`` rows."""
    if conn.execute("SELECT to_regclass('schema_version')").fetchone()[0] is None:
        return 0, {}
    version = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] or 0
    return version, dict(conn.execute("SELECT key, value FROM meta").fetchall())


def _model_mismatch(location: str, recorded: str, sizes: str, model_name: str) -> str:
    """Another model's vectors: configure the recorded one, or move the memories to a new database."""
    return (
        f"the database {location} was built with the embedding model '{recorded}'{sizes}, but the configured "
        f"model is '{model_name}'; their vectors cannot be compared. Configure '{recorded}' again "
        "(store.embedding_model, TRIMEM_EMBEDDING_MODEL), or move the memories to a new database: "
        f"`trimem export` from this one, then `trimem import` with --config naming the new database and the "
        f"model {shlex.quote(model_name)}"
    )


@contextmanager
def _migration_lock(conn: psycopg.Connection) -> Iterator[None]:
    """A transaction under the advisory lock, with the vector extension there: several servers
    starting at once migrate once. It names the schema it migrates to, so the guard triggers
    (``m012_schema_guard``) let its writes of ``meta`` and of data through, whoever opened the
    connection."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute("SELECT set_config(%s, %s, true)", (SCHEMA_SETTING, str(SCHEMA_VERSION)))
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield


def ensure_schema(conn: psycopg.Connection, model_name: str, dimension: int, location: str, *,
                  check_model: bool = True, create: bool = True) -> None:
    """Create or upgrade the schema (and the vector extension), and refuse a database built for
    another embedding model (``store.sql.migrations``)."""
    Migrations(
        MIGRATIONS, DIALECT, location, state=_schema_state, reading=lambda conn: conn.transaction(),
        locked=_migration_lock,
        missing=lambda conn: SchemaMismatch(f"{location} holds no trimem memories yet; add some first"),
        model_mismatch=partial(_model_mismatch, location),
    ).ensure(conn, model_name, dimension, check_model=check_model, create=create)


def require_model(conn: psycopg.Connection, model_name: str, location: str) -> None:
    """Refuse to go on when the database records another model than this process runs."""
    (recorded,) = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
    if recorded != model_name:
        raise SchemaMismatch(
            f"the database {location} now uses the embedding model '{recorded}', not '{model_name}' that this "
            f"process runs. Set store.embedding_model (TRIMEM_EMBEDDING_MODEL) to '{recorded}' and restart"
        )


def meta(conn: psycopg.Connection) -> dict[str, str]:
    """The stored model name and dimension, and the schema version."""
    stored = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    stored["schema_version"] = str(conn.execute("SELECT max(version) FROM schema_version").fetchone()[0])
    return stored
