"""``trimem export`` and ``trimem import``: writing the export file, the progress shown while
importing, and the import summary. The format and the reading are ``store/exchange/transfer.py``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, get_type_hints

import click
from pydantic import create_model

from store import files
from store.errors import unwritable
from store.exchange.transfer import ImportReport

ImportOut = create_model(  # the summary's JSON is the report's fields, defined once in store
    "ImportOut", **{name: (hint, ...) for name, hint in get_type_hints(ImportReport).items()}
)


def write_export(lines: Iterable[str], target: str) -> dict[str, Any]:
    """Write the lines to ``target`` ('-' for stdout) and return the header. A file appears
    only when complete: it is written beside it under a temporary name, then renamed. It holds
    memories, so it is made 0600, its owner's alone (``store.files``)."""
    lines = iter(lines)
    header = next(lines)
    if target == "-":
        sys.stdout.write(header)
        sys.stdout.writelines(lines)
        sys.stdout.flush()
        return json.loads(header)
    path = Path(target)
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.unlink(missing_ok=True)  # left by an export that was killed: made anew, never reused
        with open(files.create_private(partial), "w", encoding="utf-8") as out:
            out.write(header)
            out.writelines(lines)
        os.replace(partial, path)
    except OSError as exc:
        raise unwritable(path, exc) from None
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
    return json.loads(header)


@contextlib.contextmanager
def progress(label: str) -> Iterator[Callable[[int, int | None], None] | None]:
    """A ``progress(done, total)`` callback drawing a bar on stderr, or ``None`` when stderr is
    not a terminal (logs and CI stay clean)."""
    if not sys.stderr.isatty():
        yield None
        return
    with contextlib.ExitStack() as stack:
        state: dict[str, Any] = {"bar": None, "done": 0}

        def update(done: int, total: int | None) -> None:
            if total is None:
                click.echo(f"\r{label}: {done}", nl=False, err=True)
                return
            if state["bar"] is None:
                state["bar"] = stack.enter_context(click.progressbar(length=total, label=label, file=sys.stderr))
            state["bar"].update(done - state["done"])
            state["done"] = done

        yield update


@contextlib.contextmanager
def stop_on_interrupt() -> Iterator[Callable[[], bool]]:
    """Ctrl-C asks the import to stop after the chunk it is writing, not in the middle of it:
    yields the ``stop`` check the import makes after each chunk, so the count it reports kept is
    exactly what was committed. Waiting is short: a chunk is one model batch."""
    pressed = threading.Event()

    def press(_signal: int, _frame: Any) -> None:
        if not pressed.is_set():
            click.echo("\nstopping after the memories being written now…", err=True)
        pressed.set()

    previous = signal.signal(signal.SIGINT, press)
    try:
        yield pressed.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


def render_import(output: Any, _width: int) -> str:
    """The import summary for a person."""
    verb = "would import" if output.dry_run else "imported"
    lines = [f"{verb} {output.imported} of {output.read} memories ({output.source})",
             (f"skipped: {output.skipped_same_id} whose id is taken (stored, or a deleted memory's), "
             f"{output.skipped_same_text} whose text is stored already in their scope")]
    if output.history_events:
        lines.append(f"history events kept: {output.history_events}")
    if output.mapped:
        lines.append("read: " + ", ".join(f"{count} {kind}" for kind, count in output.mapped.items()))
    if output.skipped:
        lines.append("left out: " + ", ".join(f"{count} {why}" for why, count in output.skipped.items()))
    scopes = scope_parts(output)
    return "\n".join([*lines, *(["scopes: " + "; ".join(scopes)] if scopes else [])])


def scope_parts(output: Any) -> list[str]:
    """Whose memories the records became: a record's own scope wins over the import's."""
    parts = []
    if output.own_scope:
        parts.append(f"{output.own_scope} records named their own user_id, agent_id or run_id and kept it")
    if output.import_scope:
        given = ", ".join(f"{key}={value!r}" for key, value in (output.default_scope or {}).items())
        parts.append(f"{output.import_scope} named none and went to {given}")
    return parts
