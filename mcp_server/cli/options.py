"""Options that several commands take, each defined once: the scope, a count, a JSON object."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from store.config import Config
from store.errors import TrimemError
from store.validation import json_object


def scope_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--user-id``, ``--agent-id``, ``--run-id``; without ``--user-id`` the configured default user."""
    for name, help_text in reversed(
        (
            ("user-id", "Whose memories (default: the configured user_id)."),
            ("agent-id", "Narrow to one agent's memories of that user."),
            ("run-id", "Narrow to one run's or session's memories of that user."),
        )
    ):
        fn = click.option(f"--{name}", help=help_text)(fn)
    return fn


def count_option(name: str, help_text: str, default: int | None = None) -> Callable[..., Any]:
    """``--top-k`` / ``--limit``: a count from 1 to the configured ``max_top_k``, checked here so
    the message names the option."""

    def check(ctx: click.Context, _param: click.Parameter, value: int | None) -> int | None:
        maximum = ctx.find_object(Config).limits.max_top_k
        if value is not None and not 1 <= value <= maximum:
            raise click.BadParameter(f"must be between 1 and {maximum} (limits.max_top_k), got {value}")
        return value

    return click.option(f"--{name}", type=int, default=default, show_default=default is not None, callback=check,
                        help=help_text)


def json_option(name: str, help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """An option holding a JSON object, parsed before the command runs."""

    def parse(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return None
        try:
            return json_object(value, """'{"category": "work"}'""")
        except TrimemError as exc:
            raise click.BadParameter(str(exc)) from None

    return click.option(f"--{name}", callback=parse, help=help_text)
