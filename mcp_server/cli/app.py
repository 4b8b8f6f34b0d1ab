"""The ``trimem`` group: its options, the configuration every command receives, and the engine.

The group loads the configuration once (defaults, ``--config``, ``TRIMEM_*`` variables,
then its options), sets up logging to stderr and hands the ``Config`` to the command, which
opens the engine with ``open_engine``. The commands register themselves on ``cli`` from
their modules (``memories``, ``exchange``, ``admin``, ``servers``).
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from mcp_server.cli.errors import engine_errors
from mcp_server.cli.output import redirected_stdout_size, take_back_stdout
from mcp_server.hooks.settings import HOOK_GROUP
from store.config import LOG_LEVELS, Config, load_config, unknown_variables
from store.errors import DiskFull

QUIET_LOGGERS = ("mcp", "uvicorn", "httpx", "sse_starlette")


def hook_says(message: str) -> None:
    """One line on stderr, a command hook's whole log: what it did not do, and why."""
    click.echo(f"trimem hook: {' '.join(message.split())}", err=True)
    sys.stderr.flush()

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
    try:
        with engine_errors(options=False):
            config = load_config(config_path)
    except click.ClickException as exc:
        if ctx.invoked_subcommand == HOOK_GROUP:  # a hook never breaks a session, not even on bad settings
            hook_says(f"{exc.format_message()}; nothing injected")
            ctx.exit(0)
        raise
    ctx.meta["trimem.config_sources"] = config_sources(config_path, {"--db": database, "--log-level": log_level})
    ctx.meta["trimem.world"] = world_options(config_path, database)
    for warning in unknown_variables():
        click.echo(f"warning: {warning}", err=True)
    if database is not None:
        config = config.using(database)
    if log_level is not None:
        config = config.replace("server", log_level=log_level.upper())
    # Configure before the MCP SDK does, so every record goes to stderr in one plain format.
    logging.basicConfig(
        handlers=log_handlers(config.server.log_file),
        level=config.server.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if logging.getLevelName(config.server.log_level.upper()) > logging.DEBUG:
        # At INFO the log says what trimem does (one line at start-up); the SDK's and the HTTP
        # server's per-session and per-request lines are only for debugging.
        for chatty in QUIET_LOGGERS:
            logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLogger().level))
    ctx.obj = config


def log_handlers(log_file: str) -> list[logging.Handler]:
    """stderr, and the file ``server.log_file`` names when it can be opened (else a warning on
    stderr: a log that cannot be kept must not stop a server or a hook)."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        path = Path(log_file).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handlers.append(logging.FileHandler(path, encoding="utf-8"))
        except OSError as exc:
            click.echo(f"warning: cannot write the log to {path} ({exc.strerror or exc}); logging to stderr only",
                       err=True)
    return handlers


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


def world_options(config_path: Path | None, database: str | None) -> list[str]:
    """The options that chose this trimem's configuration and database, as another process must
    be given them to use the same (``trimem hooks install`` writes them into its hooks): paths
    absolute, since Claude Code runs hooks from the session's folder."""
    options = []
    if config_path is not None:
        options += ["--config", str(config_path.resolve())]
    if database is not None:
        url = "://" in database
        options += ["--db", database if url else str(Path(database).expanduser().resolve())]
    return options


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
