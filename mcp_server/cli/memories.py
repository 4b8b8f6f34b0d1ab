"""The memory commands: add, search, list, get, update, delete, restore, delete-all, history.

Each parses its options, makes one ``Engine`` call of the same name and prints the result as
the whole record (``mcp_server/models.py``, what ``get_memory`` returns for a memory). Option names are the keyword
names (``--top-k`` is ``top_k=``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

import click

from mcp_server.call_scope import default_scope, named_scope
from mcp_server.cli import tables
from mcp_server.cli.app import cli, open_engine
from mcp_server.cli.errors import engine_errors, in_cli_words
from mcp_server.cli.options import count_option, json_option, scope_options
from mcp_server.cli.output import NO_CAP, emit, format_options
from store.config import Config
from store.records import HistoryEvent, Memory
from store.validation import MAX_SQL_INTEGER


def memory_command(show: Callable[[Any], None]) -> click.Command:
    """A command on one memory: ``MEMORY_ID`` and the scope options, then the ``Engine`` method
    of the same name on them, whose result ``show`` prints. ``show``'s name is the command's
    and its docstring the help, as for any command."""

    @cli.command(show.__name__, help=show.__doc__)
    @click.argument("memory_id")
    @scope_options
    @format_options
    @click.pass_obj
    def command(config: Config, memory_id: str, user_id: str | None, agent_id: str | None,
                run_id: str | None) -> None:
        with open_engine(config) as engine:
            result = getattr(engine, show.__name__)(memory_id, **default_scope(config, user_id, agent_id, run_id))
        show(result)

    return command


@cli.command()
@click.argument("text", required=False)
@click.option("--file", "file", type=click.File("rb"),
              help="Add every line of a JSON Lines file ('-' for stdin) instead of TEXT: "
                   '{"text": ..., "metadata": {...}, "expiration_date": ..., "user_id": ...}.')
@scope_options
@json_option("metadata", "A JSON object stored with the memory.")
@click.option("--expiration-date",
              help="YYYY-MM-DD, today or later; the memory is hidden once this day has ended (UTC).")
@click.option("--standing/--not-standing", default=None,
              help="A preference that should shape every answer of its kind (a diet, an injury, a code-style "
                   "rule, an editor): recalled with requests it bears on. Default: as the text reads.")
@format_options
@click.pass_obj
def add(config: Config, text: str | None, file: BinaryIO | None, user_id: str | None, agent_id: str | None,
        run_id: str | None, metadata: Any, expiration_date: str | None, standing: bool | None) -> None:
    """Remember TEXT ('-' reads it from stdin); prints the memory and whether it was new (ADD) or
    already stored (DUPLICATE).

    With --file, remembers one memory per line and prints how many were added and how
    many were already stored. Lines without their own scope, metadata or expiration
    date take this command's. Every line is checked before the first write: a bad line
    is reported with its number and nothing is stored.
    """
    if (text is None) == (file is None):
        raise click.UsageError("give TEXT or --file FILE, not both and not neither")
    if text == "-":  # the text itself comes on stdin, e.g. from a pipe or a heredoc
        text = sys.stdin.read().strip()
    command_ids = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
    if file is not None:
        add_file(config, file, command_ids, metadata, expiration_date)
        return
    from mcp_server.models import AddOutput

    with open_engine(config, create=True) as engine:
        added = engine.add(text, **default_scope(config, **command_ids), metadata=metadata,
                           expiration_date=expiration_date, standing=standing)
    emit(AddOutput.of(added, NO_CAP), tables.added, items="results")


def add_file(config: Config, file: BinaryIO, command_ids: dict[str, str | None], metadata: Any,
             expiration_date: str | None) -> None:
    """``trimem add --file``: check every line, then add them chunk by chunk (see mcp_server/cli/bulk.py)."""
    from mcp_server.cli import bulk

    def scope_of(**line_ids: str) -> dict[str, str]:
        return default_scope(config, **(line_ids or command_ids))

    with engine_errors(options=False):
        memories = bulk.read_lines(file, scope_of=scope_of, metadata=metadata, expiration_date=expiration_date,
                                   limits=config.limits)
    added = duplicates = 0
    # A bar only for a person watching; redirected stderr (logs, CI) stays clean.
    progress = (click.progressbar(length=len(memories), label="adding", file=sys.stderr) if sys.stderr.isatty()
                else contextlib.nullcontext())
    with open_engine(config, create=True) as engine, progress as bar:
        for batch in bulk.batches(memories):
            results = engine.add_many(batch.items, **batch.scope.named(), expiration_date=batch.expiration_date)
            new = sum(result.event == "ADD" for result in results)
            added, duplicates = added + new, duplicates + len(results) - new
            if bar is not None:
                bar.update(len(batch.items))
    emit({"added": added, "duplicates": duplicates}, tables.added_count, indent=None)  # one line, as it always was


@cli.command()
@click.argument("query")
@scope_options
@count_option("top-k", "How many results (default from the configuration).")
@click.option("--threshold", type=click.FloatRange(0, 1),
              help="The semantic gate, 0 to 1 (default from the configuration).")
@json_option("filters", "A metadata filter, e.g. '{\"category\": \"work\"}'; created_at and updated_at take "
             "dates: '{\"created_at\": {\"gte\": \"2026-12-01\"}}'.")
@click.option("--show-expired", is_flag=True, help="Include memories past their expiration date.")
@click.option("--explain", is_flag=True, help="Show every part of every score, the query analysis and the "
              "dropped candidates (a table, or explain_search's output with --json).")
@format_options
@click.pass_obj
def search(config: Config, query: str, user_id: str | None, agent_id: str | None, run_id: str | None,
           top_k: int | None, threshold: float | None, filters: Any, show_expired: bool, explain: bool) -> None:
    """Memories relevant to QUERY, best first."""
    arguments = dict(default_scope(config, user_id, agent_id, run_id), top_k=top_k, threshold=threshold,
                     filters=filters, show_expired=show_expired)
    from mcp_server.models import ExplainOutput, SearchOutput

    with open_engine(config) as engine:
        if explain:
            from mcp_server.cli.explain_table import render

            explanation = engine.explain(query, **arguments)
            max_dropped = config.search.top_k if top_k is None else top_k
            emit(ExplainOutput.of(explanation, NO_CAP, max_dropped), lambda _output, width: render(explanation, width),
                 items="results")
        else:
            emit(SearchOutput.of(engine.search(query, **arguments), NO_CAP), tables.search_results, items="results")


@cli.command("list")
@scope_options
@json_option("filters", "A metadata filter, e.g. '{\"category\": \"work\"}'; created_at and updated_at take "
             "dates: '{\"created_at\": {\"gte\": \"2026-12-01\"}}'.")
@click.option("--show-expired", is_flag=True, help="Include memories past their expiration date.")
@count_option("limit", "Page size.", default=100)
@click.option("--offset", type=click.IntRange(0, MAX_SQL_INTEGER), default=0, show_default=True,
              help="Memories to skip.")
@format_options
@click.pass_obj
def list_(config: Config, user_id: str | None, agent_id: str | None, run_id: str | None, filters: Any,
          show_expired: bool, limit: int, offset: int) -> None:
    """A page of memories, newest first."""
    from mcp_server.models import MemoryPage

    with open_engine(config) as engine:
        memories = engine.list(**default_scope(config, user_id, agent_id, run_id), filters=filters,
                               show_expired=show_expired, limit=limit, offset=offset)
    emit(MemoryPage.of(memories, limit, offset, NO_CAP), tables.memory_page, items="memories")


@memory_command
def get(memory: Memory) -> None:
    """One memory by id (or the id's first characters, as tables show them)."""
    from mcp_server.models import MemoryOut

    emit(MemoryOut.of(memory, NO_CAP), tables.one_memory)


@cli.command()
@click.argument("memory_id")
@click.option("--text", help="The new text.")
@json_option("metadata", "A JSON object of keys to set (a key set to null is removed).")
@click.option("--replace-metadata", is_flag=True, help="Replace the whole metadata with --metadata instead of "
              "merging.")
@click.option("--expiration-date", help="YYYY-MM-DD, today or later; 'never' clears it.")
@scope_options
@format_options
@click.pass_obj
def update(config: Config, memory_id: str, text: str | None, metadata: Any, replace_metadata: bool,
           expiration_date: str | None, user_id: str | None, agent_id: str | None, run_id: str | None) -> None:
    """Change a memory's text, metadata or expiration date (the old version stays in its history)."""
    from mcp_server.models import MemoryOut

    if replace_metadata and metadata is None:
        raise click.UsageError("--replace-metadata goes with --metadata (send '{}' to empty the metadata)")
    with open_engine(config) as engine:
        memory = engine.update(memory_id, text=text, metadata=metadata, replace_metadata=replace_metadata,
                               expiration_date=expiration_date, **default_scope(config, user_id, agent_id, run_id))
    emit(MemoryOut.of(memory, NO_CAP), tables.one_memory)


@memory_command
def delete(memory: Memory) -> None:
    """Forget one memory; prints it as it was."""
    from mcp_server.models import DeletedOut, MemoryOut

    emit(DeletedOut(deleted=MemoryOut.of(memory, NO_CAP)),
         lambda output, width: "deleted:\n" + tables.one_memory(output.deleted, width))


@memory_command
def restore(memory: Memory) -> None:
    """Bring back a deleted memory (its text and metadata when deleted, under its old id)."""
    from mcp_server.models import MemoryOut

    emit(MemoryOut.of(memory, NO_CAP), tables.one_memory)


@cli.command("delete-all")
@scope_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@format_options
@click.pass_obj
def delete_all(config: Config, user_id: str | None, agent_id: str | None, run_id: str | None, yes: bool) -> None:
    """Forget every memory of the named user, agent or run (name at least one; an agent or run
    alone means the configured user's)."""
    with engine_errors():
        scope = named_scope(config, user_id, agent_id, run_id)
    if not yes:
        named = ", ".join(f"{key}={value!r}" for key, value in scope.items())
        click.confirm(f"Forget every memory of {in_cli_words(named)} in {config.location}?", abort=True)
    from mcp_server.models import DeletedCount

    with open_engine(config) as engine:
        count = engine.delete_all(**scope)
    emit(DeletedCount(deleted_count=count), lambda output, _width: f"deleted {output.deleted_count} memories")


@memory_command
def history(events: list[HistoryEvent]) -> None:
    """A memory's ADD / UPDATE / DELETE / RESTORE events, oldest first."""
    from mcp_server.models import HistoryOutput

    emit(HistoryOutput.of(events, NO_CAP), tables.history, items="events")
