"""Records in a person's words, as the command line and the page both print them."""

from __future__ import annotations

import json
from typing import Any

from store.ranking.relevance import Relevance
from store.records import LearnedScore


def metadata_value(value: Any) -> str:
    """A metadata value as shown: compact JSON unless it is a plain string."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def relevance_line(relevance: Relevance) -> str:
    """The relevance decision in one line: the verdict, the best score (learned fusion) or
    similarity (the hand-set fusion) against its bar, and the names the query mentions with how
    close the scope's closest stored name is."""
    best = ("no memory" if relevance.best_similarity is None
            else f"best score {relevance.best_score:.3f}" if relevance.best_score is not None
            else f"best similarity {relevance.best_similarity:.3f}")
    verdict = "answerable" if relevance.answerable else "nothing relevant"
    sign = ">=" if relevance.answerable else "<"
    names = ", ".join(f"{name} {closeness:.2f}" for name, closeness in relevance.names.items())
    why = ("; a name it mentions is known here" if relevance.known_name
           else "; no name it mentions is known here" if relevance.unknown_names else "")
    return f"relevance: {verdict} ({best} {sign} bar {relevance.bar:g}{why}){f'; names: {names}' if names else ''}"


def learned_line(learned: LearnedScore) -> str:
    """How learned fusion scored a memory, in one line: the logit as the sum of its parts (the
    strongest features by name), the probability it gives, and the score where that differs."""
    parts = [f"intercept {learned.intercept:+.2f}", *(f"{p.feature} {p.pull:+.2f}" for p in learned.strongest),
             f"others {learned.others:+.2f}"]
    line = f"learned: {', '.join(parts)} = logit {learned.logit:+.2f}, probability {learned.probability:.3f}"
    if learned.restates:
        line += "; the query all but repeats it, so it comes first, in the hand-set order"
    return line + (f"; score {learned.score:.3f}, as high as the best after it" if learned.score != learned.probability else "")


NOTHING_RELEVANT = "No stored memory is relevant to this query."
"""What a search that returns nothing says, on every front end."""
