"""Learned fusion (``ranking = "learned"``, the default): a logistic regression reorders the
hand-set fusion's first ``POOL`` candidates and scores each with the probability that it answers
the query.

Each candidate is described by what the hand-set fusion already computes (its similarity, keyword
scores, raw BM25 and entity boost, and how far below the query's best it lies), by its neighbours
in the scope, whether it asks, the query's length and kind, whether words in it place it in time
(``places_in_time``), whether it or a neighbour opens with a name the query names
(``opens_with_name``), and what the scope holds for the query (``Figures``). The weights
(``learned.json`` beside this module: each feature's fitted range, mean, scale and coefficient)
are fitted by ``python -m bench recall --write-weights`` on the tune parts of LoCoMo and
LongMemEval, whole and in small scopes, and calibrated there; ``bench/recall.py`` says how, and
docs/benchmarks.md what they find and how well the scores are calibrated. Pure arithmetic:
``store.ranking.retrieval`` gathers the values.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from store.analysis.entities import normalize_entity
from store.records import LearnedScore, Pull

POOL = 100
"""Candidates reordered per search: the hand-set fusion's first ``POOL``."""
WEIGHTS = Path(__file__).with_name("learned.json")

ASKS_WHEN = re.compile(r"\s*(when|what (year|month|day|date|time)|which (year|month|day))\b", re.IGNORECASE)
ASKS_WHO = ("who", "whom", "whose")
TIME_WORDS = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|ago|weekend|recently|lately|soon|earlier"
    r"|(last|next|this|past|coming)\s+(week|month|year|summer|winter|spring|fall|autumn|night|morning|evening)"
    r"|january|february|march|april|may|june|july|august|september|october|november|december"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|(19|20)\d\d|\d{1,2}(:\d\d)?\s?(am|pm)|(a|one|two|three|few|couple of)\s+(days?|weeks?|months?|years?))\b",
)
"""Words that place a text in time (on LoCoMo's memories they agree with spaCy's DATE and TIME
entities on 93% of turns and 92% of facts), in lower case: ``places_in_time`` reads them."""


def places_in_time(text: str) -> bool:
    """Whether words in ``text`` place it in time (``TIME_WORDS``), read from a candidate's text at
    search time. The text is lower-cased first: matching without ``re.IGNORECASE`` takes about a
    quarter of the time, and ranking reads it for each of up to ``POOL`` candidates a search."""
    return TIME_WORDS.search(text.lower()) is not None


@dataclass(frozen=True)
class Query:
    """What the features read of the query."""

    term_count: int
    asks_when: bool
    asks_who: bool
    names: frozenset[str]
    """The names it asks about, as ``retrieval.PreparedQuery.names`` holds them (normalised)."""

    @classmethod
    def of(cls, text: str, term_count: int, names: frozenset[str]) -> Query:
        words = text.split()
        first = words[0].lower() if words else ""
        return cls(term_count, bool(ASKS_WHEN.match(text)), first in ASKS_WHO, names)


def opens_with_name(text: str, names: frozenset[str]) -> bool:
    """Whether ``text`` opens with one of ``names`` as a whole word: its speaker ("Caroline: …") or
    its subject ("Caroline joined …")."""
    opening = normalize_entity(text.lstrip()[: 2 * max(map(len, names), default=0)])  # the longest name, and stray spaces
    return any(opening.startswith(name) and not opening[len(name) : len(name) + 1].isalnum() for name in names)


@dataclass(frozen=True)
class Candidate:
    """What the features read of one memory for one query."""

    similarity: float
    keyword: float
    """Its own BM25, squashed by the query's sigmoid."""
    keyword_with_context: float
    bm25: float
    neighbour_similarity: float
    neighbour_keyword: float
    asks: bool
    time_words: bool
    opens_with_name: bool
    neighbour_opens_with_name: bool
    fused_score: float
    """Its score under the hand-set fusion (a value, not its place in that order)."""
    entity_boost: float
    """Its entity boost: a rare name or code of the query it holds exactly ("A1B2") is worth most."""
    query: Query
    scope: Figures
    """What the scope holds for the query as a whole."""


@dataclass(frozen=True)
class Figures:
    """What a query finds in the scope as a whole, the same for each of its candidates
    (``store.ranking.relevance.Relevance`` holds them): a candidate that is the best of a scope
    where nothing is close, or where the query's names are strangers, is less likely to answer."""

    best_similarity: float
    best_fused_score: float
    known_name: bool
    unknown_names: bool
    memories: int
    """How many memories the scope holds: a small store's best memory is far likelier to answer
    than a long conversation's, where hundreds speak of the same things. (Not how many passed the
    gate: one unrelated memory alone past it would look like a small store's only answer.)"""


Feature = Callable[[Candidate], float]

SIGNAL_FEATURES: dict[str, Feature] = {
    "similarity": lambda c: c.similarity,
    "keyword (own)": lambda c: c.keyword,
    "keyword (with context)": lambda c: c.keyword_with_context,
    "raw BM25": lambda c: c.bm25,
    "best neighbour's similarity": lambda c: c.neighbour_similarity,
    "best neighbour's keyword": lambda c: c.neighbour_keyword,
    "asks a question": lambda c: float(c.asks),
    "entity boost": lambda c: c.entity_boost,
    "the scope's best similarity": lambda c: c.scope.best_similarity,
    "below the best similarity": lambda c: c.scope.best_similarity - c.similarity,
    "below the best fused score": lambda c: c.scope.best_fused_score - c.fused_score,
    "log2(1 + memories in scope)": lambda c: math.log2(1 + c.scope.memories),
    "a name asked about is known": lambda c: float(c.scope.known_name),
    "every name asked about is unknown": lambda c: float(c.scope.unknown_names),
    "query terms / 10": lambda c: c.query.term_count / 10,
    "keyword × asks when": lambda c: c.keyword * c.query.asks_when,
    "similarity × asks who": lambda c: c.similarity * c.query.asks_who,
    "similarity × neighbour's": lambda c: c.similarity * c.neighbour_similarity,
}
"""What the engine's signals say of a candidate, and what the scope holds for the query. No
feature is a place in a list: a score must mean the same in a store of 3 as of 3,000. The entity
boost is one: fitted on LoCoMo alone, whose entities are mostly its two speakers, a model learned
to count an entity match against a memory and ranked a rare code or place matched exactly below
others; fitted beside LongMemEval and small scopes, it counts for the memory."""
TIME_WORD_FEATURES: dict[str, Feature] = {
    "time words": lambda c: float(c.time_words),
    "time words × asks when": lambda c: float(c.time_words and c.query.asks_when),
}
NAME_FEATURES: dict[str, Feature] = {
    "opens with a name asked about": lambda c: float(c.opens_with_name),
    "a neighbour opens with it": lambda c: float(c.neighbour_opens_with_name),
}
FEATURES: dict[str, Feature] = {**SIGNAL_FEATURES, **TIME_WORD_FEATURES, **NAME_FEATURES}
"""The features ``ranking = "learned"`` reads, in the order of the weights file."""


def matrix(candidates: Sequence[Candidate], features: dict[str, Feature] = FEATURES) -> np.ndarray:
    """One row per candidate, one column per feature."""
    return np.array([[feature(c) for feature in features.values()] for c in candidates],
                    dtype=np.float64).reshape(len(candidates), len(features))


SHOWN_PULLS = 5
"""Features named in a learned score's explanation, the strongest first; the rest are summed."""


@dataclass(frozen=True)
class Weights:
    """A fitted model: hold each feature within the range it was fitted on, standardise it, then a
    logistic regression. Outside that range a linear model only extrapolates: a feature that was
    nearly always 0 in the fitting data (an entity boost for a question asking who) would otherwise
    swing the logit by dozens of standard deviations for a memory matching a rare name exactly."""

    features: tuple[str, ...]
    low: np.ndarray
    high: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    coefficients: np.ndarray
    intercept: float

    def logits(self, candidates: Sequence[Candidate]) -> np.ndarray:
        return self.pulls(self.read(candidates)).sum(axis=1) + self.intercept

    def read(self, candidates: Sequence[Candidate]) -> np.ndarray:
        """The features as the model reads them: ``matrix``, each within its fitted range."""
        return np.clip(matrix(candidates), self.low, self.high)

    def pulls(self, values: np.ndarray) -> np.ndarray:
        """What each feature adds to each candidate's logit (one row of ``read`` per candidate)."""
        return (values - self.mean) / self.scale * self.coefficients

    def restates(self, candidate: Candidate) -> bool:
        """Whether ``candidate`` is closer in meaning to the query than any memory the model was
        fitted on (its ``similarity`` above the fitted range): the query all but repeats it. The
        model reads such a memory's similarity at the range's edge, as it reads every other one's
        there, so it cannot tell the memory the query repeats from its near copies, and their
        neighbours decide (a copy stored beside another copy gains, a memory among others loses)."""
        return "similarity" in self.features and candidate.similarity > self.high[self.features.index("similarity")]

    def rank(self, candidates: Sequence[Candidate], top_k: int, floor: float = 0.0) -> list[tuple[int, LearnedScore]]:
        """The best ``top_k`` candidates whose score is at least ``floor``, as their indices in
        ``candidates`` (the hand-set fusion's order), each with its score and the features that made
        it: first those the query ``restates``, in the hand-set order, then the rest by the model.
        A hit's score is the model's probability that it answers the query, raised where needed to
        the best after it, so scores never rise down the list and the floor cuts a prefix."""
        values = self.read(candidates)
        pulls = self.pulls(values)
        logits = pulls.sum(axis=1) + self.intercept
        restated = {i for i, candidate in enumerate(candidates) if self.restates(candidate)}
        order = [*sorted(restated), *(int(i) for i in np.argsort(-logits, kind="stable") if i not in restated)]
        probabilities = [probability(logit) for logit in logits.tolist()]
        scores = np.maximum.accumulate([probabilities[i] for i in order][::-1])[::-1].tolist()
        # The strongest pulls of every candidate at once: a loop over a hundred candidates costs more
        # than the search's keyword read.
        strongest = np.argsort(-np.abs(pulls), axis=1, kind="stable")[:, :SHOWN_PULLS]
        shown_values = np.take_along_axis(values, strongest, axis=1).tolist()
        shown_pulls = np.take_along_axis(pulls, strongest, axis=1).tolist()
        others = (pulls.sum(axis=1) - np.take_along_axis(pulls, strongest, axis=1).sum(axis=1)).tolist()
        ranked = []
        for i, score in zip(order[:top_k], scores, strict=False):
            if score < floor and i not in restated:
                break
            pulled = zip(strongest[i].tolist(), shown_values[i], shown_pulls[i], strict=True)
            ranked.append((i, LearnedScore(
                score, probabilities[i], float(logits[i]), self.intercept,
                tuple(Pull(self.features[f], value, pull) for f, value, pull in pulled), others[i], i in restated,
            )))
        return ranked

    def to_json(self, fitted_on: str) -> str:
        return json.dumps({
            "features": list(self.features), "low": self.low.tolist(), "high": self.high.tolist(),
            "mean": self.mean.tolist(), "scale": self.scale.tolist(),
            "coefficients": self.coefficients.tolist(), "intercept": self.intercept, "fitted_on": fitted_on,
        }, indent=1, ensure_ascii=False) + "\n"


@cache
def shipped() -> Weights:
    """The weights in ``WEIGHTS``, checked against ``FEATURES``."""
    stored = json.loads(WEIGHTS.read_text(encoding="utf-8"))
    if stored["features"] != list(FEATURES):
        raise ValueError(f"{WEIGHTS.name} was fitted for other features; run `python -m bench recall --write-weights`")
    return Weights(tuple(stored["features"]), *(np.array(stored[key]) for key in ("low", "high", "mean", "scale",
                   "coefficients")), float(stored["intercept"]))


def probability(logit: float) -> float:
    """The score a learned hit carries: the model's probability that it answers the query (the
    logistic function, as tanh, which cannot overflow however far the logit lies)."""
    return 0.5 * (1.0 + math.tanh(logit / 2.0))
