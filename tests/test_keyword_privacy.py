"""Keyword scores are one user's own: another user's memories never move them (hardening round 3,
finding 8), and both backends compute them alike.

FTS5's ``bm25()`` counted N, n(t) and avgdl over the whole SQLite file, so Bob's ``bm25_raw``
for "quokkafest tickets" went from 1.118 to 3.283 when Carol stored 25 memories naming the
festival: Bob learnt whether, and how often, another user wrote a word. Both backends now count
them over the user the query is scoped to (``store.sql.keywords``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import pytest

from store import Config, Engine, MemoryInput, load_config
from store.analysis.embeddings import OnnxEmbedder
from store.analysis.nlp import NLP
from store.analysis.reanalysis import ANALYSIS_VERSION
from store.scope import Scope
from store.sqlite import connection, migrations
from store.sqlite.sql import vector_blob

QUERY = "quokkafest tickets"
BOB = [
    "Bob bought two quokkafest tickets for Saturday",
    "Bob says the quokkafest lineup is announced in May",
    "Bob lost the tickets to the opera",
    "Bob walked the dog along the river",
    "Bob's sister lives in Perth",
]
CAROL = [f"Carol heard about quokkafest from friend number {n} at the market" for n in range(25)]
HELPER = ["The helper agent booked quokkafest tickets for the team", "The helper agent renewed the domain"]


def keyword_scores(engine: Engine, **scope: str) -> dict[str, float]:
    """Each explained hit's raw BM25, by text."""
    explanation = engine.explain(QUERY, top_k=50, threshold=0.0, **scope)
    return {hit.memory.text: hit.details.bm25_raw for hit in explanation.hits}


def test_another_users_memories_never_change_a_users_keyword_scores(engine: Engine) -> None:
    engine.add_many([MemoryInput(text) for text in BOB], user_id="bob")
    alone = keyword_scores(engine, user_id="bob")
    assert alone[BOB[0]] > alone[BOB[1]] > 0 and alone[BOB[2]] > 0  # both terms, one each

    engine.add_many([MemoryInput(text) for text in CAROL], user_id="carol")
    engine.add_many([MemoryInput(text) for text in HELPER], agent_id="helper")
    assert keyword_scores(engine, user_id="bob") == alone
    assert keyword_scores(engine, user_id="carol")[CAROL[0]] > 0  # Carol's own words do count for her
    engine.delete_all(user_id="carol")
    assert keyword_scores(engine, user_id="bob") == alone

    # Bob's own memories do move his scores: the statistics are his, not constants
    engine.add("Bob gave his quokkafest wristband to a neighbour", user_id="bob")
    assert keyword_scores(engine, user_id="bob")[BOB[0]] != alone[BOB[0]]


def test_the_raw_score_is_fts5s_bm25_over_the_users_own_memories(engine: Engine) -> None:
    """What FTS5's ``bm25()`` gives over a table holding only Bob's memories, so the sigmoid
    brackets fitted to FTS5 hold, on both backends, however many users the store holds."""
    engine.add_many([MemoryInput(text) for text in CAROL], user_id="carol")
    engine.add_many([MemoryInput(text) for text in BOB], user_id="bob")
    terms = engine.nlp.analyze_query(QUERY, entities=False).lemmatized.split()
    with engine.backend.snapshot() as view:
        ours = dict(view.bm25_memories(terms, Scope("bob"), 100, None, None))
        texts = {row.rowid: row.text for row in view.export_memories(Scope("bob"), None)}

    reference = apsw.Connection(":memory:")
    reference.execute("CREATE VIRTUAL TABLE f USING fts5(t)")
    with reference:
        for (rowid, text), analysis in zip(texts.items(), engine.nlp.analyze_batch(list(texts.values()))):
            reference.execute("INSERT INTO f(rowid, t) VALUES (?, ?)", (rowid, analysis.lemmatized))
    match = " OR ".join(f'"{term}"' for term in terms)
    fts5 = dict(reference.execute("SELECT rowid, -bm25(f) FROM f WHERE f MATCH ?", (match,)))

    assert len(fts5) == 3 and set(ours) == set(fts5)
    assert ours == pytest.approx(fts5, rel=1e-12)


@pytest.fixture
def both_stores(
    tmp_path: Path, model_cache: Path, postgres_url: str, engine_factory: Callable[..., Engine]
) -> Iterator[list[Engine]]:
    """An SQLite file and a PostgreSQL database, each holding the same memories of Bob, Carol
    and an agent that names no user."""
    base = load_config(environ={}).replace("store", model_cache=str(model_cache))
    configs: list[Config] = [
        base.replace("store", db_path=str(tmp_path / "memories.db")),
        base.replace("store", database_url=postgres_url),
    ]
    engines = [engine_factory(config) for config in configs]
    for engine in engines:
        engine.add_many([MemoryInput(text) for text in BOB], user_id="bob")
        engine.add_many([MemoryInput(text) for text in CAROL], user_id="carol")
        engine.add_many([MemoryInput(text) for text in HELPER], agent_id="helper")
    yield engines
    for engine in engines:
        engine.close()


@pytest.mark.parametrize("scope", [{"user_id": "bob"}, {"user_id": "carol"}, {"agent_id": "helper"}])
def test_sqlite_and_postgresql_give_the_same_raw_bm25(both_stores: list[Engine], scope: dict[str, str]) -> None:
    """The same memories give the same scores on both backends: per user, and over every user
    for a scope that names none (the helper agent's)."""
    sqlite, postgres = (keyword_scores(engine, **scope) for engine in both_stores)
    assert any(score > 0 for score in sqlite.values())
    assert sqlite == pytest.approx(postgres, rel=1e-12)


def schema_4_database(path: Path, embedder: OnnxEmbedder, nlp: NLP, memories: list[tuple[str, str]]) -> None:
    """A database as trimem of schema version 4 made it: (user, text) memories in FTS5, whose
    ``bm25()`` counts the whole file."""
    texts = [text for _, text in memories]
    conn = apsw.Connection(str(path))
    connection.connection_sqlite_vec(conn)
    with connection.write_transaction(conn):
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (4)")
        for migration in migrations.MIGRATIONS[:4]:
            migration(conn, embedder.dimension)
        conn.execute(
            "INSERT INTO meta VALUES ('embedding_model', ?), ('embedding_dimension', ?), ('analysis_version', ?)",
            (embedder.name, str(embedder.dimension), str(ANALYSIS_VERSION)),
        )
        for rowid, ((user, text), analysis, vector) in enumerate(
            zip(memories, nlp.analyze_batch(texts), embedder.embed_batch(texts)), 1
        ):
            conn.execute(
                "INSERT INTO memories(rowid, id, text, text_lemmatized, hash, user_id, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00')",
                (rowid, f"m-{rowid}", text, analysis.lemmatized, f"h-{rowid}", user),
            )
            conn.execute(
                "INSERT INTO memory_vectors(memory_rowid, embedding, user_id, agent_id, run_id) "
                "VALUES (?, ?, ?, '', '')",
                (rowid, vector_blob(vector), user),
            )
    conn.close()


@pytest.mark.only_on("sqlite")
def test_the_migration_posts_the_stored_memories_and_their_scores_become_the_users_own(
    config: Config, db_path: Path, another_store: Callable[[str], Config], engine_factory: Callable[..., Engine],
    embedder: OnnxEmbedder, nlp: NLP,
) -> None:
    schema_4_database(db_path, embedder, nlp, [("carol", text) for text in CAROL] + [("bob", text) for text in BOB])
    with engine_factory(another_store("bob-alone")) as alone:
        alone.add_many([MemoryInput(text) for text in BOB], user_id="bob")
        expected = keyword_scores(alone, user_id="bob")
    with engine_factory(config) as engine:
        assert engine.check() == []
        assert keyword_scores(engine, user_id="bob") == pytest.approx(expected, rel=1e-12)
    conn = apsw.Connection(str(db_path))
    assert conn.execute("SELECT max(version) FROM schema_version").fetchone() == (migrations.SCHEMA_VERSION,)
    assert conn.execute("SELECT user_id, memories FROM keyword_users ORDER BY user_id").fetchall() == [
        ("bob", len(BOB)), ("carol", len(CAROL))]
    assert conn.execute("SELECT name FROM sqlite_master WHERE name LIKE '%fts%'").fetchall() == []
    conn.close()
