"""Whether a query has an answer in the scope at all, decided once for the whole query before
any memory is returned: pure arithmetic, numbers in, a decision out.

Fusion ranks whatever the scope holds, so a question no memory answers still gets ``top_k``
memories. The fused score cannot tell: BM25's sigmoid and the entity boost lift a memory that
shares one common word or a speaker's name with the question. Two figures can
(docs/benchmarks.md, "Saying nothing"):

- **the best similarity** in meaning between the query and any memory of the scope (after
  filters and expiry). A memory that answers is close in meaning, even to a loose phrasing
  ("what car do I drive" ~ "My car is a 2015 Honda Civic", 0.34), while a query about
  something the scope never mentions stays far from all of it ("mortgage rate", 0.04);
- **the names the query mentions.** A question about a person or thing the scope has never
  stored ("When did Caroline go to the support group?" asked of John's memories) is often
  close in meaning to memories about other people doing similar things (0.36 on average on
  LoCoMo, where every chat is about family, work and hobbies). When the query names things
  and none of them is a name the scope knows, it must be much closer in meaning to count.

A name is known when a stored entity of the scope is at least ``KNOWN_NAME_SIMILARITY``
similar to it, or holds all its words ("Atlas" in "Project Atlas"). A query that mentions a
known name is about something the scope holds, so it is answerable whatever its similarity
(each memory still faces the semantic gate): a long memory dilutes its similarity to a short
question ("Where does Ines work?" ~ a 30-word memory about Ines's work and sleep, 0.15). One
known name is enough: "When did Caroline meet Jon?" asked of Caroline's memories is answerable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

KNOWN_NAME_SIMILARITY = 0.75
"""A query name whose closest stored entity is at least this similar is known to the scope
("Caroline" ~ "Caroline", 1.0; a stranger's first name ~ the scope's nearest one, 0.35-0.65)."""


@dataclass(frozen=True)
class Relevance:
    """The decision, and the figures it was made from (``explain_search`` shows them)."""

    answerable: bool
    """Whether any memory is likely to answer the query; when not, search returns nothing."""
    best_similarity: float | None
    """The highest similarity in meaning between the query and a memory of the scope (None: no memory)."""
    bar: float
    """The similarity the best memory needed: 0 when the query mentions a name the scope knows,
    ``unknown_names_floor`` when every name it mentions is unknown, else ``floor``."""
    names: dict[str, float]
    """Each name the query mentions, and how close the scope's closest stored name is (1.0: it
    holds all the name's words)."""
    known_name: bool
    """A name the query mentions is known to the scope."""
    unknown_names: bool
    """The query (of more than one word) names things, and none of them is known to the scope."""
    best_score: float | None = None
    """Under learned fusion, which decides by it: the best memory's score, which must reach ``bar``
    (``search.min_score``) for anything to be returned."""


def judge(
    best_similarity: float | None, names: Mapping[str, float], words: int, floor: float, unknown_names_floor: float
) -> Relevance:
    """Answerable when the query mentions a name the scope knows; else when the best memory is at
    least ``floor`` similar to the query, or, when the query names things of which the scope
    knows none, at least ``unknown_names_floor``.

    Unknown names do not raise the bar of a query of one word (``words``, its terms): with no
    sentence around it the tagger takes common words for names ("Diet" as an organisation), and
    a name the scope does not know is far in meaning from all of it anyway ("Paris", 0.14)."""
    known = bool(names) and max(names.values()) >= KNOWN_NAME_SIMILARITY
    unknown = words > 1 and bool(names) and not known
    bar = 0.0 if known else max(floor, unknown_names_floor) if unknown else floor
    answerable = best_similarity is not None and best_similarity >= bar
    return Relevance(answerable, best_similarity, bar, dict(names), known, unknown)


def near(best_similarity: float | None, unknown_names: bool, floor: float, unknown_names_floor: float) -> bool:
    """Under learned fusion, for a query that mentions no name the scope knows: whether some memory
    is near enough in meaning for the model's scores to count, at least ``floor``
    (``search.min_similarity``), and, when every name the query mentions is a stranger here,
    ``unknown_names_floor`` ("Where does Marco work?" asked of Ines's memories about her work)."""
    bar = max(floor, unknown_names_floor) if unknown_names else floor
    return best_similarity is not None and best_similarity >= bar
