"""Errors the engine raises.

Every caller sees these, not driver exceptions: the MCP tools let them propagate
(the assistant reads the message as a tool error) and the CLI turns them into
``click.ClickException``. So each message names the offending value and says what
to send instead.
"""


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
