"""Saying nothing: how often search answers with nothing, asked a conversation's own questions
and another conversation's ("foreign" ones, which no memory of this scope answers), and the
trade-off of the relevance floors (``store.ranking.relevance``).

Each conversation is asked its own questions and those of the next conversation of the file,
in its own scope, once through ``Engine.explain`` with the configured ``[search]`` (the
default): the ranking is the same whether the decision withholds it or not, and the figures
the decision was made from (the best similarity, whether every name the query mentions is
unknown here) let every other pair of floors be scored by the same rule without searching again. Mem0's
reference is asked the foreign questions too, through ``Engine.search``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from bench import locomo, metrics, report
from store import Config, Engine
from store.analysis.embeddings import Embedder
from store.analysis.nlp import NLP
from store.ranking import relevance

FLOORS = (0.2, 0.25, 0.3, 0.35, 0.4)
"""The ``relevance_floor`` values of the trade-off curve."""
UNKNOWN_NAMES_FLOORS = (0.4, 0.45, 0.5, 0.55, 0.6)
"""The ``relevance_floor_unknown_names`` values of the trade-off curve."""


@dataclass(frozen=True)
class Asked:
    """One question asked of one scope, and what the default search made of it."""

    sample: str
    foreign: bool
    relevant: frozenset[str]
    ranked: tuple[str, ...]
    """The memories it ranked, whether it returned them or withheld them."""
    returned: int
    best_similarity: float | None
    names: dict[str, float]
    words: int
    """The figures the decision is made from (``store.ranking.relevance.judge``)."""

    def answered(self, floor: float, unknown_names_floor: float) -> bool:
        """Whether the decision at these floors lets anything through."""
        return relevance.judge(self.best_similarity, self.names, self.words, floor, unknown_names_floor).answerable


@dataclass
class Abstention:
    """Every question asked, and how many results Mem0's reference gave each foreign one."""

    asked: list[Asked] = field(default_factory=list)
    reference_returned: list[tuple[str, int]] = field(default_factory=list)
    """(sample, results) of each foreign question asked of Mem0's reference."""


def questions(samples: Sequence[locomo.Sample]) -> Iterator[tuple[locomo.Sample, locomo.Question, bool]]:
    """Each conversation's own questions, then those of the next conversation (foreign)."""
    for number, sample in enumerate(samples):
        yield from ((sample, question, False) for question in sample.questions)
        if len(samples) > 1:
            foreign = samples[(number + 1) % len(samples)]
            yield from ((sample, question, True) for question in foreign.questions)


def ask(
    base: Config, reference: Config, samples: Sequence[locomo.Sample], mapping: dict[str, dict[str, str]],
    embedder: Embedder, nlp: NLP, top_k: int,
) -> Abstention:
    """Ask every own and foreign question of the default search (``base``), and the foreign ones
    of Mem0's reference."""
    result = Abstention()
    with Engine(base, embedder=embedder, nlp=nlp) as engine:
        for sample, question, foreign in questions(samples):
            explanation = engine.explain(question.text, user_id=sample.sample_id, top_k=top_k)
            decision = explanation.relevance
            relevant = frozenset() if foreign else frozenset(mapping[sample.sample_id][key] for key in question.evidence)
            result.asked.append(Asked(
                sample.sample_id, foreign, relevant,
                tuple(hit.memory.id for hit in explanation.hits or explanation.withheld), len(explanation.hits),
                decision.best_similarity if decision else None, decision.names if decision else {},
                explanation.analysis.term_count,
            ))
    with Engine(reference, embedder=embedder, nlp=nlp) as engine:
        for sample, question, foreign in questions(samples):
            if foreign:
                hits = engine.search(question.text, user_id=sample.sample_id, top_k=top_k)
                result.reference_returned.append((sample.sample_id, len(hits)))
    return result


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def _recall(asked: Sequence[Asked], answered: Sequence[bool] | None = None) -> float:
    """Mean recall@10 of own questions; with ``answered``, a question not answered finds nothing."""
    if not asked:
        return 0.0
    flags = answered if answered is not None else [True] * len(asked)
    found = [metrics.recall_at(list(a.ranked), set(a.relevant), 10) if ok else 0.0 for a, ok in zip(asked, flags)]
    return sum(found) / len(asked)


def parts(run: Abstention, check: Sequence[str]) -> dict[str, tuple[list[Asked], list[Asked], list[int]]]:
    """(own, foreign, reference results of foreign) questions of the tune, check and all conversations."""
    split = {"tune": lambda sample: sample not in check, "check": lambda sample: sample in check,
             "all": lambda sample: True}
    return {
        name: (
            [a for a in run.asked if not a.foreign and keep(a.sample)],
            [a for a in run.asked if a.foreign and keep(a.sample)],
            [count for sample, count in run.reference_returned if keep(sample)],
        )
        for name, keep in split.items()
    }


def summary_table(run: Abstention, check: Sequence[str], top_k: int) -> str:
    """Own and foreign questions, for the tune, check and all conversations: answered with
    nothing, recall@10 with the decision and without it, results per foreign question; and
    Mem0's reference on the foreign ones."""
    rows = []
    for name, (own, foreign, reference) in parts(run, check).items():
        rows.append([
            name, len(own), _share([a.returned == 0 for a in own]), _recall(own, [a.returned > 0 for a in own]),
            _recall(own), len(foreign), _share([a.returned == 0 for a in foreign]),
            sum(a.returned for a in foreign) / len(foreign) if foreign else 0.0,
            _share([count == 0 for count in reference]),
            sum(reference) / len(reference) if reference else 0.0,
        ])
    headers = [
        "conversations", "own questions", "own: nothing (lower is better)", "own recall@10",
        "own recall@10 without the decision", "foreign questions", "foreign: nothing (higher is better)",
        "foreign: results each", "Mem0: foreign nothing", "Mem0: foreign results each",
    ]
    return f"top_k={top_k}.\n\n" + report.table(headers, rows)


def curve_table(run: Abstention, check: Sequence[str]) -> str:
    """The trade-off: for each pair of floors, the foreign questions answered with nothing
    against the own ones answered with nothing and the recall@10 they lose, on the tune and
    the check conversations."""
    split = parts(run, check)
    rows = []
    for floor in FLOORS:
        for unknown in UNKNOWN_NAMES_FLOORS:
            row: list[object] = [floor, unknown]
            for name in ("tune", "check"):
                own, foreign, _ = split[name]
                answered = [a.answered(floor, unknown) for a in own]
                row += [_share([not a.answered(floor, unknown) for a in foreign]), _share([not ok for ok in answered]),
                        _recall(own) - _recall(own, answered)]
            rows.append(row)
    headers = ["floor", "unknown-names floor", *(f"{name}: {what}" for name in ("tune", "check")
               for what in ("foreign nothing", "own nothing", "own recall@10 lost"))]
    return report.table(headers, rows)
