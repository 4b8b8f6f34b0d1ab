"""The machine's owner's commands: who has memories (users), how many (stats), the database's
health (doctor), a new embedding model (reembed) and a copy of the database (backup)."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import click

from mcp_server.cli import tables
from mcp_server.cli.app import cli, open_engine
from mcp_server.cli.errors import engine_errors
from mcp_server.cli.output import echo_json, emit, format_options
from mcp_server.cli.tables import ScopesOut, StatsOut
from store.analysis.packaged_models import DIMENSIONS as PACKAGED_MODELS
from store.config import EMBEDDING_BACKENDS, Config
from store.versions import package_version


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
@click.option("--repair", is_flag=True, help="Analyse again the memories that hold the keyword terms and entity "
              "links of older rules (after an upgrade; progress on stderr), then rebuild derived rows (vectors, "
              "keyword index, entity links; SQLite).")
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
            reanalysed = reanalyse(engine)
            if reanalysed and "repair" not in engine.capabilities:  # the re-analysis was what it could do
                return
            emit(engine.repair(), tables.repaired)
        elif check:
            violations = engine.check(deep=deep)
            for violation in violations:
                click.echo(f"{violation.check}: {violation.detail}")
            if "file_modes" in engine.capabilities:  # a warning: the store is sound, its files too open
                for warning in engine.file_warnings():
                    click.echo(f"warning: {warning}", err=True)
            say_awaiting_reanalysis(engine.reanalysis.waiting())
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
            status = engine.status()
            say_awaiting_reanalysis(status["awaiting_reanalysis"])
            emit({"versions": versions, **status,
                  "configuration": {"sources": sources, "settings": settings}}, tables.outline)


def say_awaiting_reanalysis(memories: int) -> None:
    """A notice on stderr, not a problem: memories that still hold the terms and links of older
    analysis rules, and what brings them up to date."""
    if memories:
        click.echo(f"notice: {memories:,} memories still hold the keyword terms and entity links of older rules "
                   "(searches use those until then); a trimem server that can write to this store analyses them "
                   "again in the background, and `trimem doctor --repair` does it now", err=True)


def reanalyse(engine: Any) -> int:
    """Run the pass analysing stored memories again to its end (``Engine.reanalysis``), saying on
    stderr what it does, a line of progress every few batches, and its end; how many it rewrote."""
    from store.analysis.reanalysis import every_few_batches  # the models' modules: only once a store is open

    work = engine.reanalysis.backlog()
    if work is None:
        return 0
    if work.memories:
        click.echo(f"analysing {work.memories:,} stored memories again: {work.cause}", err=True)
    done = engine.reanalysis.run(progress=every_few_batches(lambda line: click.echo(line, err=True)))
    if work.memories:
        click.echo(f"done: {done:,} memories analysed again", err=True)
    return done


def model_reference(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """A model folder as an absolute path (the database records it, and a server started from
    another folder must find the same model); a name is kept as given."""
    folder = Path(value).expanduser()
    return str(folder.resolve()) if folder.is_dir() else value


@cli.command()
@click.option("--model", required=True, callback=model_reference,
              help="The new embedding model: a local sentence-transformers folder, or a packaged model's name "
                   f"({', '.join(PACKAGED_MODELS)}).")
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
