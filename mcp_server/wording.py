"""Records in a person's words, as the command line and the page both print them."""

from __future__ import annotations

import json
from typing import Any

from store.ranking.relevance import Relevance


def metadata_value(value: Any) -> str:
    """A metadata value as shown: compact JSON unless it is a plain string."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def relevance_line(relevance: Relevance) -> str:
    """The relevance decision in one line: the verdict, the best similarity against its bar, and
    the names the query mentions with how close the scope's closest stored name is."""
    best = "no memory" if relevance.best_similarity is None else f"best similarity {relevance.best_similarity:.3f}"
    verdict = "answerable" if relevance.answerable else "nothing relevant"
    sign = ">=" if relevance.answerable else "<"
    names = ", ".join(f"{name} {closeness:.2f}" for name, closeness in relevance.names.items())
    why = ("; a name it mentions is known here" if relevance.known_name
           else "; no name it mentions is known here" if relevance.unknown_names else "")
    return f"relevance: {verdict} ({best} {sign} bar {relevance.bar:g}{why}){f'; names: {names}' if names else ''}"
