"""trimem's own keyword index on PostgreSQL, ranked with FTS5's BM25.

PostgreSQL has no ``bm25()``, so each memory's lemmatized terms are stored as postings
(``memory_terms``: user, term, memory, frequency) beside its length in terms, and the score
is computed in SQL with the formula and parameters of SQLite's FTS5, so the sigmoid
brackets of ``store.scoring`` hold on both backends:

    idf(t)   = max(ln((N - n(t) + 0.5) / (n(t) + 0.5)), 1e-6)
    score(D) = sum over query terms t of idf(t) * f(t,D) * (k1 + 1) / (f(t,D) + k1 * (1 - b + b * |D| / avgdl))

with k1 = 1.2 and b = 0.75; a term the query repeats counts once per repetition, as FTS5
counts each phrase of the query. N, n(t) and avgdl are counted over the memories of the
user the query is scoped to (over every user when it names none), not over the whole
database as in an SQLite file: one user's ranking never depends on another user's memories.

Terms are folded as FTS5's default ``unicode61`` tokenizer folds them (lower case; one
diacritic on an ASCII letter removed), on both sides, so "Café" in a memory and "cafe" in a
query meet. The two agree on every letter of Latin, Greek and Cyrillic; letters Unicode added
after FTS5's tables (Georgian capitals, say) are lower-cased here and not there.
"""

from __future__ import annotations

import unicodedata
from collections import Counter

K1 = 1.2
B = 0.75
MIN_IDF = 1e-6


def fold(term: str) -> str:
    """A term as ``unicode61`` (remove_diacritics 1) indexes it: case folded to one character
    where that is one, and the one diacritic of an ASCII letter removed ("é", not "ǖ" or "ǣ")."""
    folded = term.casefold()
    if len(folded) != len(term):  # "ß" -> "ss", "İ" -> "i̇": unicode61 keeps one character
        folded = "".join(ch.casefold() if len(ch.casefold()) == 1 else ch.lower()[:1] for ch in term)
    return "".join(_plain_latin(ch) for ch in folded)


def _plain_latin(ch: str) -> str:
    decomposed = unicodedata.normalize("NFD", ch)
    if len(decomposed) == 2 and decomposed[0].isascii() and unicodedata.combining(decomposed[1]):
        return decomposed[0]
    return ch


def term_frequencies(text_lemmatized: str) -> Counter[str]:
    """A memory's postings: each folded term and how often it occurs."""
    return Counter(fold(term) for term in text_lemmatized.split())


def query_terms(terms: list[str] | tuple[str, ...]) -> list[str]:
    """The query's folded terms, repetitions kept (each counts, as in FTS5)."""
    return [fold(term) for term in terms]


BM25_SQL = f"""
WITH query AS (
    SELECT term, count(*) AS repeats FROM unnest(%s::text[]) AS q(term) GROUP BY term
), corpus AS (
    SELECT count(*)::float8 AS documents, greatest(coalesce(sum(c.terms), 0), 1)::float8 AS tokens
    FROM memories c WHERE {{corpus}}
), weights AS (
    SELECT p.term, query.repeats * greatest(
        ln((corpus.documents - count(*) + 0.5) / (count(*) + 0.5)), {MIN_IDF}) AS weight
    FROM memory_terms p JOIN query ON query.term = p.term, corpus
    WHERE {{postings}}
    GROUP BY p.term, query.repeats, corpus.documents
)
SELECT m.rowid, sum(
    w.weight * p.frequency * {K1 + 1}
    / (p.frequency + {K1} * ({1 - B} + {B} * m.terms / (corpus.tokens / corpus.documents)))
) AS score
FROM memory_terms p
JOIN weights w ON w.term = p.term
JOIN memories m ON m.user_id = p.user_id AND m.rowid = p.memory_rowid, corpus
WHERE {{postings}} AND p.term = ANY(%s::text[]) AND {{scope}} AND ({{live}})
GROUP BY m.rowid
ORDER BY score DESC, m.rowid
LIMIT %s
"""
"""The keyword signal. Its parameters, in order: the query terms, then those of ``{corpus}``
(the user the counts are over, on ``c``), ``{postings}`` (the same, on ``p``), ``{postings}``
again, the query terms again (named in the scan of the postings, so it reads only theirs: a
join alone let the planner read every posting of the user), ``{scope}`` and ``{live}`` (the
memories ranked, on ``m``), and the limit."""
