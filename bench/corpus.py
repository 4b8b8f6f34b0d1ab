"""Benchmark texts from LoCoMo: distinct memory texts beyond the real turns, and fixed question samples.

Real turns run out at 2,760, and trimem refuses an exact repeat (``normalized_hash``), so a
benchmark that stores more makes variants of them. Two ways, each kept by the benchmarks
whose recorded figures were measured with it: a stop-word opening after the speaker
(``variants``: the BM25 terms stay the turn's own, so a stand-in model can reuse its
turn's analysis) and a round-number suffix (``suffixed``: simple, for servers fed over MCP).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from bench import locomo
from store.validation import normalized_hash

OPENINGS = tuple(
    word.capitalize()
    for word in ["also", "well", "so", "and", "but", "then", "yet", "still", "anyway", "besides", "indeed", "meanwhile", "moreover", "nevertheless", "otherwise", "therefore", "hence", "however", "perhaps", "sometimes", "often", "again", "really", "even", "just", "only", "quite", "rather", "together", "though", "thus", "somehow", "afterwards", "always", "already", "anyhow", "once", "here", "there", "now", "too"]
)
"""Stop words (spaCy's English list) that open a repeated turn: BM25 terms stay the turn's own."""


def texts(samples: Sequence[locomo.Sample], count: int) -> list[str]:
    """``count`` distinct memory texts: the real turns, then rounds of the same turns with a
    stop-word opening after the speaker ("Caroline: Also, …", then "Caroline: Also, well, …")."""
    return list(variants(samples, count))


def variants(samples: Sequence[locomo.Sample], count: int) -> dict[str, str]:
    """``count`` distinct texts, each mapped to the real turn it repeats (itself for a real turn).

    The openings are spaCy stop words, so a variant's BM25 terms are exactly its turn's: one
    word, then (past 115,920 texts) two ("Also, well, …").
    """
    turns = [turn.text for sample in samples for turn in sample.memories]
    found: dict[str, str] = {}
    seen: set[str] = set()
    pairs = (f"{first}, {second.lower()}" for first in OPENINGS for second in OPENINGS if first != second)
    for opening in ("", *OPENINGS, *pairs):
        for text in turns:
            speaker, body = text.split(":", 1)
            candidate = f"{speaker}: {opening}, {body.strip()}" if opening else text
            digest = normalized_hash(candidate)
            if digest not in seen:
                seen.add(digest)
                found[candidate] = text
                if len(found) == count:
                    return found
    raise ValueError(f"cannot make {count} distinct texts from this data (made {len(found)})")


def suffixed(turns: Sequence[str], count: int) -> list[str]:
    """``count`` distinct memory texts: the turns, then rounds of them with a " (#n)" suffix.

    Distinct after trimem's own folding (``normalized_hash``), so no add is a DUPLICATE.
    """
    found: list[str] = []
    seen: set[str] = set()
    for round_ in range(count // max(len(turns), 1) + 2):
        for turn in turns:
            text = f"{turn} (#{round_})" if round_ else turn
            digest = normalized_hash(text)
            if digest not in seen:
                seen.add(digest)
                found.append(text)
                if len(found) == count:
                    return found
    raise ValueError(f"cannot make {count} distinct texts from {len(turns)} turns (made {len(found)})")


def queries(samples: Sequence[locomo.Sample], count: int) -> list[str]:
    """A fixed, shuffled sample of the data's questions."""
    questions = [question.text for sample in samples for question in sample.questions]
    random.Random(0).shuffle(questions)
    return questions[:count]


def cycle(items: Sequence[str], count: int) -> list[str]:
    """The first ``count`` items, repeating from the start if there are fewer."""
    if not items:
        raise ValueError("no items to cycle through")
    return [items[i % len(items)] for i in range(count)]
