"""Ranking metrics with binary relevance: pure functions, ids in, numbers in [0, 1] out.

``ranked`` is a result list, best first (ids may repeat only if the caller lets them;
a repeat never counts twice). ``relevant`` is the set of ids that answer the question.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence


def recall_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """Share of the relevant ids found in the first ``k`` results (0 when nothing is relevant)."""
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def ndcg_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """Normalised discounted cumulative gain at ``k``: gain 1 per relevant id, discount
    ``1 / log2(rank + 1)``, divided by the gain of a perfect ranking of ``min(|relevant|, k)`` ids."""
    if not relevant:
        return 0.0
    seen: set[str] = set()
    dcg = 0.0
    for rank, item in enumerate(ranked[:k], start=1):
        if item in relevant and item not in seen:
            seen.add(item)
            dcg += 1.0 / math.log2(rank + 1)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(relevant), k) + 1))
    return dcg / ideal


def reciprocal_rank(ranked: Sequence[str], relevant: set[str]) -> float:
    """1 / rank of the first relevant id in the list, 0 if none appears (MRR over the list returned)."""
    for rank, item in enumerate(ranked, start=1):
        if item in relevant:
            return 1.0 / rank
    return 0.0


def first_rank(ranked: Sequence[str], relevant: set[str]) -> int | None:
    """The 1-based rank of the first relevant id, or ``None``."""
    for rank, item in enumerate(ranked, start=1):
        if item in relevant:
            return rank
    return None


METRICS = ("recall@5", "recall@10", "recall@20", "ndcg@10", "mrr")


def score(ranked: Sequence[str], relevant: set[str]) -> dict[str, float]:
    """Every reported metric for one question."""
    return {
        "recall@5": recall_at(ranked, relevant, 5),
        "recall@10": recall_at(ranked, relevant, 10),
        "recall@20": recall_at(ranked, relevant, 20),
        "ndcg@10": ndcg_at(ranked, relevant, 10),
        "mrr": reciprocal_rank(ranked, relevant),
    }


def mean(rows: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The per-metric mean of per-question scores (0 for an empty set)."""
    rows = list(rows)
    if not rows:
        return {name: 0.0 for name in METRICS}
    return {name: sum(row[name] for row in rows) / len(rows) for name in METRICS}
