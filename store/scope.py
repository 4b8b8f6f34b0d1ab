"""Whose memories a call is about: a user, an agent, a run, or a combination of them.

A ``Scope`` holds the three ids, ``""`` for one not named, and is read in one of two ways,
each defined once here:

- **within** (every read): a memory is in the scope when it has each id the scope names; an
  id the scope does not name matches anything. ``named()`` is what a read must match.
- **exact** (where a memory is stored): an id not named is empty. ``values()`` is the key a
  memory, its entities and its history are filed under, and two memories share a scope only
  when all three agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import astuple, dataclass
from typing import Any

SCOPE_KEYS = ("user_id", "agent_id", "run_id")


@dataclass(frozen=True)
class Scope:
    """The ids of a scope, ``""`` for each one not named (see the module's two readings)."""

    user_id: str = ""
    agent_id: str = ""
    run_id: str = ""

    @classmethod
    def of(cls, ids: Mapping[str, Any]) -> Scope:
        """From a mapping of scope keys to ids; a missing key or ``None`` is not named."""
        return cls(*(ids.get(key) or "" for key in SCOPE_KEYS))

    def named(self) -> dict[str, str]:
        """Each id the scope names, by key (the within reading: what a read must match)."""
        return {key: value for key, value in zip(SCOPE_KEYS, astuple(self)) if value}

    def values(self) -> tuple[str, str, str]:
        """All three ids, ``""`` for one not named (the exact reading: where a memory is filed)."""
        return astuple(self)

    def __bool__(self) -> bool:
        return any(astuple(self))


EVERY_SCOPE = Scope()
"""Names no id, so every memory is within it (export of all users; an id unique in the file)."""
