"""Errors the engine raises.

Every caller sees these, not driver exceptions: the MCP tools let them propagate
(the assistant reads the message as a tool error) and the CLI turns them into
``click.ClickException``. So each message names the offending value and says what
to send instead.
"""

import errno

SHOWN_CHARS = 80
"""How much of a rejected value a message quotes: enough to recognise it, never a flood."""


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters plus an ellipsis: every message quotes
    values through this, so a 1 MB id comes back as an 80-character excerpt."""
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit]) + "…"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


class TrimemError(Exception):
    """Base class: anything the engine refuses or cannot do."""


class InvalidArgument(TrimemError, ValueError):
    """The caller sent something malformed; the message says what to send instead."""


class NotFound(TrimemError, LookupError):
    """No memory with that id exists in the caller's scope (other scopes are never revealed)."""


class SchemaMismatch(TrimemError):
    """The database was built with another embedding model or dimension, or by a newer trimem."""


class ModelUnavailable(TrimemError):
    """The embedding model or NLP pipeline could not be loaded from local files."""


class DatabaseUnavailable(TrimemError):
    """The database server cannot be reached or refused this process: often passing (it is
    starting, restarting or overloaded), so a server retries and a caller may too."""

    retry_after_seconds = 5
    """What a caller is told to wait before trying again (HTTP ``Retry-After``)."""


class WriteConflict(TrimemError):
    """Another server's write collided with this one (PostgreSQL: a deadlock, or a row changed
    under it); nothing of this write was kept. The engine runs a write again before it says so
    (``store.retries``)."""


class DiskFull(TrimemError):
    """The disk holding a file trimem writes has no space left; nothing was written."""

    def __init__(self, where: object) -> None:
        super().__init__(f"the disk holding {where} is full; nothing was written. Free some space and try again")


def unwritable(path: object, exc: OSError, what: str = "") -> TrimemError:
    """What writing a file the user named (an export, a backup) says when the system refused:
    the disk is full, or the place cannot be written. ``what`` names the file's kind."""
    if exc.errno == errno.ENOSPC:
        return DiskFull(path)
    return InvalidArgument(f"cannot write {what}{path} ({exc.strerror or exc}); choose a path in a folder you can "
                           "write")
