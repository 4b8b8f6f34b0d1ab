"""The columns both SQL backends store a memory row and a token in, in the order of their records."""

from __future__ import annotations

import dataclasses

from store.backend import MemoryRow, TokenRow

MEMORY_COLUMNS = tuple(field.name for field in dataclasses.fields(MemoryRow))
"""The columns every backend stores a ``MemoryRow`` in, in its order."""
TOKEN_COLUMNS = tuple(field.name for field in dataclasses.fields(TokenRow))
"""The columns of the ``tokens`` table, in the order of ``TokenRow``."""


def memory_columns(alias: str = "") -> str:
    """The columns of a ``MemoryRow``, in its order, optionally over a table alias."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + column for column in MEMORY_COLUMNS)
