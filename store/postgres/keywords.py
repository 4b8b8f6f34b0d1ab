"""trimem's own keyword index on PostgreSQL, ranked with FTS5's BM25 over one user's statistics.

PostgreSQL has no ``bm25()``, so each memory's lemmatized terms are stored as postings
(``memory_terms``: user, term, memory, frequency, and the memory's length in terms, also in
``memories.terms``), and the score is computed in SQL by the rule of ``store.sql.keywords``,
which SQLite's backend follows too: N, n(t) and avgdl counted over the memories of the user
the query is scoped to, so one user's ranking never depends on another user's memories. Each
user's N and total length are kept in ``keyword_counts`` as its memories change
(``schema.m011_keyword_counts``), as SQLite keeps them in ``keyword_users``.
"""

from __future__ import annotations

from store.sql.keywords import term_score_sql, weight_sql

KEYWORD_WEIGHTS_SQL = f"""
WITH query AS (
    SELECT term, count(*) AS repeats FROM unnest(%s::text[]) AS q(term) GROUP BY term
), corpus AS (
    SELECT coalesce(sum(c.memories), 0)::float8 AS documents, greatest(coalesce(sum(c.terms), 0), 1)::float8 AS tokens
    FROM keyword_counts c WHERE {{corpus}}
), postings AS MATERIALIZED (
    SELECT p.user_id, p.term, p.memory_rowid, p.frequency, p.length FROM memory_terms p
    WHERE {{postings}} AND p.term = ANY(%s::text[])
), weights AS (
    SELECT p.term, {weight_sql("query.repeats", "corpus.documents", "count(*)", "greatest")} AS weight
    FROM postings p JOIN query ON query.term = p.term, corpus
    GROUP BY p.term, query.repeats, corpus.documents
)"""
"""What both keyword statements start from: the query's terms, the user's N and total length,
the user's postings of the query's terms (read once, ``MATERIALIZED``, for their counts and
their scores) and each term's weight. Its parameters: the query terms, those of ``{corpus}``
(the user the counts are over, on ``c``), those of ``{postings}`` (the same, on ``p``), and the
query terms again. The user's N and length are the sum of its rows of ``keyword_counts``
(``schema.m011_keyword_counts``), not counted from its memories."""

SCORE_SQL = term_score_sql("w.weight", "p.frequency", "p.length", "(corpus.tokens / corpus.documents)")
"""A posting's share of its memory's score, from the posting alone (it carries the memory's length)."""

BM25_SQL = KEYWORD_WEIGHTS_SQL + f"""
SELECT m.rowid, sum({SCORE_SQL}) AS score, corpus.documents
FROM postings p
JOIN weights w ON w.term = p.term
JOIN memories m ON m.user_id = p.user_id AND m.rowid = p.memory_rowid, corpus
WHERE {{scope}} AND ({{live}})
GROUP BY m.rowid, corpus.documents
ORDER BY score DESC, m.rowid
LIMIT %s
"""
"""The keyword signal over the memories the scope and filters let through, each row with the
user's N. Its parameters after ``KEYWORD_WEIGHTS_SQL``'s: those of ``{scope}`` and ``{live}``
(the memories ranked, on ``m``), and the limit; each posting meets its memory in the index
``memories_keywords``."""

USER_POSTINGS_SQL = """
SELECT NULL, coalesce(sum(c.memories), 0)::float8, greatest(coalesce(sum(c.terms), 0), 1)::float8, NULL::bytea,
    NULL::bytea, NULL::bytea, {expired}
FROM keyword_counts c WHERE {corpus}
UNION ALL
SELECT p.term, NULL, NULL, string_agg(int8send(p.memory_rowid), ''), string_agg(int4send(p.frequency), ''),
    string_agg(int4send(p.length), ''), NULL
FROM memory_terms p WHERE {postings} AND p.term = ANY(%s::text[]) GROUP BY p.term
"""
"""What the keyword signal over a user's whole scope reads, to score in the process
(``store.sql.keywords.best_by_postings``): one row (its term NULL) with the user's N, total
length and whether any of its memories has expired (``{expired}``: ``EXPIRED_SQL``, or FALSE when
no day is asked about), then one row for
each of the query's terms the user wrote, with its postings as three byte strings: its memories,
their frequencies of it and their lengths, each a big-endian integer (8, 4 and 4 bytes), so they
reach numpy without a Python object each (an array's elements as Python ints took 5 ms of 20 for
44,000 postings). Its parameters: those of ``{expired}``, of ``{corpus}`` (the user, on ``c``), of
``{postings}`` (the same, on ``p``), and the query terms. The reads are the user's few rows of
``keyword_counts``, an index-only scan (``memory_terms``' primary key, which carries each posting's
frequency and length since migration 9) and a probe of the expiry index. Summing PostgreSQL's rows per memory
took 60 ms for one scope of 100,000 chat turns, whose common terms have tens of thousands of
postings; this read and the sum in numpy take under 20."""

EXPIRED_SQL = "EXISTS (SELECT 1 FROM memories e WHERE {user} AND {expired})"
"""Whether a memory of the user (``{user}``, on ``e``) has expired (``{expired}``), read through the
index of dated memories (``memories_expiration``)."""
