"""``trimem hooks install`` and ``trimem hooks uninstall``: trimem's Claude Code hooks put into
and taken out of Claude Code's settings (what is merged, and how: ``mcp_server/hooks/settings.py``).

What changed is said on stderr, one line per hook; ``--print`` puts the resulting settings on
stdout and writes nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from mcp_server.cli.app import cli
from mcp_server.hooks import registration
from mcp_server.hooks.settings import (
    DEFAULT_SERVER,
    Change,
    HookChoice,
    Settings,
    SettingsError,
    install,
    project_settings_path,
    read_settings,
    settings_text,
    trimem_command,
    uninstall,
    user_settings_path,
    write_settings,
)


@cli.group()
def hooks() -> None:
    """Claude Code hooks: trimem recalls the memories relevant to each prompt, and at session
    start, into Claude Code's context (and, with --capture, stores each prompt)."""


def settings_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Which settings file, which MCP server, and ``--print``: what install and uninstall share."""
    for option in reversed((
        click.option("--project", is_flag=True,
                     help="The project's .claude/settings.json in this folder, instead of your user settings "
                          "(~/.claude/settings.json, or in $CLAUDE_CONFIG_DIR)."),
        click.option("--settings", "settings_file", type=click.Path(dir_okay=False, path_type=Path),
                     help="This settings file instead."),
        click.option("--server", metavar="NAME", default=DEFAULT_SERVER, show_default=True,
                     help="trimem's MCP server as `claude mcp list` names it."),
        click.option("--print", "show", is_flag=True, help="Print the resulting settings; write nothing."),
    )):
        fn = option(fn)
    return fn


@hooks.command("install")
@click.option("--capture", is_flag=True,
              help="Also store each prompt as a memory (run: the session; metadata: the project), except text "
                   "inside <private>…</private>. Off by default: keeping every prompt is your choice.")
@click.option("--command", "command_path", is_flag=True,
              help="Recall before each prompt by running `trimem hook prompt`, instead of calling the "
                   "recall_for_prompt tool of the running MCP server (Claude Code before 2.1.118).")
@click.option("--register", is_flag=True,
              help="Also register this trimem's MCP server with Claude Code (claude mcp add-json, user scope), "
                   "unless one of that name is there already: the whole set-up in one command.")
@settings_options
@click.pass_context
def hooks_install(ctx: click.Context, capture: bool, command_path: bool, register: bool, project: bool,
                  settings_file: Path | None, server: str, show: bool) -> None:
    """Put trimem's hooks into Claude Code's settings.

    Before each prompt (UserPromptSubmit) and at session start (SessionStart), the relevant
    memories are added to the context in a <trimem-memories> block, and nothing when none is.
    Run it again with other options to change them. Other hooks and settings are kept as they
    are; the file as it was is kept beside it, as settings.json.trimem-backup. The hook commands
    run this trimem by its absolute path, with the --config and --db given before `hooks` and the
    TRIMEM_* variables set here (the server --register adds too), so they read what you read.
    """
    path = chosen_settings(project, settings_file)
    with settings_errors():
        current = read_settings(path)
        trimem = trimem_command(sys.executable, ctx.meta.get("trimem.world", []), os.environ)
    updated, changes = install(current, HookChoice(capture=capture, command=command_path, server=server,
                                                   trimem=trimem))
    apply(path, updated, changes, show, unchanged=f"trimem's hooks are already in {path} as asked; nothing changed")
    if register and show:
        click.echo(f"would register: {registration.shown(server, trimem)}", err=True)
    elif register:
        with settings_errors():
            click.echo(registration.register(server, trimem), err=True)


@hooks.command("uninstall")
@settings_options
def hooks_uninstall(project: bool, settings_file: Path | None, server: str, show: bool) -> None:
    """Take trimem's hooks out of Claude Code's settings.

    Only what install put there goes; everything else stays as it is.
    """
    path = chosen_settings(project, settings_file)
    with settings_errors():
        current = read_settings(path)
    updated, changes = uninstall(current, server)
    apply(path, updated, changes, show, unchanged=f"no hooks of trimem's in {path}; nothing changed")


def chosen_settings(project: bool, settings_file: Path | None) -> Path:
    if project and settings_file:
        raise click.UsageError("choose --project or --settings, not both")
    if settings_file:
        return settings_file
    return project_settings_path(Path.cwd()) if project else user_settings_path(os.environ)


def apply(path: Path, updated: Settings, changes: list[Change], show: bool, unchanged: str) -> None:
    """Say what changed and write it (or, ``show``, print the settings instead)."""
    if show:
        click.echo(settings_text(updated), nl=False)
    for change in changes:
        click.echo(str(change), err=True)
    if not changes:
        click.echo(unchanged, err=True)
    elif show:
        click.echo(f"nothing written to {path} (--print)", err=True)
    else:
        with settings_errors():
            backup = write_settings(path, updated)
        click.echo(f"wrote {path}" + (f"; the file as it was is in {backup}" if backup else ""), err=True)


@contextmanager
def settings_errors() -> Iterator[None]:
    """A settings file trimem cannot use is a one-line refusal (status 1), never a traceback."""
    try:
        yield
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
