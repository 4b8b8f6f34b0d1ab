"""The keyword index's rule, the same on every backend: each memory's folded terms as postings,
ranked with the BM25 of SQLite's FTS5 over the statistics of one user.

Each backend stores a memory's lemmatized terms as postings (user, term, memory, frequency)
beside its length in terms, and computes the score in its SQL from the expressions here, so
the sigmoid brackets of ``store.ranking.scoring`` (fitted to FTS5's ``bm25()``) hold on both:

    idf(t)   = max(ln((N - n(t) + 0.5) / (n(t) + 0.5)), 1e-6)
    score(D) = sum over query terms t of idf(t) * f(t,D) * (k1 + 1) / (f(t,D) + k1 * (1 - b + b * |D| / avgdl))

with k1 = 1.2 and b = 0.75; a term the query repeats counts once per repetition, as FTS5
counts each phrase of the query. N, n(t) and avgdl are counted over the memories of the user
the query is scoped to (over every user when it names none), never over the whole database as
FTS5 counts them: otherwise one user's scores would say whether, and how often, other users
wrote a word, and their ranking would move with other users' memories.

Terms are folded as FTS5's default ``unicode61`` tokenizer folds them (lower case; one
diacritic on an ASCII letter removed), on both sides, so "Café" in a memory and "cafe" in a
query meet, and scores stay those FTS5 gives one user's memories. The two agree on every
letter of Latin, Greek and Cyrillic; letters Unicode added after FTS5's tables (Georgian
capitals, say) are lower-cased here and not there.

Pure functions on strings and arrays: no I/O, no database module.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

K1 = 1.2
B = 0.75
MIN_IDF = 1e-6
"""FTS5's floor for the idf of a term in more than half the documents (its ``ln`` is ≤ 0)."""
DENSE_SPAN = 8
"""Postings whose memories' keys span at most this many times their number are summed by key."""


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
    """A memory's postings: each folded term and how often it occurs (their total is its length)."""
    return Counter(fold(term) for term in text_lemmatized.split())


def query_terms(terms: list[str] | tuple[str, ...]) -> list[str]:
    """The query's folded terms, repetitions kept (each counts, as in FTS5)."""
    return [fold(term) for term in terms]


def weight_sql(repeats: str, documents: str, containing: str, greatest: str) -> str:
    """SQL for a query term's weight: its repetitions times its idf, given SQL for N (``documents``)
    and n(t) (``containing``). ``greatest`` is the dialect's two-argument maximum (``greatest``
    on PostgreSQL, ``max`` on SQLite)."""
    return f"{repeats} * {greatest}(ln(({documents} - {containing} + 0.5) / ({containing} + 0.5)), {MIN_IDF})"


def term_score_sql(weight: str, frequency: str, length: str, average_length: str) -> str:
    """SQL for one posting's share of a memory's score: the term's weight times its saturated
    frequency f(t,D), given SQL for |D| (``length``, in terms) and avgdl (``average_length``)."""
    return (
        f"{weight} * {frequency} * {K1 + 1} "
        f"/ ({frequency} + {K1} * ({1 - B} + {B} * {length} / {average_length}))"
    )


def best_by_postings(
    terms: Sequence[str], postings: Iterable[tuple[str, Sequence[int], Sequence[int], Sequence[int]]],
    documents: float, tokens: float, limit: int,
) -> list[tuple[int, float]]:
    """The ``limit`` best memories by the rule above, scored in the process from the postings of
    the query's folded ``terms``: each term with its memories, their frequencies of it and their
    lengths in terms; ``documents`` and ``tokens`` are the user's N and total length. Best first,
    a tie by memory, as the SQL of both backends orders them."""
    repeats = Counter(terms)
    memories, scores = [], []
    for term, rowids, frequencies, lengths in postings:
        if not repeats[term]:  # not asked about: it makes no memory a hit
            continue
        containing = len(rowids)
        weight = repeats[term] * max(np.log((documents - containing + 0.5) / (containing + 0.5)), MIN_IDF)
        frequency, length = np.asarray(frequencies, dtype=np.float64), np.asarray(lengths, dtype=np.float64)
        memories.append(np.asarray(rowids, dtype=np.int64))
        scores.append(weight * frequency * (K1 + 1) / (frequency + K1 * (1 - B + B * length / (tokens / documents))))
    if not memories or limit <= 0:
        return []
    scored, totals = _sums_by_memory(np.concatenate(memories), np.concatenate(scores))
    kept = np.arange(len(totals))
    if len(totals) > limit:  # those scoring at least the limit-th score, ties included, ordered
        kept = np.flatnonzero(totals >= -np.partition(-totals, limit - 1)[limit - 1])
    best = kept[np.lexsort((scored[kept], -totals[kept]))][:limit]
    return list(zip(scored[best].tolist(), totals[best].tolist()))


def _sums_by_memory(memories: np.ndarray, shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each memory once, ascending, with the sum of its shares. When the memories' keys are dense
    (a heavy user's, added in turn), they index a counting array directly; otherwise they are
    sorted (``np.unique``), which took 3 of the 4 ms of 44,000 postings. Both sum each memory's
    shares in the order given, so the totals are the same to the last bit."""
    low, high = int(memories.min()), int(memories.max())
    if high - low > DENSE_SPAN * len(memories):
        scored, each = np.unique(memories, return_inverse=True)
        return scored, np.bincount(each, weights=shares)
    totals = np.bincount(memories - low, weights=shares)
    present = np.flatnonzero(totals)  # every share is positive (each term's idf is at least MIN_IDF)
    return present + low, totals[present]
