"""Learned fusion, measured by rescoring: a logistic regression over the engine's signals in place
of the hand-set sum, trained on the tune conversations of both shapes of memory.

    python -m bench learned [--data FILE] [--db FILE] [--embedding-model NAME] [--write-weights] [--no-doc]

Every question's signals over its whole scope are read as ``bench/ideas.py`` reads them (its
``read_questions``, on the quality benchmark's databases, built when missing). A question's
candidates are the hand-set fusion's (``ranking = "trimem"``) first ``store.ranking.learned.POOL``
past the semantic gate, each described as ``ranking = "learned"`` describes it
(``store.ranking.learned.Candidate``): the inputs, output and order of the hand-set fusion, what its
neighbours in the conversation score, whether it asks, the query's length and kind.

The feature sets:
- the engine's signals alone (``SIGNAL_FEATURES``);
- with whether spaCy finds a date or a time in the memory (``TIME_FEATURES``: the engine does not
  store that), alone and for a question asking when;
- with the same read by a regular expression (``TIME_WORD_FEATURES``), which search reads from its
  candidates' texts (``places_in_time``, shipped 2026-12-06);
- with, as well, whether the memory, and whether a neighbour of it, opens with a name the query asks
  about (``NAME_FEATURES``): its speaker or its subject. The set the engine ships (``FEATURES``);
- the time-words set with the fused score and the entity boost as features of their own (``ENTITY``),
  which LoCoMo, whose entities are mostly its two speakers, teaches to count an entity match against
  a memory;
- and as first shipped: with ``ENTITY``, and the candidate's places in the semantic and keyword
  orders in place of its place in the fused one (``OWN_RANKS``). Both outvote an exact match of a
  rare code or name, which the hand-set fusion ranks first.

Each feature set is one model: scikit-learn's ``LogisticRegression`` on standardised features,
classes balanced, its regularisation chosen by leave-one-conversation-out over the three tune
conversations (mean recall@10 over both shapes), then fitted on every tune question. The check
conversations (``quality.CHECK_SAMPLES``) are scored once and never used to choose. One more
row fits gradient-boosted trees (``Trees``) over the shipped features, their depth and rounds
chosen the same way. The row ``AS_SHIPPED`` ranks with the weights the engine runs
(``store/ranking/learned.json``, as they were before this run), so a run shows whether they still
hold: refitted on the same data they give the same order, and with ``--embedding-model`` it shows
them on another model's similarities beside a model fitted on those. ``--write-weights`` saves the
shipped set's model as ``store/ranking/learned.json``; the engine runs those weights whatever its
embedding model (docs/benchmarks.md says what a fit for all-mpnet-base-v2 gained), so only a fit on
the default model's similarities is written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import ideas, locomo, metrics, quality, report
from store import Engine, load_config
from store.analysis.embeddings import open_embedder
from store.analysis.nlp import NLP
from store.analysis.packaged_models import DEFAULT_MODEL, DIMENSIONS
from store.ranking import learned, scoring

STRENGTHS = (0.001, 0.01, 0.1, 1.0)
"""The inverse regularisation strengths (``C``) cross-validation chooses among."""


@dataclass(frozen=True)
class Described(learned.Candidate):
    """A candidate as the engine describes it, whether spaCy finds a date or time in it, its
    places in the semantic and the keyword order, its entity boost and its fused score."""

    mentions_time: bool
    semantic_rank: int
    keyword_rank: int | None
    entity: float
    fused: float


TIME_FEATURES: dict[str, learned.Feature] = {
    "mentions a time": lambda c: float(c.mentions_time),  # type: ignore[attr-defined]
    "mentions a time × asks when": lambda c: float(c.mentions_time and c.query.asks_when),  # type: ignore[attr-defined]
}
HAND_SET = "hand-set"
"""The row of the hand-set fusion's own order (``ranking = "trimem"``), which each model reorders."""
SHIPPED = "learned + time words + names (itself, a neighbour)"
"""The feature set ``ranking = "learned"`` runs (``store.ranking.learned.FEATURES``)."""
AS_SHIPPED = "as shipped (learned.json), before this run"
"""The row of the weights the engine runs (``store.ranking.learned.shipped``)."""
OWN_RANKS: dict[str, learned.Feature] = {
    "1 / semantic rank": lambda c: 1.0 / (1 + c.semantic_rank),  # type: ignore[attr-defined]
    "1 / keyword rank": lambda c: 0.0 if c.keyword_rank is None else 1.0 / (1 + c.keyword_rank),  # type: ignore[attr-defined]
}
"""A candidate's places in the semantic and the keyword order, in place of its place in the fused order
(with ``ENTITY``, the set first shipped: they outvote an exact match of a rare code or name)."""
ENTITY: dict[str, learned.Feature] = {
    "fused score": lambda c: c.fused,  # type: ignore[attr-defined]
    "entity boost": lambda c: c.entity,  # type: ignore[attr-defined]
    "entity boost × asks who": lambda c: c.entity * c.query.asks_who,  # type: ignore[attr-defined]
}
"""The fused score and the entity boost as features of their own, as first shipped: LoCoMo teaches
them to count an entity match against a memory (``store.ranking.learned.SIGNAL_FEATURES``)."""
TIME_WORDS = {**learned.SIGNAL_FEATURES, **learned.TIME_WORD_FEATURES}
FEATURE_SETS = {
    "learned": learned.SIGNAL_FEATURES,
    "learned + time mention": {**learned.SIGNAL_FEATURES, **TIME_FEATURES},
    "learned + time words": TIME_WORDS,
    "learned + time words + names (itself only)": {
        **TIME_WORDS, "opens with a name asked about": learned.NAME_FEATURES["opens with a name asked about"]
    },
    SHIPPED: learned.FEATURES,
    "learned + time words, fused score and entity boost": {**TIME_WORDS, **ENTITY},
    "as first shipped (+ fused score and entity boost, own ranks)": {
        **{name: feature for name, feature in TIME_WORDS.items() if "rank" not in name}, **ENTITY, **OWN_RANKS
    },
}


@dataclass
class Question:
    """One question's candidates, best by the hand-set fusion first, and which of them are relevant."""

    asked: ideas.Asked
    shape: str
    """``turns`` or ``facts``."""
    candidates: list[Described]
    rowids: list[int]

    @property
    def labels(self) -> np.ndarray:
        return np.array([rowid in self.asked.relevant for rowid in self.rowids], dtype=float)

    def matrix(self, features: dict[str, learned.Feature]) -> np.ndarray:
        return learned.matrix(self.candidates, features)

    def scores(self, order: np.ndarray) -> dict[str, float]:
        ranked = [str(self.rowids[i]) for i in order]
        return metrics.score(ranked, {str(rowid) for rowid in self.asked.relevant})


def candidates(q: ideas.Asked, scope: ideas.Scope, shape: str) -> Question:
    """The hand-set fusion's first ``learned.POOL`` memories for ``q`` that pass the semantic gate, described as
    the engine describes them."""
    signals = ideas.default_signals(q, scope)
    params = signals.params
    own = {rowid: scoring.normalize_bm25(raw, params) for rowid, raw in q.bm25.items() if raw > 0}
    with_context = {rowid: scoring.normalize_bm25(raw, params) for rowid, raw in signals.bm25_raw.items() if raw > 0}
    fused = scoring.fuse(signals.similarity, signals.bm25_raw, params, signals.boosts, ideas.SHIPPED.threshold,
                         learned.POOL, entity_active=signals.entity_active)
    rowids = [rowid for rowid, _ in fused.ranked]
    neighbours = scope.neighbours(rowids)
    semantic_rank = {rowid: i for i, rowid in enumerate(q.similarity)}
    keyword_rank = {rowid: i for i, rowid in enumerate(sorted(own, key=lambda r: -own[r]))}
    query = learned.Query.of(q.text, len(q.terms), q.names)
    described = [
        Described(
            similarity=q.similarity[rowid], keyword=own.get(rowid, 0.0),
            keyword_with_context=with_context.get(rowid, 0.0),
            bm25=q.bm25.get(rowid, 0.0),
            neighbour_similarity=max((q.similarity[n] for n, _ in neighbours[rowid]), default=0.0),
            neighbour_keyword=max((own.get(n, 0.0) for n, _ in neighbours[rowid]), default=0.0),
            asks=rowid in scope.questions, time_words=learned.places_in_time(scope.texts[rowid]),
            opens_with_name=learned.opens_with_name(scope.texts[rowid], query.names),
            neighbour_opens_with_name=any(learned.opens_with_name(scope.texts[n], query.names)
                                          for n, _ in neighbours[rowid]),
            fused_rank=rank, query=query, mentions_time=rowid in scope.dated,
            semantic_rank=semantic_rank[rowid], keyword_rank=keyword_rank.get(rowid),
            entity=signals.boosts.get(rowid, 0.0), fused=breakdown.final_score,
        )
        for rank, (rowid, breakdown) in enumerate(fused.ranked)
    ]
    return Question(q, shape, described, rowids)


def read(shape: str, data: Path, db: Path, model: str) -> list[Question]:
    """Every question of one shape, its candidates described, with the embedding model ``model``."""
    base = load_config(environ={}).replace("store", embedding_model=model).using(str(quality.database_path(db, shape)))
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

    def __init__(self, features: dict[str, learned.Feature], strength: float) -> None:
        self.choice = f"C = {strength}"
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        self.features = features
        self.pipeline = make_pipeline(
            StandardScaler(), LogisticRegression(C=strength, class_weight="balanced", max_iter=5000)
        )

    def fit(self, questions: Sequence[Question]) -> Model:
        values = np.vstack([q.matrix(self.features) for q in questions])
        self.low, self.high = values.min(axis=0), values.max(axis=0)
        self.pipeline.fit(values, np.concatenate([q.labels for q in questions]))
        return self

    def rank(self, question: Question) -> np.ndarray:
        """The question's candidates, best first, each feature held within its fitted range as the
        engine holds it (``store.ranking.learned.Weights``)."""
        values = np.clip(question.matrix(self.features), self.low, self.high)
        return np.argsort(-self.pipeline.decision_function(values), kind="stable")

    def weights(self) -> dict[str, float]:
        """Each feature's weight on the standardised scale."""
        return dict(zip(self.features, self.pipeline[-1].coef_[0]))

    def fitted(self) -> learned.Weights:
        """The model as ``ranking = "learned"`` runs it."""
        scaler, regression = self.pipeline
        return learned.Weights(tuple(self.features), self.low, self.high, scaler.mean_, scaler.scale_,
                               regression.coef_[0], float(regression.intercept_[0]))


class Trees:
    """Gradient-boosted trees (scikit-learn's ``HistGradientBoostingClassifier``), classes balanced:
    the issue's other kind of model, which can learn what the features do together."""

    def __init__(self, features: dict[str, learned.Feature], shape: tuple[int, int]) -> None:
        from sklearn.ensemble import HistGradientBoostingClassifier

        depth, rounds = shape
        self.choice = f"depth {depth}, {rounds} rounds"
        self.features = features
        self.trees = HistGradientBoostingClassifier(
            max_depth=depth, max_iter=rounds, learning_rate=0.05, min_samples_leaf=50, l2_regularization=1.0,
            class_weight="balanced", random_state=0,
        )

    def fit(self, questions: Sequence[Question]) -> Trees:
        self.trees.fit(np.vstack([q.matrix(self.features) for q in questions]),
                       np.concatenate([q.labels for q in questions]))
        return self

    def rank(self, question: Question) -> np.ndarray:
        return np.argsort(-self.trees.decision_function(question.matrix(self.features)), kind="stable")

    def weights(self) -> dict[str, float]:
        return {}


TREE_SHAPES = ((2, 100), (2, 300), (3, 100), (3, 300))
"""The depths and rounds cross-validation chooses among for ``Trees``."""
TREES = "gradient-boosted trees, shipped features"
"""The row of ``Trees`` over ``learned.FEATURES``."""


def cross_validated(make: Callable[[Any], Model | Trees], choices: Sequence[Any], tune: Sequence[Question]) -> Any:
    """The choice (a strength, a tree shape) whose models, each fitted without one tune
    conversation, rank that conversation's questions (both shapes) best by mean recall@10."""
    conversations = sorted({q.asked.sample_id for q in tune})

    def held_out_recall(choice: Any) -> float:
        recalls = []
        for held in conversations:
            model = make(choice).fit([q for q in tune if q.asked.sample_id != held])
            recalls += [q.scores(model.rank(q))["recall@10"] for q in tune if q.asked.sample_id == held]
        return float(np.mean(recalls))

    return max(choices, key=held_out_recall)


def mean(scores: Sequence[dict[str, float]], questions: Sequence[Question], keep: Callable[[Question], bool]) -> dict:
    return metrics.mean(score for score, q in zip(scores, questions) if keep(q))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_PATH, help="a LoCoMo-format JSON file")
    parser.add_argument("--db", type=Path, default=None,
                        help="benchmark database file (one per shape, built when missing; default: "
                             "locomo.db in the results folder, locomo-<model>.db for another embedding model)")
    parser.add_argument("--embedding-model", default=DEFAULT_MODEL, choices=sorted(DIMENSIONS),
                        help="the packaged embedding model whose similarities the models are fitted on")
    parser.add_argument("--write-weights", action="store_true",
                        help=f"save the shipped feature set's model as {learned.WEIGHTS.name} (default model only)")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)
    model_name = args.embedding_model
    if args.write_weights and model_name != DEFAULT_MODEL:
        parser.error(f"--write-weights: the engine runs the weights fitted on {DEFAULT_MODEL} whatever its model")
    tag = "" if model_name == DEFAULT_MODEL else f"-{model_name}"  # what the database and doc section add
    db = args.db or report.RESULTS / f"locomo{tag}.db"

    questions = [q for shape in locomo.SHAPES for q in read(shape, args.data, db, model_name)]
    tune = [q for q in questions if ideas.tuned(q.asked)]
    rankings = {HAND_SET: [np.arange(len(q.rowids)) for q in questions]}
    rankings[AS_SHIPPED] = [np.argsort(-learned.shipped().logits(q.candidates), kind="stable") for q in questions]
    chosen, weights = {}, {}
    makers = {name: (lambda C, f=features: Model(f, C), STRENGTHS) for name, features in FEATURE_SETS.items()}
    makers[TREES] = (lambda shape: Trees(learned.FEATURES, shape), TREE_SHAPES)
    for name, (make, choices) in makers.items():
        model = make(cross_validated(make, choices, tune)).fit(tune)
        chosen[name] = model.choice
        rankings[name] = [model.rank(q) for q in questions]
        weights[name] = model.weights()
        if name == SHIPPED and args.write_weights:
            fitted_on = f"{args.data.name}, tune conversations of both shapes, {model.choice}"
            learned.WEIGHTS.write_text(model.fitted().to_json(fitted_on), encoding="utf-8")
        print(f"  {name}: {model.choice}", file=sys.stderr, flush=True)
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
        f"- **{name}** ({chosen[name]}): check recall@10 "
        + ", ".join(f"{shape} {check[(shape, name)] - check[(shape, HAND_SET)]:+.3f}" for shape in locomo.SHAPES)
        + (": beats the hand-set fusion on both shapes." if all(check[(s, name)] > check[(s, HAND_SET)]
                                                                 for s in locomo.SHAPES)
           else ": does not beat the hand-set fusion on both shapes.")
        for name in makers
    ]
    weight_rows = [[feature, *(f"{weights[name][feature]:+.3f}" if feature in weights[name] else ""
                               for name in FEATURE_SETS)]
                   for feature in dict.fromkeys(name for features in FEATURE_SETS.values() for name in features)]
    section = "\n\n".join([
        f"## Learned fusion, rescored (LoCoMo dev, both shapes{f', {model_name}' if tag else ''})",
        f"`{report.command_line()}`",
        report.environment({"embedding model": model_name}),
        (f"Each question's first {learned.POOL} memories under the hand-set fusion, reranked by each model "
         "(`bench/learned.py` says how the models are chosen and fitted)."),
        report.table(["shape", "conversations", "ranking", "recall@10", "ndcg@10", "mrr"], rows),
        "Turns by category, all conversations, recall@10:",
        report.table(["category", *scores], category_rows),
        "\n".join(verdicts),
        "What each model learned (weights on standardised features):",
        report.table(["feature", *FEATURE_SETS], weight_rows),
    ])
    report.publish(f"learned{tag}", section, not args.no_doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
