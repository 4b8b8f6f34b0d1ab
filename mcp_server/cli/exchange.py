"""``trimem export`` and ``trimem import``: whole files of memories, out and in.

The file writing, the progress and the summary are ``mcp_server/cli/transfer.py``; the
format and the reading are ``store/exchange/``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, get_args

import click

from mcp_server.call_scope import default_scope
from mcp_server.cli.app import cli, open_engine
from mcp_server.cli.errors import engine_errors
from mcp_server.cli.options import json_option, scope_options
from mcp_server.cli.output import emit, format_options
from store.config import Config
from store.exchange.peers import SourceFormat

INTERRUPTED = 128 + 2
"""The exit status of a command stopped by Ctrl-C (SIGINT), as shells report one."""


@cli.command()
@click.argument("path", default="-", metavar="[PATH|-]")
@click.option("--user-id", help="Only this user's memories (default: every user's).")
@click.option("--agent-id", help="Only this agent's memories (of --user-id, else of the configured user).")
@click.option("--run-id", help="Only this run's memories (of --user-id, else of the configured user).")
@json_option("filters", "A metadata filter, as for list, e.g. '{\"category\": \"work\"}'.")
@click.option("--history", is_flag=True, help="Add each memory's ADD / UPDATE / DELETE / RESTORE events.")
@click.pass_obj
def export(config: Config, path: str, user_id: str | None, agent_id: str | None, run_id: str | None, filters: Any,
           history: bool) -> None:
    """Write memories to PATH (stdout for '-', the default) as JSON Lines: a header line, then one
    memory per line with its ids, text, metadata and dates; expired memories too, vectors never
    (an import derives its own). Without --user-id, --agent-id or --run-id, every user's
    memories. The file appears only when complete (then replacing PATH). See docs/export-format.md."""
    from mcp_server.cli.transfer import write_export

    named = user_id is not None or agent_id is not None or run_id is not None
    scope = default_scope(config, user_id, agent_id, run_id) if named else {}
    with open_engine(config) as engine:
        header = write_export(engine.export(**scope, filters=filters, history=history), path)
    counts = header["counts"]
    events = f" and {counts['history_events']} history events" if history else ""
    click.echo(f"exported {counts['memories']} memories{events} to {'stdout' if path == '-' else path}", err=True)


@cli.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--from", "source", type=click.Choice(get_args(SourceFormat)), default="trimem", show_default=True,
              help="The file's format: a trimem export, the MCP reference memory server's memory.jsonl, an "
                   "mcp-memory-service SQLite database, or Mem0's get_all JSON.")
@scope_options
@click.option("--dry-run", is_flag=True, help="Check every record and count what would be imported; write nothing.")
@format_options
@click.pass_obj
def import_(config: Config, path: Path, source: str, user_id: str | None, agent_id: str | None,
            run_id: str | None, dry_run: bool) -> None:
    """Import memories from PATH: each is embedded and linked again with this database's models,
    and keeps its id, dates, metadata and history. A memory whose text in the same scope is
    stored already, or whose id is taken (by a stored memory, or by a deleted one: `trimem
    restore` brings that back), is skipped and counted, so importing a file twice changes nothing.

    A record that names its own user_id, agent_id or run_id keeps it, whatever --user-id says
    (an export of several users puts each memory back with its own); --user-id, --agent-id and
    --run-id go to the records that name none (every record of the peers' formats except
    Mem0's). The summary counts both.

    Every record is checked before the first write: a bad one is reported with the file and its
    line (or row) and nothing is imported. Ctrl-C stops after the memories being written: those
    are kept, and the same import run again adds the rest."""
    from mcp_server.cli.transfer import ImportOut, progress, render_import, stop_on_interrupt
    from store.exchange.transfer import ImportInterrupted

    arguments = dict(source=source, **default_scope(config, user_id, agent_id, run_id))
    with open_engine(config, create=not dry_run) as engine, engine_errors(options=False), stop_on_interrupt() as stop:
        try:
            report = engine.import_memories(path, **arguments, dry_run=True, stop=stop)
            if not dry_run:
                with progress("importing") as update:
                    report = engine.import_memories(path, **arguments, progress=update, stop=stop)
        except ImportInterrupted as exc:
            click.echo(str(exc), err=True)
            raise click.exceptions.Exit(INTERRUPTED) from None
    emit(ImportOut(**dataclasses.asdict(report)), render_import)
