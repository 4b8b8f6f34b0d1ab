"""Recall as a user meets it: what the default search returns for LoCoMo's turns and facts,
LongMemEval's user turns and an everyday store, asked their own questions and others'.

    python -m bench recall [--write-weights] [--floor P] [--no-doc]

Each set is one database in the results folder, built when missing (``quality.ingest``; the
everyday store is new each run). Every question is asked of its own scope through
``Engine.explain`` with ``top_k=20``, and so is a foreign one (LoCoMo: the next conversation's
questions; LongMemEval: the next history's question, and its abstention questions, about things
its history never says): the right answer to those is nothing. While it searches, the candidates
learned fusion read (``store.ranking.retrieval.describe``) are kept, so the model and the floor
(``search.min_score``) are scored again here for any weights without searching again.

Reported, per set, for the tune and check parts (LoCoMo: ``quality.CHECK_SAMPLES``; LongMemEval:
every other question by id): recall@10, MRR, own questions answered with nothing, foreign ones
answered with nothing, other memories returned beside what answers; LongMemEval's session-level
recall_any@5; per category; and how well the scores are calibrated (predicted against observed).
``--write-weights`` fits the model (scikit-learn's logistic regression with balanced classes, its
logit then calibrated by Platt scaling: ``fit``) on the tune parts of LoCoMo's two shapes and
LongMemEval, whole and in small scopes, and writes ``store/ranking/learned.json``; the check parts
never choose.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import pickle
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from unittest import mock

import numpy as np

from bench import everyday, locomo, metrics, quality, report, sqlite_file
from store import Engine, MemoryInput, load_config
from store.analysis.embeddings import open_embedder
from store.analysis.nlp import NLP
from store.ranking import learned, retrieval, standing

TOP_K = 20
LONGMEMEVAL = locomo.DEFAULT_PATH.with_name("longmemeval-dev.json")
LONGMEMEVAL_ABSTENTION = locomo.DEFAULT_PATH.with_name("longmemeval-dev-abs.json")
LONGMEMEVAL_CATEGORIES = {1: "single-session user", 3: "preference", 4: "multi-session", 5: "temporal",
                          6: "knowledge update"}
EVERYDAY = "everyday"
NEW_USER = "a new user"
SMALL_STORES = {
    EVERYDAY: (everyday.FACTS, everyday.ANSWERABLE, everyday.UNRELATED),
    NEW_USER: (everyday.NEW_USER_FACTS, everyday.NEW_USER_ANSWERABLE, everyday.NEW_USER_UNRELATED),
}
"""Stores of a few one-line facts (``bench/everyday.py``), asked as their user would."""
SETS = ("LoCoMo turns", "LoCoMo facts", "LoCoMo facts, small", "LongMemEval", "LongMemEval, small", *SMALL_STORES)


@dataclass
class Asked:
    """One question asked of one scope: what answers it, and the candidates learned fusion read."""

    set: str
    sample: str
    text: str
    category: int
    foreign: bool
    relevant: frozenset[str]
    ids: list[str] = field(default_factory=list)
    """The candidates' memory ids, in the hand-set fusion's order."""
    candidates: list[learned.Candidate] = field(default_factory=list)
    sessions: dict[str, int] = field(default_factory=dict)
    """LongMemEval: each memory id of the scope's session number."""
    origin: str = ""
    """The sample a small scope was drawn from (``small_scopes``): it decides tune or check."""
    abstention: bool = False
    """A LongMemEval abstention question: about something its own history never says."""
    standing: list[str] = field(default_factory=list)
    """The standing memories search brought beside its ranking (``store.ranking.standing``)."""

    @property
    def tune(self) -> bool:
        origin = self.origin or self.sample
        if self.set.startswith("LoCoMo"):
            return origin not in quality.CHECK_SAMPLES
        if self.set.startswith("LongMemEval"):
            return int(hashlib.sha256(origin.encode()).hexdigest(), 16) % 2 == 0
        return False

    def labels(self) -> np.ndarray:
        return np.array([memory_id in self.relevant for memory_id in self.ids], dtype=np.int8)


SEARCH = load_config(environ={}).search


def returned(asked: Asked, weights: learned.Weights, floor: float) -> tuple[list[str], list[float]]:
    """What search returns for ``asked`` with these weights and this floor, as ``retrieval.order``
    cuts it, with the standing memories search brought placed as ``retrieval.run`` places them."""
    order = weights.rank(asked.candidates, TOP_K) if asked.candidates else []
    scope = asked.candidates[0].scope if asked.candidates else None
    count = 0 if scope is None else retrieval.returned_count(
        [score for _, score in order], scope.known_name, scope.best_similarity, scope.unknown_names,
        dataclasses.replace(SEARCH, min_score=floor))
    kept = [(asked.ids[i], score.score) for i, score in order[:count]]
    preferences = [(memory_id, 0.0) for memory_id in asked.standing if memory_id not in dict(kept)]
    after = standing.placed([score for _, score in kept], len(preferences))
    kept[after:after] = preferences
    return [memory_id for memory_id, _ in kept], [score for _, score in kept]


# --- asking -------------------------------------------------------------------------------


def ask_all(engine: Engine, set_name: str, samples: Sequence[locomo.Sample], mapping: dict[str, dict[str, str]],
            foreign: bool = True) -> list[Asked]:
    """Every own question of every sample, and (``foreign``) each sample's questions asked of the
    sample before it in turn."""
    asked = []
    for number, sample in enumerate(samples):
        for question in sample.questions:
            relevant = frozenset(mapping[sample.sample_id][key] for key in question.evidence)
            asked.append(Asked(set_name, sample.sample_id, question.text, question.category, False, relevant))
        if foreign and len(samples) > 1:
            other = samples[(number + 1) % len(samples)]
            asked += [Asked(set_name, sample.sample_id, question.text, question.category, True, frozenset())
                      for question in other.questions]
    for each in asked:
        search(engine, each)
    return asked


def search(engine: Engine, asked: Asked) -> None:
    """Ask through ``Engine.explain``, keeping the candidates ``retrieval.describe`` returns."""
    describe = retrieval.describe

    def keep(*args, **kwargs):
        candidates = describe(*args, **kwargs)
        asked.candidates = candidates
        rowids = [rowid for rowid, _ in args[5]]
        rows = args[0].memories_by_rowid(rowids, args[2].scope)
        asked.ids = [rows[rowid].id for rowid in rowids]
        return candidates

    with mock.patch.object(retrieval, "describe", keep):
        explained = engine.explain(asked.text, user_id=asked.sample, top_k=TOP_K)
    asked.standing = [hit.memory.id for hit in explained.hits if hit.standing]


def loaded(config, embedder, nlp, path: Path, samples: Sequence[locomo.Sample]) -> dict[str, dict[str, str]]:
    with Engine(config.using(str(path)), embedder=embedder, nlp=nlp) as engine:
        return quality.ingest(engine, samples)


def collect(cache: Path, progress: Callable[[str], None]) -> list[Asked]:
    config = load_config(environ={}).replace("limits", max_text_chars=200_000)
    embedder = open_embedder(config.store.embedding_model, config.store.embedding_backend,
                             cache_dir=config.model_cache_dir, threads=1)
    nlp = NLP()
    embedder.load()
    nlp.load()
    report.RESULTS.mkdir(parents=True, exist_ok=True)
    everything: list[Asked] = ask_small_stores(config, embedder, nlp)
    longmemeval = locomo.load(LONGMEMEVAL, set(LONGMEMEVAL_CATEGORIES))
    abstention = locomo.load(LONGMEMEVAL_ABSTENTION, set(LONGMEMEVAL_CATEGORIES))
    jobs = [
        ("LoCoMo turns", report.RESULTS / "locomo.db", locomo.load(shape="turns"), False),
        ("LoCoMo facts", report.RESULTS / "locomo-facts.db", locomo.load(shape="facts"), False),
        ("LongMemEval", report.RESULTS / "longmemeval.db", longmemeval + abstention, True),
    ]
    for name, path, samples, abstains in jobs:
        progress(f"{name}: storing")
        mapping = loaded(config, embedder, nlp, path, samples)
        progress(f"{name}: asking")
        with Engine(config.using(str(path)), embedder=embedder, nlp=nlp) as engine:
            asked = ask_all(engine, name, [s for s in samples if s.questions], mapping)
            abstaining = abstention_questions() if abstains else {}
            for sample in samples:
                for question in abstaining.get(sample.sample_id, ()):
                    asked.append(Asked(name, sample.sample_id, question.text, question.category, True, frozenset(),
                                       abstention=True))
                    search(engine, asked[-1])
            if name != "LoCoMo turns":  # turns answer in context: a few of them make no store
                progress(f"{name}: small scopes")
                asked += small_scopes(engine, name, [s for s in samples if s.questions], mapping)
        if name == "LongMemEval":
            for each in asked:
                each.sessions = sessions_of(each, mapping)
        everything += asked
    cache.write_bytes(pickle.dumps(everything))
    return everything


SMALL_SCOPES = (3, 8, 20)
"""The sizes of the small scopes drawn from a sample (``small_scopes``), in turn: a new user's store
holds a few memories, and the first of them has no neighbour."""


def small_scopes(engine: Engine, set_name: str, samples: Sequence[locomo.Sample], mapping: dict[str, dict[str, str]]
                 ) -> list[Asked]:
    """Scopes of a few memories (``SMALL_SCOPES``) drawn from each sample, as a new user's store is
    small: the evidence of one of its questions and other memories of it picked at random
    (seeded), each asked that question and, as a foreign one, one of the next sample's. A model
    fitted on whole conversations alone learns their odds (two memories in hundreds answer) and
    scores the right memory of a small store as unlikely."""
    rng = np.random.default_rng(7)
    asked = []
    for number, sample in enumerate(samples):
        other = samples[(number + 1) % len(samples)]
        for k, question in enumerate(sample.questions):
            size = SMALL_SCOPES[k % len(SMALL_SCOPES)]
            wanted = set(question.evidence)
            if len(wanted) >= size:
                continue
            others = [m.key for m in sample.memories if m.key not in wanted]
            picked = rng.choice(len(others), size=min(size - len(wanted), len(others)), replace=False)
            keys = wanted | {others[i] for i in picked}
            memories = [m for m in sample.memories if m.key in keys]
            scope = f"{sample.sample_id}~{size}~{k}"
            added = engine.add_many([MemoryInput(m.text) for m in memories], user_id=scope)
            ids = {m.key: result.memory.id for m, result in zip(memories, added, strict=True)}
            asked.append(Asked(f"{set_name}, small", scope, question.text, question.category, False,
                               frozenset(ids[key] for key in question.evidence), origin=sample.sample_id))
            if other.questions:
                foreign = other.questions[k % len(other.questions)]
                asked.append(Asked(f"{set_name}, small", scope, foreign.text, foreign.category, True, frozenset(),
                                   origin=sample.sample_id))
            mapping[scope] = ids
    for each in asked:
        search(engine, each)
    return asked


def abstention_questions() -> dict[str, list[locomo.Question]]:
    """Each abstention sample's questions, by sample (kept out of ``Sample.questions``: they have
    no evidence)."""
    return {raw["sample_id"]: [locomo.Question(qa["question"], qa["category"], ()) for qa in raw["qa"]]
            for raw in json.loads(LONGMEMEVAL_ABSTENTION.read_text(encoding="utf-8"))}


def sessions_of(asked: Asked, mapping: dict[str, dict[str, str]]) -> dict[str, int]:
    """Each memory id of the scope's session number (its key ``D<session>:<turn>``)."""
    return {memory_id: int(key[1:].split(":")[0]) for key, memory_id in mapping[asked.sample].items()}


def ask_small_stores(config, embedder, nlp) -> list[Asked]:
    """Each small store (``SMALL_STORES``) in a database of its own, new each run."""
    asked = []
    for name, (facts, answerable, unrelated) in SMALL_STORES.items():
        path = report.RESULTS / "small-stores.db"
        sqlite_file.remove_db(path)
        with Engine(config.using(str(path)), embedder=embedder, nlp=nlp) as engine:
            user = name.replace(" ", "_")
            ids = {fact: engine.add(fact, user_id=user)[0].memory.id for fact in facts}
            these = [Asked(name, user, query, 0, False, frozenset({ids[fact]})) for query, fact in answerable.items()]
            these += [Asked(name, user, query, 0, True, frozenset()) for query in unrelated]
            for each in these:
                search(engine, each)
        asked += these
    return asked


# --- scoring ------------------------------------------------------------------------------


def figures(asked: Sequence[Asked], weights: learned.Weights, floor: float) -> dict[str, float]:
    own = [a for a in asked if not a.foreign]
    foreign = [a for a in asked if a.foreign]
    rows, empty, others, session_hits = [], 0, [], []
    for a in own:
        ids, _ = returned(a, weights, floor)
        rows.append(metrics.score(ids, set(a.relevant)))
        empty += not ids
        if ids:
            others.append(sum(memory_id not in a.relevant for memory_id in ids))
        if a.sessions:
            wanted = {a.sessions[m] for m in a.relevant}
            session_hits.append(any(a.sessions[m] in wanted for m in ids[:5]))
    foreign_empty = sum(not returned(a, weights, floor)[0] for a in foreign)
    abstaining = [a for a in foreign if a.abstention]
    abstained = sum(not returned(a, weights, floor)[0] for a in abstaining)
    mean = metrics.mean(rows) if rows else {}
    return {
        "own": len(own), "recall@10": mean.get("recall@10", 0.0), "mrr": mean.get("mrr", 0.0),
        "own empty": empty / len(own) if own else 0.0,
        "foreign": len(foreign), "foreign empty": foreign_empty / len(foreign) if foreign else 0.0,
        "others": sum(others) / len(others) if others else 0.0,
        "sessions@5": sum(session_hits) / len(session_hits) if session_hits else float("nan"),
        "abstention empty": abstained / len(abstaining) if abstaining else float("nan"),
    }


COLUMNS = ("own", "recall@10", "mrr", "own empty", "foreign", "foreign empty", "others", "sessions@5",
           "abstention empty")


def parts(asked: Sequence[Asked]) -> Iterator[tuple[str, str, list[Asked]]]:
    for name in SETS:
        of_set = [a for a in asked if a.set == name]
        if name in SMALL_STORES:
            yield name, "all", of_set
            continue
        yield name, "tune", [a for a in of_set if a.tune]
        yield name, "check", [a for a in of_set if not a.tune]


def summary(asked: Sequence[Asked], weights: learned.Weights, floor: float) -> str:
    rows = []
    for name, part, chosen in parts(asked):
        got = figures(chosen, weights, floor)
        rows.append([name, part, *(got[c] for c in COLUMNS)])
    return report.table(["set", "part", *COLUMNS], rows)


def by_category(asked: Sequence[Asked], weights: learned.Weights, floor: float) -> str:
    rows = []
    for name, names in (("LoCoMo turns", locomo.CATEGORIES), ("LoCoMo facts", locomo.CATEGORIES),
                        ("LongMemEval", LONGMEMEVAL_CATEGORIES)):
        for category, label in names.items():
            chosen = [a for a in asked if a.set == name and a.category == category and not a.foreign]
            if chosen:
                got = figures(chosen, weights, floor)
                rows.append([name, label, got["own"], got["recall@10"], got["own empty"], got["sessions@5"]])
    return report.table(["set", "category", "questions", "recall@10", "own empty", "sessions@5"], rows)


def reliability(asked: Sequence[Asked], weights: learned.Weights) -> str:
    """Predicted against observed: every candidate of the first ``TOP_K``, in bins of its score."""
    edges = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.01)
    rows = []
    for name, part, chosen in parts(asked):
        if part == "tune":
            continue
        predicted, observed = [], []
        for a in chosen:
            order = weights.rank(a.candidates, TOP_K) if a.candidates else []
            predicted += [score.probability for _, score in order]
            observed += [a.ids[i] in a.relevant for i, _ in order]
        p, o = np.array(predicted), np.array(observed, dtype=float)
        for low, high in pairwise(edges):
            inside = (p >= low) & (p < high)
            if inside.any():
                rows.append([name, part, f"{low:.2f}–{min(high, 1):.2f}", int(inside.sum()), p[inside].mean(),
                             o[inside].mean()])
    return report.table(["set", "part", "score", "memories", "predicted", "observed"], rows)


# --- fitting ------------------------------------------------------------------------------


def fit(asked: Sequence[Asked], strength: float = 1.0) -> learned.Weights:
    """The model on every candidate of the tune parts, as ``ranking = "learned"`` runs it: a
    logistic regression with its classes balanced (a question has a few right memories among a
    hundred candidates, and balanced classes order them best), then its logit calibrated by a
    second, one-feature regression with the classes as they come (Platt scaling), so a score is
    the share of memories scored so that answer. Both are linear: the calibration folds into
    the weights, and the order is the balanced model's."""
    from sklearn.linear_model import LogisticRegression

    tune = [a for a in asked if a.tune and a.candidates]
    values = np.vstack([learned.matrix(a.candidates) for a in tune])
    labels = np.concatenate([a.labels() for a in tune])
    low, high = values.min(axis=0), values.max(axis=0)
    mean, scale = values.mean(axis=0), values.std(axis=0)
    scale[scale == 0] = 1.0
    standard = (values - mean) / scale
    ordering = LogisticRegression(C=strength, class_weight="balanced", max_iter=5000).fit(standard, labels)
    logits = ordering.decision_function(standard).reshape(-1, 1)
    platt = LogisticRegression(C=1e6, max_iter=5000).fit(logits, labels)
    slope, offset = float(platt.coef_[0][0]), float(platt.intercept_[0])
    return learned.Weights(tuple(learned.FEATURES), low, high, mean, scale, ordering.coef_[0] * slope,
                           float(ordering.intercept_[0]) * slope + offset)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reuse", action="store_true", help="score the candidates kept by the last run again")
    parser.add_argument("--write-weights", action="store_true", help=f"fit and write {learned.WEIGHTS.name}")
    parser.add_argument("--floor", type=float, default=None, help="the min_score to score (default: the configuration's)")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)
    cache = report.RESULTS / "recall-candidates.pickle"

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    asked = pickle.loads(cache.read_bytes()) if args.reuse and cache.exists() else collect(cache, progress)
    weights = fit(asked) if args.write_weights else learned.shipped()
    if args.write_weights:
        learned.WEIGHTS.write_text(weights.to_json("tune parts of LoCoMo turns and facts and LongMemEval"),
                                   encoding="utf-8")
    floor = load_config(environ={}).search.min_score if args.floor is None else args.floor
    checked = {name: [a for a in asked if a.set == name and not a.tune] for name in SETS}
    empties = ("own empty", "foreign empty")
    curve = report.table(["min_score", *(f"{name} {column}" for name in SETS for column in empties)],
                         [[f, *(got[column] for got in (figures(checked[name], weights, f) for name in SETS)
                                for column in empties)]
                          for f in (0.02, 0.05, 0.1, 0.15, 0.2, 0.3)])
    section = "\n\n".join([
        "## Recall as a user meets it (LoCoMo, LongMemEval, an everyday store)",
        f"`{report.command_line()}`", report.environment(),
        f"`min_score = {floor:g}`; `others`: memories returned beside those that answer, per own question answered.",
        summary(asked, weights, floor), "By category (all questions of the set):", by_category(asked, weights, floor),
        "Calibration (check parts, every memory of the first 20):", reliability(asked, weights),
        "The floor (check parts):", curve,
    ])
    report.publish("recall", section, not args.no_doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
