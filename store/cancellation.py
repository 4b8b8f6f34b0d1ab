"""Stopping work whose caller is gone.

A front end that runs an engine call on a worker thread, and may stop waiting for it (a tool
call past its time limit, a client that hung up), hands the call a check with
``stopping_when``: it returns while the caller still waits and raises once it does not. The
engine calls ``checkpoint()`` between the stages of a write (before the models run, between
slices of a large batch, and before the transaction), so an abandoned write stops there and
stores nothing, instead of
holding the models and the writer for a caller that will never read the answer. A call made
without a check (the CLI, the Python API) is never stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_check: ContextVar[Callable[[], None] | None] = ContextVar("trimem_caller_check", default=None)


@contextmanager
def stopping_when(check: Callable[[], None]) -> Iterator[None]:
    """Run the block with ``check`` as its ``checkpoint``."""
    token = _check.set(check)
    try:
        yield
    finally:
        _check.reset(token)


def checkpoint() -> None:
    """Raise (whatever the front end's check raises) when the caller has stopped waiting."""
    if (check := _check.get()) is not None:
        check()
