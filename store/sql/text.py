"""The columns both SQL backends store a memory row and a token in, in the order of their records, and
the statements over them that need no dialect."""

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


DEGRADED_MEMORIES_SQL = f"SELECT {memory_columns('m')} FROM memories m WHERE m.analysis_degraded ORDER BY m.rowid"
"""Every memory the language model failed on (``NewMemory.analysis_degraded``), in key order; its
condition is the partial index ``memories_analysis_degraded``'s, word for word, so it reads only
the marked rows on both backends."""
DEGRADED_COUNT_SQL = (
    "SELECT n FROM (SELECT count(*) AS n FROM memories WHERE analysis_degraded) AS marked WHERE n > 0"
)
"""How many memories are marked, as one row, or no row when none is (a probe of ``doctor --check``)."""
