"""trimem's own keyword index on PostgreSQL, ranked with FTS5's BM25 over one user's statistics.

PostgreSQL has no ``bm25()``, so each memory's lemmatized terms are stored as postings
(``memory_terms``: user, term, memory, frequency) beside its length in terms
(``memories.terms``), and the score is computed in SQL by the rule of ``store.sql.keywords``,
which SQLite's backend follows too: N, n(t) and avgdl counted over the memories of the user
the query is scoped to, so one user's ranking never depends on another user's memories.
"""

from __future__ import annotations

from store.sql.keywords import term_score_sql, weight_sql

BM25_SQL = f"""
WITH query AS (
    SELECT term, count(*) AS repeats FROM unnest(%s::text[]) AS q(term) GROUP BY term
), corpus AS (
    SELECT count(*)::float8 AS documents, greatest(coalesce(sum(c.terms), 0), 1)::float8 AS tokens
    FROM memories c WHERE {{corpus}}
), postings AS MATERIALIZED (
    SELECT p.user_id, p.term, p.memory_rowid, p.frequency FROM memory_terms p
    WHERE {{postings}} AND p.term = ANY(%s::text[])
), weights AS (
    SELECT p.term, {weight_sql("query.repeats", "corpus.documents", "count(*)", "greatest")} AS weight
    FROM postings p JOIN query ON query.term = p.term, corpus
    GROUP BY p.term, query.repeats, corpus.documents
)
SELECT m.rowid, sum(
    {term_score_sql("w.weight", "p.frequency", "m.terms", "(corpus.tokens / corpus.documents)")}
) AS score
FROM postings p
JOIN weights w ON w.term = p.term
JOIN memories m ON m.user_id = p.user_id AND m.rowid = p.memory_rowid, corpus
WHERE {{scope}} AND ({{live}})
GROUP BY m.rowid
ORDER BY score DESC, m.rowid
LIMIT %s
"""
"""The keyword signal. Its parameters, in order: the query terms, those of ``{corpus}`` (the
user the counts are over, on ``c``), those of ``{postings}`` (the same, on ``p``), the query
terms again, then ``{scope}`` and ``{live}`` (the memories ranked, on ``m``), and the limit.
The user's postings of the query's terms are read once (``MATERIALIZED``), for their counts and
their scores; the counts and each posting's memory come from the index ``memories_keywords``
(``schema.m005_keyword_index``), not the table's rows."""
