"""Standing preferences: memories that should shape every answer of their kind, a diet, an injury,
a code-style rule, the editor a person uses, recalled with a request they bear on even when the
request shares no word with them ("suggest a dinner recipe for me" and "I have been vegan since
2019" are 0.17 similar in meaning, as close as unrelated texts).

A memory is standing when its metadata says so (``KEY``): the caller marks it (``add_memory``'s
``standing``), or, when the caller does not say, ``reads_as_standing`` finds it stated in the
first person in the words such statements use.

A request bears on a standing memory when both lie in one field of life an assistant helps with
(``FIELDS``): the request close to the field's description, the memory close to it too. Close to a
field, requests are 0.34-0.43 similar and the memories stating a preference in it 0.30-0.44, while
questions about other things stay under ``QUERY_FIELD_FLOOR`` (measured with all-MiniLM-L6-v2 on
``bench/everyday.py``'s new user, docs/benchmarks.md). Preferences of no one field ("answer me in
British English") reach the assistant at every session's start instead (``trimem hook``). A query
that names someone or something the scope knows asks about them, not for help, and brings none.
Pure arithmetic and one regular expression: retrieval reads the vectors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from store.filters import Boolean, Equals, Filter

KEY = "standing"
"""The metadata key that marks a standing memory (``true``)."""
MARKED: Filter = Equals(KEY, Boolean(True))
"""The memories marked standing, as a metadata filter."""

FIELDS = (
    "food and eating: meals, cooking, recipes, restaurants, diet",
    "exercise and fitness: workouts, training, sports, running, injuries",
    "health and medicine: medication, doctors, allergies, symptoms",
    "programming: writing, reviewing and refactoring code, coding style",
    "software tools: text editor, IDE, terminal, keybindings, shell, operating system",
    "writing text: notes, emails, letters, essays, spelling, wording, tone",
    "travel: trips, flights, hotels, destinations",
)
"""The fields a standing preference bears on, each described as its embedding reads it."""

QUERY_FIELD_FLOOR = 0.3
"""A request lies in the field it is at least this similar to (the nearest one)."""
MEMORY_FIELD_FLOOR = 0.2
"""A standing memory bears on a request in a field it is at least this similar to."""
MOST = 3
"""Standing memories a request brings at most, the closest to its field first."""
LIKELY = 0.5
"""A memory scored at least this usually answers the request (scores are calibrated
probabilities): it comes before the standing preferences, which come before the rest."""

FIRST_PERSON = re.compile(r"\b(i|i'm|i've|me|my|we|we're|our)\b", re.IGNORECASE)
STATES_A_STANDING = re.compile(
    r"\b(prefer|always|never|usually|avoid|allergic|allergy|intoleran\w*|vegan|vegetarian|pescatarian"
    r"|gluten|lactose|kosher|halal|injur\w*|diabet\w*|asthma|use|using|favou?rite|hate|dislike|can't stand)\b",
    re.IGNORECASE,
)
"""Words that state how a person eats, lives, works or wants to be answered."""


def reads_as_standing(text: str) -> bool:
    """Whether ``text`` states a standing preference of its writer: in the first person, in the
    words of one (``STATES_A_STANDING``). "Ines is allergic to penicillin" is a fact about Ines."""
    return FIRST_PERSON.search(text) is not None and STATES_A_STANDING.search(text) is not None


def mark(text: str, metadata: Mapping[str, Any] | None, standing: bool | None) -> Mapping[str, Any] | None:
    """``metadata`` with ``KEY`` set as ``standing`` says (``None``: as ``reads_as_standing`` finds
    ``text``); unchanged when the metadata says so itself (or is no mapping, which validation
    refuses), or nothing is to be marked."""
    if metadata is not None and (not isinstance(metadata, Mapping) or KEY in metadata):
        return metadata
    if standing if standing is not None else reads_as_standing(text):
        return {**(metadata or {}), KEY: True}
    return metadata


def placed(scores: Sequence[float], preferences: int) -> int:
    """Where the standing memories a request brings go among the ``scores`` returned (never rising
    down the list): after every memory scored at least ``LIKELY``, before the rest."""
    return sum(score >= LIKELY for score in scores) if preferences else 0


def field_of(query: np.ndarray, fields: np.ndarray) -> int | None:
    """The field the request (``query``, a normalised embedding) lies in: the nearest of
    ``fields`` (their embeddings, one a row), when it is at least ``QUERY_FIELD_FLOOR`` similar."""
    similarities = fields @ query
    nearest = int(np.argmax(similarities))
    return nearest if similarities[nearest] >= QUERY_FIELD_FLOOR else None
