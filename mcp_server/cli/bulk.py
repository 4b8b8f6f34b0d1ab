"""``trimem add --file``: memories from JSON Lines, checked in full before the first write.

One JSON object per line::

    {"text": "Ana is allergic to peanuts", "metadata": {"category": "health"},
     "expiration_date": "2027-01-31", "user_id": "ana"}

Only ``text`` is required. A line that names none of ``user_id`` / ``agent_id`` /
``run_id`` goes to the command's scope; a line without ``metadata`` or
``expiration_date`` takes the command's ``--metadata`` / ``--expiration-date``. Blank
lines are skipped. Every line is checked as an import checks a line of an export
(``store.exchange.transfer.check_line``), with today as the earliest expiration date, before
anything is written, so a bad line (with its number) stops the import with nothing
stored. Lines are then written per scope in chunks of :data:`CHUNK_LINES`, each chunk
one ``Engine.add_many`` call: one model batch and one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from store import clock
from store.config import LimitsConfig
from store.engine import MemoryInput
from store.errors import InvalidArgument
from store.exchange.transfer import CHUNK, BadLine, check_line, numbered
from store.scope import SCOPE_KEYS, Scope
from store.validation import check_scope

CHUNK_LINES = CHUNK
"""Lines per ``add_many`` call (the same chunks as an import)."""

KEYS = ("text", "metadata", "expiration_date", *SCOPE_KEYS)
"""The keys a line may have; any other key is refused, so a misspelt one is not lost."""
EXAMPLE = '{"text": "Ana likes tea"}'


@dataclass(frozen=True)
class Batch:
    """Up to :data:`CHUNK_LINES` checked memories sharing one scope and expiration date."""

    scope: Scope
    expiration_date: str | None
    items: list[MemoryInput]


def read_lines(
    lines: Iterable[bytes],
    *,
    scope_of: Callable[..., dict[str, str]],
    metadata: Mapping[str, Any] | None,
    expiration_date: str | None,
    limits: LimitsConfig,
) -> list[tuple[Scope, str | None, MemoryInput]]:
    """Every non-blank line as (scope, expiration date, memory), checked; raises ``BadLine``.

    ``scope_of(**ids)`` turns the ids a line names (none, for the command's own) into its scope.
    """
    today = clock.today()
    parsed = []
    for where, value in numbered(lines, KEYS, EXAMPLE):
        try:
            parsed.append(_line(value, scope_of, metadata, expiration_date, limits, today))
        except InvalidArgument as exc:
            raise BadLine(f"{where}: {exc}") from None
    return parsed


def batches(memories: list[tuple[Scope, str | None, MemoryInput]]) -> Iterator[Batch]:
    """Group by scope and expiration date (first appearance first), in chunks of CHUNK_LINES."""
    groups: dict[tuple[Scope, str | None], list[MemoryInput]] = {}
    for scope, expiry, item in memories:
        groups.setdefault((scope, expiry), []).append(item)
    for (scope, expiry), items in groups.items():
        for start in range(0, len(items), CHUNK_LINES):
            yield Batch(scope, expiry, items[start : start + CHUNK_LINES])


def _line(
    value: dict[str, Any],
    scope_of: Callable[..., dict[str, str]],
    metadata: Mapping[str, Any] | None,
    expiration_date: str | None,
    limits: LimitsConfig,
    today: str,
) -> tuple[Scope, str | None, MemoryInput]:
    """One line with the command's metadata and expiration date where it has none, checked in
    the scope ``scope_of`` gives the ids it names."""
    scope = check_scope(**scope_of(**{key: value[key] for key in SCOPE_KEYS if key in value}))
    line = {"metadata": metadata, "expiration_date": expiration_date, **value}
    memory = check_line({key: line[key] for key in line if key not in SCOPE_KEYS}, scope, limits, today)
    return scope, memory.expiration_date, MemoryInput(memory.text, memory.metadata)
