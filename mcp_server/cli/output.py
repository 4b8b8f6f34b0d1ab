"""What a command prints, and where: the output format, tables or JSON, and the file stdout is.

A command prints a compact table when stdout is a terminal, otherwise JSON: the whole record,
in the full models of ``mcp_server/models.py`` (every field, whole ids and timestamps, texts
never cut), which of the MCP tools only ``get_memory`` and ``explain_search`` return (the others
return the lean briefs the model reads); ``--format`` chooses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import sys
from collections.abc import Callable
from typing import Any

import click
from pydantic import BaseModel

FORMATS = ("table", "json", "jsonl")
NO_CAP = sys.maxsize
"""The CLI prints whole texts: the tools' ``max_result_chars`` protects a context window, not a terminal."""


def format_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--format table|json|jsonl`` with ``--json`` and ``--jsonl`` as short forms; the choice
    is read by ``emit`` (through the context), so commands do not carry it."""

    def remember(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value:
            ctx.meta.setdefault("trimem.formats", set()).add(value)

    for flag, kind in (("--jsonl", "jsonl"), ("--json", "json")):
        fn = click.option(flag, flag_value=kind, expose_value=False, callback=remember,
                          help=f"Short for --format {kind}.")(fn)
    return click.option(
        "--format", type=click.Choice(FORMATS), expose_value=False, callback=remember,
        help="table for people (the default when stdout is a terminal); json, the whole records, as the get_memory "
             "tool gives one (the default otherwise); jsonl, one object per line.",
    )(fn)


def output_format() -> str:
    chosen = click.get_current_context().meta.get("trimem.formats", set())
    if len(chosen) > 1:
        raise click.UsageError(f"choose one output format, not {' and '.join(sorted(chosen))}")
    if chosen:
        return next(iter(chosen))
    return "table" if stdout_is_terminal() else "json"


def stdout_is_terminal() -> bool:
    """A person is reading (tests patch this: click's runner is never a terminal)."""
    return sys.stdout.isatty()


def emit(output: Any, render: Callable[[Any, int], str], items: str | None = None, indent: int | None = 2) -> None:
    """Print an output (a tool-shaped pydantic model, or engine results as for ``echo_json``):
    ``render(output, width)`` for a terminal, its JSON otherwise (``indent``ed); with ``jsonl``,
    one line per element of the list field ``items``."""
    kind = output_format()
    if kind == "table":
        click.echo(render(output, shutil.get_terminal_size().columns))
        return
    data = plain(output)
    if kind == "json":
        click.echo(json.dumps(data, indent=indent, ensure_ascii=False))
        return
    for item in data[items] if items else [data]:
        click.echo(json.dumps(item, ensure_ascii=False))


def echo_json(value: Any) -> None:
    """Print engine results (dataclasses, lists of them, or plain data) as JSON."""
    click.echo(json.dumps(plain(value), indent=2, ensure_ascii=False))


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: a pydantic model dumped, a dataclass as its dict, lists item by item."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def redirected_stdout_size() -> int | None:
    """The size of the file stdout is redirected to, None when it is a terminal or a pipe."""
    try:
        info = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):  # click's test runner has no file descriptor (io.UnsupportedOperation)
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def take_back_stdout(size: int | None) -> None:
    """Cut the file stdout is redirected to back to ``size``, and send what is still buffered
    nowhere, so Python's final flush does not fail again."""
    descriptor = sys.stdout.fileno()
    if size is not None:
        os.ftruncate(descriptor, size)
    os.dup2(os.open(os.devnull, os.O_WRONLY), descriptor)
