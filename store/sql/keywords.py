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
from collections.abc import Callable, Iterable, Mapping, Sequence

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


Posting = tuple[str, Sequence[int], Sequence[int], Sequence[int]]
"""A term's postings of one user: the term, its memories, their frequencies of it, their lengths."""

CEILING = K1 + 1
"""A posting's share of its memory's score is below its term's weight times this: the saturated
frequency f / (f + K1 * (1 - B + B * |D| / avgdl)) stays under 1."""
SAFETY = 1e-9
"""The relative margin of ``bounded_postings``' comparisons: sums of shares taken in another order
may differ from the final sums in their last bits."""


def term_weights(terms: Sequence[str], counts: Mapping[str, int], documents: float) -> dict[str, float]:
    """Each asked term's weight: its repetitions in the query times its idf, from ``counts``, the
    user's number of memories holding each term (a term asked about that no memory holds has none)."""
    repeats = Counter(terms)
    return {term: repeats[term] * max(np.log((documents - containing + 0.5) / (containing + 0.5)), MIN_IDF)
            for term, containing in counts.items() if repeats[term] and containing}


def posting_shares(weight: float, frequencies: Sequence[int], lengths: Sequence[int], average_length: float) -> np.ndarray:
    """Each posting's share of its memory's score."""
    frequency, length = np.asarray(frequencies, dtype=np.float64), np.asarray(lengths, dtype=np.float64)
    return weight * frequency * (K1 + 1) / (frequency + K1 * (1 - B + B * length / average_length))


def best_by_postings(
    terms: Sequence[str], postings: Iterable[Posting], documents: float, tokens: float, limit: int,
    counts: Mapping[str, int] | None = None,
) -> list[tuple[int, float]]:
    """The ``limit`` best memories by the rule above, scored in the process from the postings of
    the query's folded ``terms``; ``documents`` and ``tokens`` are the user's N and total length,
    ``counts`` each term's number of memories (by default, those ``postings`` hold: every posting
    of the term). Best first, a tie by memory, as the SQL of both backends orders them. Each
    memory's shares are summed in the order of the terms, so the same postings give the same
    scores to the last bit however they were read."""
    postings = sorted(postings, key=lambda posting: posting[0])
    weights = term_weights(terms, counts if counts is not None else {term: len(rowids) for term, rowids, *_ in postings},
                           documents)
    asked = [posting for posting in postings if posting[0] in weights]  # not asked about: it makes no memory a hit
    if not asked or limit <= 0:
        return []
    scored, totals = _sums_by_memory(*_shares_of(asked, weights, tokens / documents))
    kept = np.arange(len(totals))
    if len(totals) > limit:  # those scoring at least the limit-th score, ties included, ordered
        kept = np.flatnonzero(totals >= -np.partition(-totals, limit - 1)[limit - 1])
    best = kept[np.lexsort((scored[kept], -totals[kept]))][:limit]
    return list(zip(scored[best].tolist(), totals[best].tolist()))


def bounded_postings(
    terms: Sequence[str], documents: float, tokens: float, counts: Mapping[str, int], whole: list[Posting],
    limit: int, read: Callable[[list[str], np.ndarray | None], list[Posting]], lookup_cost: float,
) -> list[Posting]:
    """The postings ``best_by_postings`` needs to find the ``limit`` best memories exactly, when the
    terms of ``counts`` missing from ``whole`` were counted but not read: a common term of a heavy
    user has tens of thousands of postings. The rule is MaxScore's, a term at a time:

    - the terms not read are taken from the rarest: while what they could add to a memory at most
      (their weights times ``CEILING``) reaches the ``limit``-th best sum of the terms read, the
      rarest of them is read whole (``read(terms, None)``);
    - then no memory outside those read can reach the top, nor one whose sum, with that most
      added, stays below it. Each term left is read only for the memories that still can
      (``read(terms, memories)``) when that costs less than reading it whole and cutting it to
      them, a posting read by its memory costing ``lookup_cost`` postings read in turn; the terms
      read whole are cut to those memories too.

    So each memory that can reach the top has all its postings, and scores what it would from
    every posting; the others are not scored."""
    weights = term_weights(terms, counts, documents)
    held = {posting[0]: posting for posting in whole if posting[0] in weights}
    unread = sorted((term for term in weights if term not in held), key=lambda term: (counts[term], term))
    if not unread or limit <= 0:
        return whole
    while True:
        scored, sums = _sums_by_memory(*_shares_of(held.values(), weights, tokens / documents))
        least = float(-np.partition(-sums, limit - 1)[limit - 1]) if len(sums) >= limit else 0.0
        most = CEILING * sum(weights[term] for term in unread)
        if most < least * (1 - SAFETY):
            break
        term = unread.pop(0)
        held.update((posting[0], posting) for posting in read([term], None))
        if not unread:
            return list(held.values())
    among = scored[sums + most >= least * (1 - SAFETY)]
    looked_up = [term for term in unread if len(among) * lookup_cost < counts[term]]
    if read_whole := [term for term in unread if term not in looked_up]:
        held.update((posting[0], posting) for posting in read(read_whole, None))
    kept = []
    for term, rowids, frequencies, lengths in held.values():
        inside = np.isin(np.asarray(rowids, dtype=np.int64), among)
        kept.append((term, np.asarray(rowids)[inside], np.asarray(frequencies)[inside], np.asarray(lengths)[inside]))
    return kept + (read(looked_up, among) if looked_up else [])


def _shares_of(postings: Iterable[Posting], weights: Mapping[str, float], average_length: float
               ) -> tuple[np.ndarray, np.ndarray]:
    """The memories of ``postings`` and their shares, in order, as ``_sums_by_memory`` takes them."""
    postings = list(postings)
    memories = [np.asarray(rowids, dtype=np.int64) for _, rowids, _, _ in postings]
    values = [posting_shares(weights[term], frequencies, lengths, average_length)
              for term, _, frequencies, lengths in postings]
    return np.concatenate([np.zeros(0, dtype=np.int64), *memories]), np.concatenate([np.zeros(0), *values])


def _sums_by_memory(memories: np.ndarray, shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each memory once, ascending, with the sum of its shares. When the memories' keys are dense
    (a heavy user's, added in turn), they index a counting array directly; otherwise they are
    sorted (``np.unique``), which took 3 of the 4 ms of 44,000 postings. Both sum each memory's
    shares in the order given, so the totals are the same to the last bit."""
    if not len(memories):
        return memories, shares
    low, high = int(memories.min()), int(memories.max())
    if high - low > DENSE_SPAN * len(memories):
        scored, each = np.unique(memories, return_inverse=True)
        return scored, np.bincount(each, weights=shares)
    totals = np.bincount(memories - low, weights=shares)
    present = np.flatnonzero(totals)  # every share is positive (each term's idf is at least MIN_IDF)
    return present + low, totals[present]
