"""Learned fusion, measured by rescoring: a logistic regression over the engine's signals in place
of the hand-set sum, trained on the tune conversations of both shapes of memory.

    python -m bench learned [--data FILE] [--db FILE] [--no-doc]

Every question's signals over its whole scope are read as ``bench/ideas.py`` reads them (its
``read_questions``, on the quality benchmark's databases, built when missing). A question's
candidates are the default ranking's first ``POOL``, each described by ``FEATURES``: the inputs
and output of today's fusion, what its neighbours in the conversation score, whether it asks,
its ranks, and the query's length and kind. ``TIME_FEATURES`` add whether spaCy finds a date
or a time in the memory (the engine does not store that yet), alone and for a question asking
when; ``TIME_WORD_FEATURES`` the same read by a regular expression, which search could apply to
its candidates' texts without storing anything.

Each feature set is one model: scikit-learn's ``LogisticRegression`` on standardised features,
classes balanced, its regularisation chosen by leave-one-conversation-out over the three tune
conversations (mean recall@10 over both shapes), then fitted on every tune question. The check
conversations (``quality.CHECK_SAMPLES``) are scored once and never used to choose. A learned
ranking may replace the default only if it beats it on check on both shapes.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import ideas, locomo, metrics, quality, report
from store import Engine, load_config
from store.analysis.embeddings import open_embedder
from store.analysis.nlp import NLP
from store.ranking import scoring

POOL = 100
"""Candidates reranked per question: the default's first ``POOL`` (its recall@100 bounds the model's)."""
STRENGTHS = (0.001, 0.01, 0.1, 1.0)
"""The inverse regularisation strengths (``C``) cross-validation chooses among."""
_ASKS_WHEN = re.compile(r"\s*(when|what (year|month|day|date|time)|which (year|month|day))\b", re.IGNORECASE)
TIME_WORDS = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|ago|weekend|recently|lately|soon|earlier"
    r"|(last|next|this|past|coming)\s+(week|month|year|summer|winter|spring|fall|autumn|night|morning|evening)"
    r"|january|february|march|april|may|june|july|august|september|october|november|december"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|(19|20)\d\d|\d{1,2}(:\d\d)?\s?(am|pm)|(a|one|two|three|few|couple of)\s+(days?|weeks?|months?|years?))\b",
    re.IGNORECASE,
)
"""Words that place a text in time: what search could read from a candidate's text without NER (on
the dev memories it agrees with spaCy's DATE and TIME entities on 93% of turns and 92% of facts)."""


@dataclass(frozen=True)
class Candidate:
    """What a feature may read of one memory for one question."""

    default: float
    similarity: float
    keyword: float
    """Its own BM25, squashed by the query's sigmoid."""
    keyword_with_context: float
    entity: float
    bm25: float
    neighbour_similarity: float
    neighbour_keyword: float
    asks: bool
    mentions_time: bool
    """spaCy finds a date or a time in it."""
    time_words: bool
    """``TIME_WORDS`` finds one."""
    semantic_rank: int
    keyword_rank: int | None
    term_count: int
    asks_when: bool
    asks_who: bool


FEATURES: dict[str, Callable[[Candidate], float]] = {
    "default score": lambda c: c.default,
    "similarity": lambda c: c.similarity,
    "keyword (own)": lambda c: c.keyword,
    "keyword (with context)": lambda c: c.keyword_with_context,
    "entity boost": lambda c: c.entity,
    "raw BM25": lambda c: c.bm25,
    "best neighbour's similarity": lambda c: c.neighbour_similarity,
    "best neighbour's keyword": lambda c: c.neighbour_keyword,
    "asks a question": lambda c: float(c.asks),
    "1 / semantic rank": lambda c: 1.0 / (1 + c.semantic_rank),
    "1 / keyword rank": lambda c: 0.0 if c.keyword_rank is None else 1.0 / (1 + c.keyword_rank),
    "query terms / 10": lambda c: c.term_count / 10,
    "similarity × asks when": lambda c: c.similarity * c.asks_when,
    "keyword × asks when": lambda c: c.keyword * c.asks_when,
    "similarity × asks who": lambda c: c.similarity * c.asks_who,
    "entity boost × asks who": lambda c: c.entity * c.asks_who,
    "similarity × neighbour's": lambda c: c.similarity * c.neighbour_similarity,
}
TIME_FEATURES: dict[str, Callable[[Candidate], float]] = {
    "mentions a time": lambda c: float(c.mentions_time),
    "mentions a time × asks when": lambda c: float(c.mentions_time and c.asks_when),
}
TIME_WORD_FEATURES: dict[str, Callable[[Candidate], float]] = {
    "time words": lambda c: float(c.time_words),
    "time words × asks when": lambda c: float(c.time_words and c.asks_when),
}
FEATURE_SETS = {
    "learned": FEATURES,
    "learned + time mention": {**FEATURES, **TIME_FEATURES},
    "learned + time words": {**FEATURES, **TIME_WORD_FEATURES},
}


@dataclass
class Question:
    """One question's candidates, best default first, and which of them are relevant."""

    asked: ideas.Asked
    shape: str
    """``turns`` or ``facts``."""
    candidates: list[Candidate]
    rowids: list[int]

    @property
    def labels(self) -> np.ndarray:
        return np.array([rowid in self.asked.relevant for rowid in self.rowids], dtype=float)

    def matrix(self, features: dict[str, Callable[[Candidate], float]]) -> np.ndarray:
        return np.array([[feature(c) for feature in features.values()] for c in self.candidates])

    def scores(self, order: np.ndarray) -> dict[str, float]:
        ranked = [str(self.rowids[i]) for i in order]
        return metrics.score(ranked, {str(rowid) for rowid in self.asked.relevant})


def candidates(q: ideas.Asked, scope: ideas.Scope, shape: str) -> Question:
    """The default's first ``POOL`` memories for ``q``, described."""
    signals = ideas.default_signals(q, scope)
    params = signals.params
    own = {rowid: scoring.normalize_bm25(raw, params) for rowid, raw in q.bm25.items() if raw > 0}
    with_context = {rowid: scoring.normalize_bm25(raw, params) for rowid, raw in signals.bm25_raw.items() if raw > 0}
    fused = scoring.fuse(signals.similarity, signals.bm25_raw, params, signals.boosts, 0.0, POOL,
                         entity_active=signals.entity_active)
    order = sorted(scope.texts)
    place = {rowid: i for i, rowid in enumerate(order)}
    semantic_rank = {rowid: i for i, rowid in enumerate(q.similarity)}
    keyword_rank = {rowid: i for i, rowid in enumerate(sorted(own, key=lambda r: -own[r]))}
    first = q.text.split()[0].lower() if q.text.split() else ""
    described = []
    for rowid, breakdown in fused.ranked:
        neighbours = [order[i] for i in (place[rowid] - 1, place[rowid] + 1) if 0 <= i < len(order)]
        described.append(Candidate(
            default=breakdown.final_score, similarity=q.similarity[rowid], keyword=own.get(rowid, 0.0),
            keyword_with_context=with_context.get(rowid, 0.0), entity=signals.boosts.get(rowid, 0.0),
            bm25=q.bm25.get(rowid, 0.0),
            neighbour_similarity=max((q.similarity[n] for n in neighbours), default=0.0),
            neighbour_keyword=max((own.get(n, 0.0) for n in neighbours), default=0.0),
            asks=rowid in scope.questions, mentions_time=rowid in scope.dated,
            time_words=bool(TIME_WORDS.search(scope.texts[rowid])),
            semantic_rank=semantic_rank[rowid], keyword_rank=keyword_rank.get(rowid), term_count=len(q.terms),
            asks_when=bool(_ASKS_WHEN.match(q.text)), asks_who=first in ("who", "whom", "whose"),
        ))
    return Question(q, shape, described, [rowid for rowid, _ in fused.ranked])


def read(shape: str, data: Path, db: Path) -> list[Question]:
    """Every question of one shape, its candidates described."""
    base = load_config(environ={}).using(str(quality.database_path(db, shape)))
    embedder = open_embedder(base.store.embedding_model, base.store.embedding_backend,  # type: ignore[arg-type]
                             cache_dir=base.model_cache_dir, threads=1)
    nlp = NLP()
    samples = locomo.load(data, shape=shape)
    with Engine(base, embedder=embedder, nlp=nlp) as engine:
        mapping = quality.ingest(engine, samples)
        scopes, asked = ideas.read_questions(engine, samples, mapping)
    return [candidates(q, scopes[q.sample_id], shape) for q in asked]


class Model:
    """Standardised features into a class-balanced logistic regression (scikit-learn)."""

    def __init__(self, features: dict[str, Callable[[Candidate], float]], strength: float) -> None:
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        self.features = features
        self.pipeline = make_pipeline(
            StandardScaler(), LogisticRegression(C=strength, class_weight="balanced", max_iter=5000)
        )

    def fit(self, questions: Sequence[Question]) -> Model:
        self.pipeline.fit(np.vstack([q.matrix(self.features) for q in questions]),
                          np.concatenate([q.labels for q in questions]))
        return self

    def rank(self, question: Question) -> np.ndarray:
        return np.argsort(-self.pipeline.decision_function(question.matrix(self.features)), kind="stable")

    def weights(self) -> dict[str, float]:
        """Each feature's weight on the standardised scale."""
        return dict(zip(self.features, self.pipeline[-1].coef_[0]))


def cross_validated(features: dict[str, Callable[[Candidate], float]], tune: Sequence[Question]) -> float:
    """The strength whose models, each fitted without one tune conversation, rank that
    conversation's questions (both shapes) best by mean recall@10."""
    conversations = sorted({q.asked.sample_id for q in tune})

    def held_out_recall(strength: float) -> float:
        recalls = []
        for held in conversations:
            model = Model(features, strength).fit([q for q in tune if q.asked.sample_id != held])
            recalls += [q.scores(model.rank(q))["recall@10"] for q in tune if q.asked.sample_id == held]
        return float(np.mean(recalls))

    return max(STRENGTHS, key=held_out_recall)


def mean(scores: Sequence[dict[str, float]], questions: Sequence[Question], keep: Callable[[Question], bool]) -> dict:
    return metrics.mean(score for score, q in zip(scores, questions) if keep(q))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_PATH, help="a LoCoMo-format JSON file")
    parser.add_argument("--db", type=Path, default=report.RESULTS / "locomo.db",
                        help="benchmark database file (one per shape, built when missing)")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)

    questions = [q for shape in locomo.SHAPES for q in read(shape, args.data, args.db)]
    tune = [q for q in questions if ideas.tuned(q.asked)]
    rankings = {"default": [np.arange(len(q.rowids)) for q in questions]}
    chosen, weights = {}, {}
    for name, features in FEATURE_SETS.items():
        chosen[name] = cross_validated(features, tune)
        model = Model(features, chosen[name]).fit(tune)
        rankings[name] = [model.rank(q) for q in questions]
        weights[name] = model.weights()
        print(f"  {name}: C = {chosen[name]}", file=sys.stderr, flush=True)
    scores = {name: [q.scores(order) for q, order in zip(questions, orders)] for name, orders in rankings.items()}

    rows, category_rows = [], []
    for shape in locomo.SHAPES:
        for part, keep in (("tune", ideas.tuned), ("check", ideas.checked)):
            for name, each in scores.items():
                got = mean(each, questions, lambda q, shape=shape, keep=keep: q.shape == shape and keep(q.asked))
                rows.append([shape, part, name, got["recall@10"], got["ndcg@10"], got["mrr"]])
    for category in sorted({q.asked.category for q in questions if q.shape == "turns"}):
        category_rows.append([locomo.CATEGORIES[category], *(
            mean(scores[name], questions, lambda q, c=category: q.shape == "turns" and q.asked.category == c)["recall@10"]
            for name in scores)])
    check = {(row[0], row[2]): row[3] for row in rows if row[1] == "check"}
    verdicts = [
        f"- **{name}** (C = {chosen[name]}): check recall@10 "
        + ", ".join(f"{shape} {check[(shape, name)] - check[(shape, 'default')]:+.3f}" for shape in locomo.SHAPES)
        + (": beats the default on both shapes." if all(check[(s, name)] > check[(s, "default")] for s in locomo.SHAPES)
           else ": does not beat the default on both shapes.")
        for name in FEATURE_SETS
    ]
    weight_rows = [[feature, *(f"{weights[name][feature]:+.3f}" if feature in weights[name] else ""
                               for name in FEATURE_SETS)]
                   for feature in {**FEATURE_SETS["learned + time mention"], **TIME_WORD_FEATURES}]
    section = "\n\n".join([
        "## Learned fusion, rescored (LoCoMo dev, both shapes)",
        f"`{report.command_line()}`",
        report.environment(),
        (f"Each question's first {POOL} memories under the default, reranked by each model "
         "(`bench/learned.py` says how the models are chosen and fitted)."),
        report.table(["shape", "conversations", "ranking", "recall@10", "ndcg@10", "mrr"], rows),
        "Turns by category, all conversations, recall@10:",
        report.table(["category", *scores], category_rows),
        "\n".join(verdicts),
        "What each model learned (weights on standardised features):",
        report.table(["feature", *FEATURE_SETS], weight_rows),
    ])
    report.publish("learned", section, not args.no_doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
