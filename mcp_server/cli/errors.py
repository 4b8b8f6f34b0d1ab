"""The engine's errors as command errors, in the words a person at the command line types.

The engine's messages say what to fix and name its arguments (``top_k``); a command shows
them as ``click.ClickException`` (a message and exit status 1, never a traceback), with
those names spelt as options (``--top-k``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import click

from store.errors import TrimemError

CLI_WORDS = {
    "use next_offset from the last page": "use the --offset that the last page's 'more:' line shows",
    "user_id": "--user-id", "agent_id": "--agent-id", "run_id": "--run-id", "top_k": "--top-k",
    "expiration_date": "--expiration-date", "replace_metadata": "--replace-metadata", "memory_id": "MEMORY_ID",
}
"""Argument names in the engine's messages, and what a person at the command line types instead."""
_QUOTED = re.compile(r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")
_CLI_WORD = re.compile("|".join(rf"\b{re.escape(word)}\b" for word in CLI_WORDS))


def in_cli_words(message: str) -> str:
    """``message`` with argument names spelt as options (``top_k`` → ``--top-k``); quoted
    values (the engine quotes every value it echoes) are left as they are."""
    parts = _QUOTED.split(message)
    return "".join(part if i % 2 else _CLI_WORD.sub(lambda m: CLI_WORDS[m.group(0)], part)
                   for i, part in enumerate(parts))


@contextmanager
def engine_errors(options: bool = True) -> Iterator[None]:
    """The engine's messages say what to fix; show them as command errors, not tracebacks, and
    (``options``) with argument names spelt as this command's options. Messages about a
    configuration file or a JSON Lines file keep their keys: that is what the file says."""
    try:
        yield
    except TrimemError as exc:
        raise click.ClickException(in_cli_words(str(exc)) if options else str(exc)) from exc
