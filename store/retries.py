"""Write transactions that collided with another server's write, run again.

Several servers write to one PostgreSQL database at once. When two of their transactions wait
on each other (a deadlock), or one finds a row the other changed under it, PostgreSQL rolls one
back whole, and the backend says so as ``WriteConflict``. Nothing of that write was kept, and its
models' work (done before the transaction) still holds, so it is run again from the start after
a short random wait, as PostgreSQL's documentation advises. SQLite writes one transaction at a
time and never raises it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from store.backend import Backend, Transaction
from store.errors import WriteConflict

logger = logging.getLogger(__name__)

T = TypeVar("T")

WRITE_ATTEMPTS = 3
"""How many times a write transaction is tried before its conflict reaches the caller."""
WAIT_S = 0.05
"""The longest wait before the second attempt, doubled before each later one (the wait is random
below it, so two servers that collided do not meet again at once)."""


def transact(backend: Backend, body: Callable[[Transaction], T]) -> T:
    """``body(txn)`` in one write transaction of ``backend``, committed when it returns. Run again
    from the start when the transaction collided with another server's write, up to
    ``WRITE_ATTEMPTS`` times in all; so ``body`` must read what it decides on from ``txn``."""
    for attempt in range(1, WRITE_ATTEMPTS):
        try:
            with backend.transaction() as txn:
                return body(txn)
        except WriteConflict as exc:
            logger.info("a write transaction collided with another server's (%s); trying it again", exc)
            time.sleep(random.uniform(0, WAIT_S * 2 ** (attempt - 1)))
    with backend.transaction() as txn:  # the last attempt: a conflict now reaches the caller
        return body(txn)
