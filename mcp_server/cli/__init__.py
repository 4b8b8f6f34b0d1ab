"""The ``trimem`` command: ``serve`` for MCP clients, and one command per engine operation.

Each command opens the engine, makes one ``Engine`` call and prints its result: as a
compact table when stdout is a terminal, otherwise as the JSON of the MCP tool's
structured output (``models.py``, texts never cut), so a script reads the same fields
from either surface; ``--format`` chooses. Option names are the keyword names
(``--top-k`` is ``top_k=``). Engine errors become ``click.ClickException`` with the
engine's message. Logs go to stderr.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import os
import platform
import re
import shutil
import signal
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, get_args

import click
from pydantic import BaseModel

from mcp_server.call_scope import default_scope, named_scope
from mcp_server.cli import tables
from mcp_server.cli.tables import ScopesOut, StatsOut
from store.config import EMBEDDING_BACKENDS, LOG_LEVELS, Config, load_config, unknown_variables
from store.errors import DiskFull, TrimemError
from store.exchange.peers import SourceFormat
from store.validation import MAX_SQL_INTEGER, json_object
from store.versions import package_version

QUIET_LOGGERS = ("mcp", "uvicorn", "httpx", "sse_starlette")
INTERRUPTED = 128 + 2
"""The exit status of a command stopped by Ctrl-C (SIGINT), as shells report one."""
"""SQLite integers are 64-bit: a larger offset cannot even be bound."""


class Commands(click.Group):
    """The ``trimem`` commands, with one failure no command can catch itself: a full disk under
    the file stdout is redirected to. It is a message, not a traceback, and the file is cut back
    to where this command began, so no partial output is mistaken for a whole one."""

    def invoke(self, ctx: click.Context) -> Any:
        start = redirected_stdout_size()
        try:
            return super().invoke(ctx)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            if exc.filename is None:  # not a named file: stdout
                take_back_stdout(start)
            raise click.ClickException(str(DiskFull(exc.filename or "the output file (stdout)"))) from None


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


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A TOML file overriding configs/default.toml (same sections and keys).",
)
@click.option("--db", "database", metavar="PATH|URL",
              help="The database to use: an SQLite file, or a postgresql:// URL (store.database_url).")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), help="Logging to stderr.")
@click.version_option(package_name="trimem")
@click.pass_context
def cli(ctx: click.Context, config_path: Path | None, database: str | None, log_level: str | None) -> None:
    """trimem: long-term memory for AI assistants, in one local SQLite file or PostgreSQL.

    Configuration comes from configs/default.toml, then --config, then TRIMEM_*
    environment variables (e.g. TRIMEM_USER_ID), then these options.
    """
    with engine_errors(options=False):
        config = load_config(config_path)
    ctx.meta["trimem.config_sources"] = config_sources(config_path, {"--db": database, "--log-level": log_level})
    for warning in unknown_variables():
        click.echo(f"warning: {warning}", err=True)
    if database is not None:
        config = config.using(database)
    if log_level is not None:
        config = config.replace("server", log_level=log_level.upper())
    # Configure before the MCP SDK does, so every record goes to stderr in one plain format.
    logging.basicConfig(
        stream=sys.stderr,
        level=config.server.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if logging.getLevelName(config.server.log_level.upper()) > logging.DEBUG:
        # At INFO the log says what trimem does (one line at start-up); the SDK's and the HTTP
        # server's per-session and per-request lines are only for debugging.
        for chatty in QUIET_LOGGERS:
            logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLogger().level))
    ctx.obj = config


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


def config_sources(config_path: Path | None, options: dict[str, Any]) -> list[str]:
    """Where the active configuration came from, earliest first (``trimem doctor``)."""
    from store.config import ENV_PREFIX, HOME_VARIABLE, defaults_path

    sources = [f"defaults: {defaults_path()}"]
    if config_path is not None:
        sources.append(f"file: {config_path}")
    variables = sorted(name for name in os.environ if name.startswith(ENV_PREFIX))
    if variables:
        sources.append("environment: " + ", ".join(variables))
    named = [name for name, value in options.items() if value is not None]
    if named:
        sources.append("options: " + ", ".join(named))
    if HOME_VARIABLE not in os.environ:
        sources.append("data folder: the platform's (TRIMEM_HOME unset)")
    return sources


@contextmanager
def engine_errors(options: bool = True) -> Iterator[None]:
    """The engine's messages say what to fix; show them as command errors, not tracebacks, and
    (``options``) with argument names spelt as this command's options. Messages about a
    configuration file or a JSON Lines file keep their keys: that is what the file says."""
    try:
        yield
    except TrimemError as exc:
        raise click.ClickException(in_cli_words(str(exc)) if options else str(exc)) from exc


@contextmanager
def open_engine(config: Config, *, create: bool = False) -> Iterator[Any]:
    """The engine on the configured database. Only commands that store memories ``create`` it
    where there is none yet; every other command says there is none and creates nothing."""
    from store.engine import Engine  # numpy and apsw: only for commands that use the database

    new = not config.store.database_url and not config.database.exists()
    with engine_errors(), Engine(config, create=create) as engine:
        if new:  # a mistyped --db or TRIMEM_DB_PATH would otherwise look like an empty memory
            click.echo(f"created new database at {config.database}", err=True)
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
        help="table for people (the default when stdout is a terminal); json, shaped as the MCP tool's structured "
             "output (the default otherwise); jsonl, one object per line.",
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
    data = _plain(output)
    if kind == "json":
        click.echo(json.dumps(data, indent=indent, ensure_ascii=False))
        return
    for item in data[items] if items else [data]:
        click.echo(json.dumps(item, ensure_ascii=False))


def echo_json(value: Any) -> None:
    """Print engine results (dataclasses, lists of them, or plain data) as JSON."""
    click.echo(json.dumps(_plain(value), indent=2, ensure_ascii=False))


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


AUTH_MODES = ("tokens", "none")


@cli.command()
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
              help="stdio for Claude Desktop / Code; http serves streamable HTTP (docs/service.md).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address for --transport http to listen on; one other than loopback needs --auth tokens.")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True,
              help="Port for --transport http.")
@click.option("--auth", type=click.Choice(AUTH_MODES),
              help="tokens: every HTTP request needs a token of `trimem token create`, and acts in its scope "
                   "(the default off loopback); none: loopback only (the default there).")
@click.pass_obj
def serve(config: Config, transport: str, host: str, port: int, auth: str | None) -> None:
    """Run the MCP server (what an MCP client's configuration starts, or a service for many users over HTTP)."""
    if transport == "stdio":
        if auth is not None or host != "127.0.0.1":
            raise click.UsageError("--host and --auth go with --transport http; over stdio the caller is the user")
        from mcp_server.tools.server import build_server

        exit_on_stop_signals()
        build_server(config).run("stdio")
        return
    from mcp_server.service.http import http_app, is_loopback

    if auth is None:
        auth = "none" if is_loopback(host) else "tokens"
    if auth == "none" and not is_loopback(host):
        raise click.UsageError(
            f"--host {host} is reachable from other machines, and without tokens any caller could read every "
            "user's memories: add --auth tokens, and give each client a token of `trimem token create --user-id ID`"
        )
    import anyio
    import uvicorn

    # Uvicorn logs through our stderr handler (log_config=None) and without its access lines,
    # which it would print on stdout: trimem logs each tool call itself (trimem.access).
    app = http_app(config, host, port, tokens=auth == "tokens")
    level = config.server.log_level.lower()
    settings = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False,
                              log_level=level if level == "debug" else "warning")
    # Uvicorn stops on Ctrl-C after the requests in flight, then raises it again: the stop
    # was asked for, so it ends the command quietly rather than as "Aborted!".
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(uvicorn.Server(settings).serve)


@cli.group()
def token() -> None:
    """Access tokens for `trimem serve --transport http --auth tokens`: each acts for one user
    (or, --admin, for any), and is stored as a hash in the database the server serves."""


@token.command("create")
@click.option("--user-id", help="The user the token acts for (required unless --admin).")
@click.option("--agent-id", help="Bind the token to one agent of that user (else it may name any).")
@click.option("--run-id", help="Bind the token to one run of that user (else it may name any).")
@click.option("--admin", is_flag=True, help="Act on any scope: for operators, never for an end user's agent.")
@click.option("--expires", metavar="YYYY-MM-DD", help="The last day (UTC) the token is accepted (default: until "
              "revoked).")
@click.option("--name", help="How lists and the access log name it (default: its prefix).")
@format_options
@click.pass_obj
def token_create(config: Config, user_id: str | None, agent_id: str | None, run_id: str | None, admin: bool,
                 expires: str | None, name: str | None) -> None:
    """Make a token and print it, once: only its hash is stored."""
    with open_engine(config, create=True) as engine:
        issued = engine.tokens.create(user_id=user_id, agent_id=agent_id, run_id=run_id, admin=admin,
                                      expires=expires, name=name)
    emit(_plain(issued), tables.issued_token)


@token.command("list")
@format_options
@click.pass_obj
def token_list(config: Config) -> None:
    """Every token: name, prefix, scope, created, last used and expiry (never the secret)."""
    with open_engine(config) as engine:
        listed = engine.tokens.list()
    emit({"tokens": _plain(listed)}, tables.tokens, items="tokens")


@token.command("revoke")
@click.argument("name_or_prefix", metavar="NAME|PREFIX")
@click.pass_obj
def token_revoke(config: Config, name_or_prefix: str) -> None:
    """Remove a token: every server on this database refuses it from its next request."""
    with open_engine(config) as engine:
        revoked = engine.tokens.revoke(name_or_prefix)
    click.echo(f"revoked token {revoked.name!r} ({revoked.prefix}…)", err=True)


@token.command("clear-sessions")
@click.argument("name_or_prefix", metavar="NAME|PREFIX")
@click.pass_obj
def token_clear_sessions(config: Config, name_or_prefix: str) -> None:
    """End a token's open sessions on every server on this database, from its next request: for an
    agent that restarted and lost its session ids. The token stays valid."""
    with open_engine(config) as engine:
        cleared = engine.tokens.clear_sessions(name_or_prefix)
    click.echo(f"cleared the sessions of token {cleared.name!r} ({cleared.prefix}…): each server ends those opened "
               "before now on the token's next request", err=True)


def exit_on_stop_signals() -> None:
    """End the stdio server at once on Ctrl-C or SIGTERM, with status 0.

    The stdio transport reads stdin on a worker thread that no cancellation reaches, so an
    orderly shutdown would wait for the client's next line (Ctrl-C seemed to do nothing).
    Nothing needs that wait: an acknowledged write is committed already, and a write cut
    short is rolled back by SQLite when the file is next opened.
    """

    def stop(_signum: int, _frame: object) -> None:
        os._exit(0)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)


@cli.command()
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port on 127.0.0.1; 0 picks a free one.")
@click.option("--no-browser", is_flag=True, help="Print the address without opening a browser.")
@click.pass_obj
def ui(config: Config, port: int, no_browser: bool) -> None:
    """Browse, search and correct memories in a local web page, with each score drawn as its parts.

    Serves the configured database on 127.0.0.1 only, beside any MCP servers using it, until
    Ctrl-C; opens the page in a browser unless --no-browser.
    """
    from mcp_server.ui import serve as serve_ui

    with open_engine(config, create=True) as engine:
        serve_ui(engine, port, open_browser=not no_browser, announce=lambda url: click.echo(f"trimem ui: {url}"))


@cli.command()
@click.argument("text", required=False)
@click.option("--file", "file", type=click.File("rb"),
              help="Add every line of a JSON Lines file ('-' for stdin) instead of TEXT: "
                   '{"text": ..., "metadata": {...}, "expiration_date": ..., "user_id": ...}.')
@scope_options
@json_option("metadata", "A JSON object stored with the memory.")
@click.option("--expiration-date",
              help="YYYY-MM-DD, today or later; the memory is hidden once this day has ended (UTC).")
@format_options
@click.pass_obj
def add(config: Config, text: str | None, file: BinaryIO | None, user_id: str | None, agent_id: str | None,
        run_id: str | None, metadata: Any, expiration_date: str | None) -> None:
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
                           expiration_date=expiration_date)
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


@cli.command()
@click.argument("memory_id")
@scope_options
@format_options
@click.pass_obj
def get(config: Config, memory_id: str, user_id: str | None, agent_id: str | None, run_id: str | None) -> None:
    """One memory by id (or the id's first characters, as tables show them)."""
    from mcp_server.models import MemoryOut

    with open_engine(config) as engine:
        memory = engine.get(memory_id, **default_scope(config, user_id, agent_id, run_id))
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


@cli.command()
@click.argument("memory_id")
@scope_options
@format_options
@click.pass_obj
def delete(config: Config, memory_id: str, user_id: str | None, agent_id: str | None, run_id: str | None) -> None:
    """Forget one memory; prints it as it was."""
    from mcp_server.models import DeletedOut, MemoryOut

    with open_engine(config) as engine:
        memory = engine.delete(memory_id, **default_scope(config, user_id, agent_id, run_id))
    emit(DeletedOut(deleted=MemoryOut.of(memory, NO_CAP)),
         lambda output, width: "deleted:\n" + tables.one_memory(output.deleted, width))


@cli.command()
@click.argument("memory_id")
@scope_options
@format_options
@click.pass_obj
def restore(config: Config, memory_id: str, user_id: str | None, agent_id: str | None, run_id: str | None) -> None:
    """Bring back a deleted memory (its text and metadata when deleted, under its old id)."""
    from mcp_server.models import MemoryOut

    with open_engine(config) as engine:
        memory = engine.restore(memory_id, **default_scope(config, user_id, agent_id, run_id))
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


@cli.command()
@click.argument("memory_id")
@scope_options
@format_options
@click.pass_obj
def history(config: Config, memory_id: str, user_id: str | None, agent_id: str | None, run_id: str | None) -> None:
    """A memory's ADD / UPDATE / DELETE / RESTORE events, oldest first."""
    from mcp_server.models import HistoryOutput

    with open_engine(config) as engine:
        events = engine.history(memory_id, **default_scope(config, user_id, agent_id, run_id))
    emit(HistoryOutput.of(events, NO_CAP), tables.history, items="events")


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


@cli.command()
@format_options
@click.pass_obj
def users(config: Config) -> None:
    """Every user (and agent and run within it) that has memories, with counts; the configured
    default user is the one commands and the MCP server use when none is named."""
    with open_engine(config) as engine:
        scopes = engine.users()
    emit(ScopesOut(scopes=[dataclasses.asdict(scope) for scope in scopes], default_user_id=config.server.user_id),
         tables.scopes, items="scopes")


@cli.command()
@format_options
@click.pass_obj
def stats(config: Config) -> None:
    """How many memories (and expired ones), per user; the database file's size; the models."""
    with open_engine(config) as engine:
        numbers = engine.stats()
    emit(StatsOut(**numbers), tables.stats)


@cli.command()
@click.option("--check", is_flag=True, help="Check the database's invariants; exit 1 if any is broken. Warns, "
              "without failing, about database files and folders that others may read.")
@click.option("--deep", is_flag=True, help="With --check: also re-run NLP to find memories missing entity links "
              "(SQLite).")
@click.option("--repair", is_flag=True, help="Rebuild derived rows (vectors, keyword index, entity links).")
@format_options
@click.pass_obj
def doctor(config: Config, check: bool, deep: bool, repair: bool) -> None:
    """Versions (trimem, Python, torch, ...), models, the database, row counts and the active
    configuration with its sources; --check and --repair for upkeep. Loads no model unless
    --check --deep or --repair needs one. The report and --repair's counts follow --format;
    --check prints one line per problem in any format."""
    if check and repair:
        raise click.UsageError("use --check or --repair, not both (run --check again after a repair)")
    if deep and not check:
        raise click.UsageError("--deep goes with --check")
    with open_engine(config) as engine:
        if repair:
            emit(engine.repair(), tables.repaired)
        elif check:
            violations = engine.check(deep=deep)
            for violation in violations:
                click.echo(f"{violation.check}: {violation.detail}")
            if "file_modes" in engine.capabilities:  # a warning: the store is sound, its files too open
                for warning in engine.file_warnings():
                    click.echo(f"warning: {warning}", err=True)
            if violations:
                from store.admin import check_advice  # the models' modules: only once a store is open

                raise click.ClickException(
                    f"{len(violations)} problem(s) found; {check_advice(violations, engine.capabilities)}")
            click.echo("ok: no problems found")
        else:
            versions = {"trimem": package_version("trimem"), "python": platform.python_version(),
                        "torch": package_version("torch"), "onnxruntime": package_version("onnxruntime"),
                        "spacy": package_version("spacy")}
            sources = click.get_current_context().meta.get("trimem.config_sources", [])
            settings = dataclasses.asdict(config)
            if config.store.database_url:  # the URL may hold a password
                settings["store"]["database_url"] = config.location
            emit({"versions": versions, **engine.status(),
                  "configuration": {"sources": sources, "settings": settings}}, tables.outline)


def model_reference(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """A model folder as an absolute path (the database records it, and a server started from
    another folder must find the same model); a name is kept as given."""
    folder = Path(value).expanduser()
    return str(folder.resolve()) if folder.is_dir() else value


@cli.command()
@click.option("--model", required=True, callback=model_reference,
              help="The new embedding model: a local sentence-transformers folder, or the packaged default's name.")
@click.option("--backend", type=click.Choice(EMBEDDING_BACKENDS),
              help="What runs the new model (default: the configured embedding_backend).")
@click.pass_obj
def reembed(config: Config, model: str, backend: str | None) -> None:
    """Re-embed every memory and entity with another embedding model, then switch the database to
    it in one transaction. Servers keep using the old index until then; an interrupted run
    resumes where it stopped. Afterwards set the same model in the configuration."""
    config = config.replace("store", embedding_model=model,
                            embedding_backend=backend or config.store.embedding_backend)
    from store.engine import Engine

    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = click.progressbar(length=total, label="re-embedding", file=sys.stderr)
        bar.update(done - bar.pos)

    try:
        with engine_errors(), Engine(config, reembedding=True, create=False) as engine:
            report = engine.reembed(progress=progress if sys.stderr.isatty() else None)
    finally:
        if bar is not None:
            bar.render_finish()
    echo_json(report)
    click.echo(f"{config.location} now uses '{model}'. Set it in your configuration (store.embedding_model = "
               f"{json.dumps(model)} in the --config file, or TRIMEM_EMBEDDING_MODEL) and restart running servers: "
               "a database opens only with the model it records.", err=True)


@cli.command()
@click.argument("target", metavar="PATH", type=click.Path())
@click.pass_obj
def backup(config: Config, target: str) -> None:
    """Copy the database to PATH with SQLite's online backup (safe while servers run). A folder
    (existing, or written with a trailing slash) gets a file named after the database and the time."""
    path = Path(target)  # a Path forgets the trailing slash that says "a folder"
    if path.is_dir() or target.endswith(("/", os.sep)):
        from store.clock import now

        stamp = now()[:19].replace("-", "").replace(":", "")
        name, suffix = f"{config.database.stem}-{stamp}", config.database.suffix or ".db"
        path, taken = path / f"{name}{suffix}", 1
        while path.exists():  # two backups within a second
            path, taken = path.with_name(f"{name}-{taken}{suffix}"), taken + 1
    with open_engine(config) as engine:
        engine.backup(path)
    click.echo(f"backed up {config.database} to {path}")
