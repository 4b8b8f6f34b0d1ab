"""The SQLite schema's numbered migrations, and the guard that keeps an older trimem's writes out.

A migration is a function of a connection and the embedding dimension; ``MIGRATIONS`` lists them
in order, and their count is the schema version this code writes (``SCHEMA_VERSION``). They are
never edited once released: a change to the schema is a new one. Running them, recording the
model and opening a file ready for use is ``schema.py``'s; this module imports nothing of the
connection's, so the connection can register the guard's function (``refuse_newer_schema``).
"""

from __future__ import annotations

from collections.abc import Callable

import apsw

from store.errors import SchemaMismatch
from store.sql.keywords import term_frequencies

SCHEMA_GUARD = "trimem_schema_check"
"""The SQL function that the guard triggers call on every write (``schema_guard_sql``)."""

VECTOR_CHUNK_ROWS = 32
"""Vectors per vec0 chunk. Each user's vectors fill chunks of their own (``user_id`` is the
partition key), and a chunk takes its whole size on disk from its first vector: 32 keeps a user
of a few memories to about 50 KB a table, while a scope of 100,000 scans some 10–25% slower
than in chunks of 1,024 (measured on 100,000 random vectors)."""

VECTOR_KEYS = {"memory_vectors": "memory_rowid", "entity_vectors": "entity_id"}
"""Each vec0 table and its key column."""


def chunk_indexes_sql(prefix: str = "") -> str:
    """An index on each vec0 table's chunks by partition (its user). vec0 finds a user's chunks
    with ``WHERE partition00 = ?`` on its ``_chunks`` shadow table, which it does not index: every
    KNN and every insert read the chunk list of the whole file, so both slowed as the file grew
    (at 854,000 memories over 854 users, a KNN took 13.6 ms and a vector insert 0.70 ms; with
    the index, 1.3 ms and 0.02 ms)."""
    return "".join(
        f"CREATE INDEX IF NOT EXISTS {prefix}{table}_chunks_by_user ON {prefix}{table}_chunks(partition00);\n"
        for table in VECTOR_KEYS
    )


def vector_tables_sql(dimension: int, prefix: str = "") -> str:
    """The two vec0 tables at ``dimension``, each vector filed with its scope and partitioned by
    its user, so a KNN within a user reads that user's chunks alone (``chunk_indexes_sql``): the
    live ones (as migration m008 made them, and as a re-embedding remakes them) or, with a
    ``prefix``, the twins a re-embedding fills (``store.sqlite.reembed``)."""
    return f"""
        CREATE VIRTUAL TABLE {prefix}memory_vectors USING vec0(
            memory_rowid INTEGER PRIMARY KEY,
            embedding float[{dimension}] distance_metric=cosine,
            user_id TEXT PARTITION KEY, agent_id TEXT, run_id TEXT,
            chunk_size={VECTOR_CHUNK_ROWS}
        );
        CREATE VIRTUAL TABLE {prefix}entity_vectors USING vec0(
            entity_id INTEGER PRIMARY KEY,
            embedding float[{dimension}] distance_metric=cosine,
            user_id TEXT PARTITION KEY, agent_id TEXT, run_id TEXT,
            chunk_size={VECTOR_CHUNK_ROWS}
        );
    """ + chunk_indexes_sql(prefix)


def m001_initial(conn: apsw.Connection, dimension: int) -> None:
    """Memories, their vectors and FTS rows, entities and links, history."""
    conn.execute(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE memories (
            rowid INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            text TEXT NOT NULL,
            text_lemmatized TEXT NOT NULL,
            hash TEXT NOT NULL,
            user_id TEXT NOT NULL DEFAULT '',
            agent_id TEXT NOT NULL DEFAULT '',
            run_id TEXT NOT NULL DEFAULT '',
            actor_id TEXT,
            role TEXT,
            metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            expiration_date TEXT
        );
        -- one memory per normalised text per scope, even with several writers
        CREATE UNIQUE INDEX memories_scope_hash ON memories(user_id, agent_id, run_id, hash);
        CREATE INDEX memories_agent ON memories(agent_id, run_id);
        CREATE INDEX memories_run ON memories(run_id);
        CREATE VIRTUAL TABLE memory_fts USING fts5(
            text_lemmatized, content='memories', content_rowid='rowid'
        );
        -- the FTS index follows its content table inside the same transaction
        CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
            INSERT INTO memory_fts(rowid, text_lemmatized) VALUES (new.rowid, new.text_lemmatized);
        END;
        CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, text_lemmatized)
            VALUES ('delete', old.rowid, old.text_lemmatized);
        END;
        CREATE TRIGGER memories_fts_update AFTER UPDATE OF text_lemmatized ON memories BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, text_lemmatized)
            VALUES ('delete', old.rowid, old.text_lemmatized);
            INSERT INTO memory_fts(rowid, text_lemmatized) VALUES (new.rowid, new.text_lemmatized);
        END;
        CREATE TABLE entities (
            id INTEGER PRIMARY KEY,
            user_id TEXT NOT NULL DEFAULT '',
            agent_id TEXT NOT NULL DEFAULT '',
            run_id TEXT NOT NULL DEFAULT '',
            text TEXT NOT NULL,
            normalized TEXT NOT NULL,
            entity_type TEXT NOT NULL,
            UNIQUE (user_id, agent_id, run_id, normalized)
        );
        CREATE TABLE memory_entities (
            memory_rowid INTEGER NOT NULL REFERENCES memories(rowid) ON DELETE CASCADE,
            entity_id INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            PRIMARY KEY (memory_rowid, entity_id)
        ) WITHOUT ROWID;
        CREATE INDEX memory_entities_entity ON memory_entities(entity_id);
        CREATE TABLE history (
            id INTEGER PRIMARY KEY,
            memory_id TEXT NOT NULL,
            event TEXT NOT NULL CHECK (event IN ('ADD', 'UPDATE', 'DELETE')),
            old_text TEXT,
            new_text TEXT,
            old_metadata TEXT,
            new_metadata TEXT,
            user_id TEXT NOT NULL DEFAULT '',
            agent_id TEXT NOT NULL DEFAULT '',
            run_id TEXT NOT NULL DEFAULT '',
            created_at TEXT NOT NULL
        );
        CREATE INDEX history_memory ON history(memory_id);
        """
        f"""
        CREATE VIRTUAL TABLE memory_vectors USING vec0(
            memory_rowid INTEGER PRIMARY KEY,
            embedding float[{dimension}] distance_metric=cosine,
            user_id TEXT, agent_id TEXT, run_id TEXT
        );
        CREATE VIRTUAL TABLE entity_vectors USING vec0(
            entity_id INTEGER PRIMARY KEY,
            embedding float[{dimension}] distance_metric=cosine,
            user_id TEXT, agent_id TEXT, run_id TEXT
        );
        """
    )


def m002_expiry_index(conn: apsw.Connection, dimension: int) -> None:
    """Expired memories are counted and skipped by every signal; index just the dated ones."""
    conn.execute(
        "CREATE INDEX memories_expiration ON memories(expiration_date) WHERE expiration_date IS NOT NULL"
    )


def m003_restore_event(conn: apsw.Connection, dimension: int) -> None:
    """History records a restore as RESTORE, not as a second ADD. SQLite cannot change a CHECK
    constraint, so the table is rebuilt from its own definition with the wider one, every row
    (and its id, so the order of events) kept. Renaming the old table first is safe: no
    trigger, view or foreign key names it."""
    (definition,) = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'history'").fetchone()
    widened = definition.replace("('ADD', 'UPDATE', 'DELETE')", "('ADD', 'UPDATE', 'DELETE', 'RESTORE')")
    conn.execute("ALTER TABLE history RENAME TO history_before_restore")
    conn.execute(widened)
    conn.execute("INSERT INTO history SELECT * FROM history_before_restore")
    conn.execute("DROP TABLE history_before_restore")  # and its index, made again:
    conn.execute("CREATE INDEX history_memory ON history(memory_id)")


def m004_tokens(conn: apsw.Connection, dimension: int) -> None:
    """Access tokens for ``trimem serve --auth tokens``: a secret's hash, never the secret."""
    conn.execute(
        """
        CREATE TABLE tokens (
            name TEXT PRIMARY KEY,
            prefix TEXT NOT NULL,
            hash TEXT NOT NULL UNIQUE,
            user_id TEXT NOT NULL DEFAULT '',
            agent_id TEXT NOT NULL DEFAULT '',
            run_id TEXT NOT NULL DEFAULT '',
            admin INTEGER NOT NULL DEFAULT 0 CHECK (admin IN (0, 1)),
            created_at TEXT NOT NULL,
            expires_on TEXT,
            last_used_at TEXT
        )
        """
    )


def m005_keyword_postings(conn: apsw.Connection, dimension: int) -> None:
    """Keyword statistics per user, as on PostgreSQL (``store.sqlite.keywords``): FTS5's
    ``bm25()`` counts N, n(t) and avgdl over the whole file, so one user's scores said whether,
    and how often, other users wrote a word. Each memory's folded terms become postings filed
    under its user and keyed by user first, its length in terms a column of its row, and each
    user's count of memories and of terms a row of ``keyword_users`` that triggers keep in step
    with ``memories`` in the same transaction. FTS5, which nothing reads any more, is dropped.
    The memories already stored are posted here, from their stored lemmas."""
    conn.execute(
        """
        DROP TRIGGER memories_fts_insert;
        DROP TRIGGER memories_fts_delete;
        DROP TRIGGER memories_fts_update;
        DROP TABLE memory_fts;
        ALTER TABLE memories ADD COLUMN terms INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE memory_terms (
            user_id TEXT NOT NULL,
            term TEXT NOT NULL,
            memory_rowid INTEGER NOT NULL REFERENCES memories(rowid) ON DELETE CASCADE,
            frequency INTEGER NOT NULL,
            PRIMARY KEY (user_id, term, memory_rowid)
        ) WITHOUT ROWID;
        CREATE INDEX memory_terms_memory ON memory_terms(memory_rowid);
        CREATE TABLE keyword_users (
            user_id TEXT PRIMARY KEY,
            memories INTEGER NOT NULL,
            terms INTEGER NOT NULL
        ) WITHOUT ROWID;
        """
    )
    stored = conn.execute("SELECT rowid, user_id, text_lemmatized FROM memories").fetchall()
    for rowid, user_id, text_lemmatized in stored:
        frequencies = term_frequencies(text_lemmatized)
        conn.executemany(
            "INSERT INTO memory_terms(user_id, term, memory_rowid, frequency) VALUES (?, ?, ?, ?)",
            [(user_id, term, rowid, frequency) for term, frequency in frequencies.items()],
        )
        conn.execute("UPDATE memories SET terms = ? WHERE rowid = ?", (frequencies.total(), rowid))
    conn.execute(
        """
        INSERT INTO keyword_users(user_id, memories, terms)
        SELECT user_id, count(*), sum(terms) FROM memories GROUP BY user_id;
        -- each user's N and total length follow its memories inside the same transaction
        CREATE TRIGGER memories_keyword_insert AFTER INSERT ON memories BEGIN
            INSERT INTO keyword_users(user_id, memories, terms) VALUES (new.user_id, 1, new.terms)
            ON CONFLICT(user_id) DO UPDATE SET memories = memories + 1, terms = terms + excluded.terms;
        END;
        CREATE TRIGGER memories_keyword_delete AFTER DELETE ON memories BEGIN
            UPDATE keyword_users SET memories = memories - 1, terms = terms - old.terms WHERE user_id = old.user_id;
            DELETE FROM keyword_users WHERE user_id = old.user_id AND memories = 0;
        END;
        CREATE TRIGGER memories_keyword_update AFTER UPDATE OF user_id, terms ON memories BEGIN
            UPDATE keyword_users SET memories = memories - 1, terms = terms - old.terms WHERE user_id = old.user_id;
            INSERT INTO keyword_users(user_id, memories, terms) VALUES (new.user_id, 1, new.terms)
            ON CONFLICT(user_id) DO UPDATE SET memories = memories + 1, terms = terms + excluded.terms;
            DELETE FROM keyword_users WHERE user_id = old.user_id AND memories = 0;
        END;
        """
    )


def m006_token_sessions_cleared(conn: apsw.Connection, dimension: int) -> None:
    """When ``trimem token clear-sessions`` last ended a token's sessions: sessions live in each
    server's memory, so every server reads this mark with the token and ends those opened before it."""
    conn.execute("ALTER TABLE tokens ADD COLUMN sessions_cleared_at TEXT")


def m007_analysis_degraded(conn: apsw.Connection, dimension: int) -> None:
    """A mark on each memory whose text the language model failed on, so that it holds the plain
    rule's terms and no entity links: ``doctor --check`` counts them and the next engine that can
    write analyses them again (``store.analysis.reanalysis``). The index holds only marked rows,
    so asking whether there are any costs nothing on every open."""
    conn.execute(
        """
        ALTER TABLE memories ADD COLUMN analysis_degraded INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX memories_analysis_degraded ON memories(rowid) WHERE analysis_degraded;
        """
    )


def m008_partitioned_vectors(conn: apsw.Connection, dimension: int) -> None:
    """vec0 scanned every vector in the file and filtered by scope afterwards, so one user's
    search cost grew with every other user's memories. Both vector tables are made again with
    ``user_id`` as their partition key (``vector_tables_sql``), every vector kept. vec0 tables
    cannot be renamed, so the vectors wait in a plain table while the new ones are made."""
    for table, key in VECTOR_KEYS.items():
        conn.execute(
            f"CREATE TABLE m008_{table} AS SELECT {key}, embedding, user_id, agent_id, run_id FROM {table}"
        )
        conn.execute(f"DROP TABLE {table}")
    conn.execute(vector_tables_sql(dimension))
    for table, key in VECTOR_KEYS.items():
        conn.execute(
            f"INSERT INTO {table}({key}, embedding, user_id, agent_id, run_id) "
            f"SELECT {key}, embedding, user_id, agent_id, run_id FROM m008_{table} ORDER BY user_id, {key}"
        )
        conn.execute(f"DROP TABLE m008_{table}")


def m009_scoped_expiry_index(conn: apsw.Connection, dimension: int) -> None:
    """Counting a scope's expired memories walked every dated memory in the file: the expiry
    index leads with the user now, as on PostgreSQL, so the count reads the user's dated ones."""
    conn.execute(
        """
        DROP INDEX memories_expiration;
        CREATE INDEX memories_expiration ON memories(user_id, expiration_date) WHERE expiration_date IS NOT NULL;
        """
    )


def m010_chunks_by_user(conn: apsw.Connection, dimension: int) -> None:
    """Index each vec0 table's chunks by user (``chunk_indexes_sql``): a search and a write
    then find one user's chunks without reading the chunk list of every user."""
    conn.execute(chunk_indexes_sql())


def m011_posting_lengths(conn: apsw.Connection, dimension: int) -> None:
    """Each keyword posting carries its memory's length in terms, so a search in a user's whole
    scope scores the postings of its terms without reading their memories
    (``store.sqlite.keywords.USER_POSTINGS_SQL``). A process of an earlier trimem still open on the
    file posts without a length (0, the column's default); the trigger gives such a posting its
    memory's length, which that process stored first."""
    conn.execute(
        """
        ALTER TABLE memory_terms ADD COLUMN length INTEGER NOT NULL DEFAULT 0;
        UPDATE memory_terms SET length = (SELECT m.terms FROM memories m WHERE m.rowid = memory_terms.memory_rowid);
        CREATE TRIGGER memory_terms_length AFTER INSERT ON memory_terms WHEN new.length = 0 BEGIN
            UPDATE memory_terms SET length = (SELECT m.terms FROM memories m WHERE m.rowid = new.memory_rowid)
            WHERE user_id = new.user_id AND term = new.term AND memory_rowid = new.memory_rowid;
        END;
        """
    )


def m012_vector_changes(conn: apsw.Connection, dimension: int) -> None:
    """A log of which memories' vectors changed, so that a process holding a user's vectors in
    memory (``store.sqlite.held_vectors``) brings them up to date by reading only what changed.
    Each memory has one row per user it was filed under, numbered anew (``seq``, never reused)
    whenever its row is inserted, deleted, rewritten or moved; triggers write it inside the
    write's transaction, so a process of an earlier version, still open on the file, is logged
    too. The rows of a user who has no memory left go with its last one. Every stored memory is
    logged here once."""
    conn.execute(
        """
        CREATE TABLE vector_changes (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id TEXT NOT NULL,
            memory_rowid INTEGER NOT NULL,
            UNIQUE (user_id, memory_rowid)
        );
        CREATE INDEX vector_changes_by_user ON vector_changes(user_id, seq);
        INSERT INTO vector_changes(user_id, memory_rowid) SELECT user_id, rowid FROM memories ORDER BY user_id, rowid;
        CREATE TRIGGER memories_vector_insert AFTER INSERT ON memories BEGIN
            INSERT OR REPLACE INTO vector_changes(user_id, memory_rowid) VALUES (new.user_id, new.rowid);
        END;
        CREATE TRIGGER memories_vector_delete AFTER DELETE ON memories BEGIN
            INSERT OR REPLACE INTO vector_changes(user_id, memory_rowid) VALUES (old.user_id, old.rowid);
            DELETE FROM vector_changes WHERE user_id = old.user_id
                AND NOT EXISTS (SELECT 1 FROM memories WHERE user_id = old.user_id);
        END;
        CREATE TRIGGER memories_vector_update AFTER UPDATE OF text, user_id, agent_id, run_id ON memories BEGIN
            INSERT OR REPLACE INTO vector_changes(user_id, memory_rowid) VALUES (old.user_id, old.rowid);
            INSERT OR REPLACE INTO vector_changes(user_id, memory_rowid) VALUES (new.user_id, new.rowid);
        END;
        """
    )


def schema_guard_sql(version: int, tables: tuple[str, ...]) -> str:
    """Triggers that make every insert, update and delete of ``tables`` call
    ``trimem_schema_check(version)`` first (``connection.connection_schema_guard``): only a
    process whose code knows schema ``version`` may write them. Made again if there (a migration
    that raises the number replaces the triggers of an earlier one). A migration that rebuilds a
    guarded table (as m003 did) drops its triggers with it, and makes them again."""
    return "".join(
        f"DROP TRIGGER IF EXISTS {table}_schema_guard_{event.lower()};\n"
        f"CREATE TRIGGER {table}_schema_guard_{event.lower()} BEFORE {event} ON {table} "
        f"BEGIN SELECT {SCHEMA_GUARD}({version}); END;\n"
        for table in tables
        for event in ("INSERT", "UPDATE", "DELETE")
    )


def m013_schema_guard(conn: apsw.Connection, dimension: int) -> None:
    """A server of an earlier trimem left running while this one migrated the file went on writing
    as its code did: after m011 its adds kept no posting lengths, so keyword search could not find
    them until ``doctor --repair`` (PostgreSQL refuses such writes). Every table that a write of
    trimem begins with now calls ``trimem_schema_check(13)`` on each change (``schema_guard_sql``),
    a function only this trimem and later ones register: an earlier one's write fails and rolls
    back whole. ``history`` and the tables its triggers keep (``keyword_users``,
    ``vector_changes``) are only written in a transaction that writes ``memories``; vec0 tables
    take no triggers."""
    conn.execute(schema_guard_sql(13, ("memories", "memory_terms", "entities", "memory_entities", "tokens", "meta")))


MIGRATIONS: tuple[Callable[[apsw.Connection, int], None], ...] = (
    m001_initial, m002_expiry_index, m003_restore_event, m004_tokens, m005_keyword_postings,
    m006_token_sessions_cleared, m007_analysis_degraded, m008_partitioned_vectors,
    m009_scoped_expiry_index, m010_chunks_by_user, m011_posting_lengths, m012_vector_changes,
    m013_schema_guard,
)
SCHEMA_VERSION = len(MIGRATIONS)


def refuse_newer_schema(version: int) -> None:
    """``trimem_schema_check``: refuse a write to a table whose guard triggers name a schema
    newer than ``SCHEMA_VERSION``, which a newer trimem migrated the file to while this process
    had it open; the write's transaction rolls back whole (``write_transaction``)."""
    if version > SCHEMA_VERSION:
        raise SchemaMismatch(
            f"this database was upgraded to schema version {version} by a newer trimem while this one "
            f"(schema version {SCHEMA_VERSION}) had it open, so nothing was written; restart this server "
            "(or command) so that the newer trimem writes, then try again"
        )
