"""trimem's one clock: UTC timestamps for what is written, UTC days for what expires."""

from __future__ import annotations

import datetime as dt


def now() -> str:
    """UTC timestamp, always with six digits of microseconds, so newest-first ordering is stable
    (``isoformat()`` alone drops them when they happen to be zero, and the text sorts wrong)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


def today() -> str:
    """Today's date in UTC, the clock expiration dates are read against (a memory expires
    after its expiration day, and days change at midnight UTC, not at local midnight)."""
    return dt.datetime.now(dt.UTC).date().isoformat()
