"""The ``trimem`` command: ``serve`` for MCP clients, and one command per engine operation.

Each command opens the engine, makes one ``Engine`` call and prints its result as the
JSON of the engine's dataclasses (``asdict``), so scripts read the same fields the MCP
tools return. Option names are the keyword names (``--top-k`` is ``top_k=``). Engine
errors become ``click.ClickException`` with the engine's message. Logs go to stderr.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import click

from store.config import Config, load_config
from store.errors import TrimemError

from . import default_scope, named_scope

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A TOML file overriding configs/default.toml (same sections and keys).",
)
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), help="The database file to use.")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), help="Logging to stderr.")
@click.version_option(package_name="trimem")
@click.pass_context
def cli(ctx: click.Context, config_path: Path | None, db_path: Path | None, log_level: str | None) -> None:
    """trimem: long-term memory for AI assistants, in one local SQLite file.

    Configuration comes from configs/default.toml, then --config, then TRIMEM_*
    environment variables (e.g. TRIMEM_USER_ID), then these options.
    """
    with engine_errors():
        config = load_config(config_path)
    if db_path is not None:
        config = config.replace("store", db_path=str(db_path))
    if log_level is not None:
        config = config.replace("server", log_level=log_level.upper())
    # Configure before the MCP SDK does, so every record goes to stderr in one plain format.
    logging.basicConfig(
        stream=sys.stderr,
        level=config.server.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    ctx.obj = config


@contextmanager
def engine_errors() -> Iterator[None]:
    """The engine's messages say what to fix; show them as command errors, not tracebacks."""
    try:
        yield
    except TrimemError as exc:
        raise click.ClickException(str(exc)) from exc


@contextmanager
def open_engine(config: Config) -> Iterator[Any]:
    from store.engine import Engine  # numpy and apsw: only for commands that use the database

    with engine_errors(), Engine(config) as engine:
        yield engine


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


def json_option(name: str, help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """An option holding a JSON object, parsed before the command runs."""

    def parse(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not valid JSON ({exc}); e.g. '{{\"category\": \"work\"}}'") from None

    return click.option(f"--{name}", callback=parse, help=help_text)


def echo_json(value: Any) -> None:
    """Print engine results (dataclasses, lists of them, or plain data) as JSON."""
    click.echo(json.dumps(_plain(value), indent=2, ensure_ascii=False))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


@cli.command()
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
              help="stdio for Claude Desktop / Code; http serves streamable HTTP on 127.0.0.1.")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True,
              help="Port for --transport http.")
@click.pass_obj
def serve(config: Config, transport: str, port: int) -> None:
    """Run the MCP server (what an MCP client's configuration starts)."""
    from .server import build_server

    server = build_server(config)
    if transport == "stdio":
        server.run("stdio")
    else:
        # Loopback only: the server has no authentication.
        server.run("streamable-http", host="127.0.0.1", port=port)


@cli.command()
@click.argument("text", required=False)
@click.option("--file", "file", type=click.File("rb"),
              help="Add every line of a JSON Lines file ('-' for stdin) instead of TEXT: "
                   '{"text": ..., "metadata": {...}, "expiration_date": ..., "user_id": ...}.')
@scope_options
@json_option("metadata", "A JSON object stored with the memory.")
@click.option("--expiration-date",
              help="YYYY-MM-DD, today or later; the memory is hidden once this day has ended (UTC).")
@click.pass_obj
def add(config: Config, text: str | None, file: BinaryIO | None, user_id: str | None, agent_id: str | None,
        run_id: str | None, metadata: Any, expiration_date: str | None) -> None:
    """Remember TEXT; prints the memory and whether it was new (ADD) or already stored (DUPLICATE).

    With --file, remembers one memory per line and prints how many were added and how
    many were already stored. Lines without their own scope, metadata or expiration
    date take this command's. Every line is checked before the first write: a bad line
    is reported with its number and nothing is stored.
    """
    if (text is None) == (file is None):
        raise click.UsageError("give TEXT or --file FILE, not both and not neither")
    command_ids = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
    if file is not None:
        add_file(config, file, command_ids, metadata, expiration_date)
        return
    with open_engine(config) as engine:
        echo_json(engine.add(text, **default_scope(config, **command_ids), metadata=metadata,
                             expiration_date=expiration_date))


def add_file(config: Config, file: BinaryIO, command_ids: dict[str, str | None], metadata: Any,
             expiration_date: str | None) -> None:
    """``trimem add --file``: check every line, then add them chunk by chunk (see mcp_server/bulk.py)."""
    from . import bulk

    def scope_of(**line_ids: str) -> dict[str, str]:
        return default_scope(config, **(line_ids or command_ids))

    with engine_errors():
        memories = bulk.read_lines(file, scope_of=scope_of, metadata=metadata, expiration_date=expiration_date,
                                   limits=config.limits)
    added = duplicates = 0
    # A bar only for a person watching; redirected stderr (logs, CI) stays clean.
    progress = (click.progressbar(length=len(memories), label="adding", file=sys.stderr) if sys.stderr.isatty()
                else contextlib.nullcontext())
    with open_engine(config) as engine, progress as bar:
        for batch in bulk.batches(memories):
            results = engine.add_many(batch.items, **batch.scope, expiration_date=batch.expiration_date)
            new = sum(result.event == "ADD" for result in results)
            added, duplicates = added + new, duplicates + len(results) - new
            if bar is not None:
                bar.update(len(batch.items))
    click.echo(json.dumps({"added": added, "duplicates": duplicates}))


@cli.command()
@click.argument("query")
@scope_options
@click.option("--top-k", type=int, help="How many results (default from the configuration).")
@click.option("--threshold", type=float, help="The semantic gate, 0 to 1 (default from the configuration).")
@json_option("filters", "A metadata filter, e.g. '{\"category\": \"work\"}'.")
@click.option("--show-expired", is_flag=True, help="Include memories past their expiration date.")
@click.option("--explain", is_flag=True, help="Show every part of every score as a table.")
@click.pass_obj
def search(config: Config, query: str, user_id: str | None, agent_id: str | None, run_id: str | None,
           top_k: int | None, threshold: float | None, filters: Any, show_expired: bool, explain: bool) -> None:
    """Memories relevant to QUERY, best first."""
    arguments = dict(default_scope(config, user_id, agent_id, run_id), top_k=top_k, threshold=threshold,
                     filters=filters, show_expired=show_expired)
    with open_engine(config) as engine:
        if explain:
            from .explain_table import render

            click.echo(render(engine.explain(query, **arguments)))
        else:
            echo_json(engine.search(query, **arguments))


@cli.command("list")
@scope_options
@json_option("filters", "A metadata filter, e.g. '{\"category\": \"work\"}'.")
@click.option("--show-expired", is_flag=True, help="Include memories past their expiration date.")
@click.option("--limit", type=int, default=100, show_default=True, help="Page size.")
@click.option("--offset", type=int, default=0, show_default=True, help="Memories to skip.")
@click.pass_obj
def list_(config: Config, user_id: str | None, agent_id: str | None, run_id: str | None, filters: Any,
          show_expired: bool, limit: int, offset: int) -> None:
    """A page of memories, newest first."""
    with open_engine(config) as engine:
        echo_json(engine.list(**default_scope(config, user_id, agent_id, run_id), filters=filters,
                              show_expired=show_expired, limit=limit, offset=offset))


@cli.command()
@click.argument("memory_id")
@scope_options
@click.pass_obj
def get(config: Config, memory_id: str, user_id: str | None, agent_id: str | None, run_id: str | None) -> None:
    """One memory by id."""
    with open_engine(config) as engine:
        echo_json(engine.get(memory_id, **default_scope(config, user_id, agent_id, run_id)))


@cli.command()
@click.argument("memory_id")
@click.option("--text", help="The new text.")
@json_option("metadata", "A JSON object replacing the metadata.")
@scope_options
@click.pass_obj
def update(config: Config, memory_id: str, text: str | None, metadata: Any, user_id: str | None,
           agent_id: str | None, run_id: str | None) -> None:
    """Change a memory's text and/or metadata (the old version stays in its history)."""
    with open_engine(config) as engine:
        echo_json(engine.update(memory_id, text=text, metadata=metadata,
                                **default_scope(config, user_id, agent_id, run_id)))


@cli.command()
@click.argument("memory_id")
@scope_options
@click.pass_obj
def delete(config: Config, memory_id: str, user_id: str | None, agent_id: str | None, run_id: str | None) -> None:
    """Forget one memory; prints it as it was."""
    with open_engine(config) as engine:
        echo_json(engine.delete(memory_id, **default_scope(config, user_id, agent_id, run_id)))


@cli.command("delete-all")
@scope_options
@click.confirmation_option(prompt="Forget every memory in this scope?")
@click.pass_obj
def delete_all(config: Config, user_id: str | None, agent_id: str | None, run_id: str | None) -> None:
    """Forget every memory of the named user, agent or run (name at least one; an agent or run
    alone means the configured user's)."""
    with engine_errors():
        scope = named_scope(config, user_id, agent_id, run_id)
    with open_engine(config) as engine:
        echo_json({"deleted_count": engine.delete_all(**scope)})


@cli.command()
@click.argument("memory_id")
@scope_options
@click.pass_obj
def history(config: Config, memory_id: str, user_id: str | None, agent_id: str | None, run_id: str | None) -> None:
    """A memory's ADD / UPDATE / DELETE events, oldest first."""
    with open_engine(config) as engine:
        echo_json(engine.history(memory_id, **default_scope(config, user_id, agent_id, run_id)))


@cli.command()
@click.option("--check", is_flag=True, help="Check the database's invariants; exit 1 if any is broken.")
@click.option("--deep", is_flag=True, help="With --check: also re-run NLP to find memories missing entity links.")
@click.option("--repair", is_flag=True, help="Rebuild derived rows (vectors, keyword index, entity links).")
@click.pass_obj
def doctor(config: Config, check: bool, deep: bool, repair: bool) -> None:
    """Versions, models, the database path and row counts; --check and --repair for upkeep."""
    if check and repair:
        raise click.UsageError("use --check or --repair, not both (run --check again after a repair)")
    if deep and not check:
        raise click.UsageError("--deep goes with --check")
    with open_engine(config) as engine:
        if repair:
            echo_json(engine.repair())
        elif check:
            violations = engine.check(deep=deep)
            for violation in violations:
                click.echo(f"{violation.check}: {violation.detail}")
            if violations:
                raise click.ClickException(f"{len(violations)} problem(s) found; `trimem doctor --repair` fixes "
                                           "derived rows")
            click.echo("ok: no problems found")
        else:
            echo_json({"binding": "apsw", **engine.status()})


@cli.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_obj
def backup(config: Config, path: Path) -> None:
    """Copy the database to PATH with SQLite's online backup (safe while servers run)."""
    with open_engine(config) as engine:
        engine.backup(path)
    click.echo(f"backed up {config.database} to {path}")
