"""``trimem hook prompt|session``: what Claude Code's ``command`` hooks run (``mcp_server.hooks``).

Each reads the hook's JSON on stdin and prints hook JSON on stdout, the block as the event's
``additionalContext`` (``hooks.events.hook_output``), or nothing when there is no block. A hook must
never break a session, so each always exits 0: a failure (bad JSON, no database, a locked or
unwritable one, anything else) prints nothing on stdout and one line on stderr, and so does
work still running after ``hooks.deadline_seconds``, kept below the hook's own timeout.

Each run opens the engine and loads the models itself, so it pays their load on every prompt;
the ``mcp_tool`` path (the ``recall_for_prompt`` tool of the running server) does not.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from mcp_server.call_scope import default_scope
from mcp_server.cli.app import HOOK_GROUP, cli, hook_says, open_engine
from mcp_server.hooks.block import Block
from mcp_server.hooks.events import hook_output, on_prompt, on_session
from mcp_server.hooks.payload import HookPayload, read_payload
from mcp_server.hooks.settings import PROMPT_EVENT, SESSION_EVENT
from store.config import Config

if TYPE_CHECKING:
    from store.engine import Engine

Answer = Callable[[HookPayload, "Engine"], Block]
"""The block a hook injects for its payload, given the open engine."""


@cli.group(HOOK_GROUP)
def hook() -> None:
    """What Claude Code's command hooks run: the hook's JSON on stdin, hook JSON injecting the
    memories (or nothing) on stdout, and always exit status 0. `trimem hooks install` sets them up."""


@hook.command()
@click.option("--capture", is_flag=True, help="Also store the prompt as a memory of the session's run.")
@click.pass_obj
def prompt(config: Config, capture: bool) -> None:
    """For UserPromptSubmit: the memories relevant to the prompt."""

    def answer(payload: HookPayload, engine: Engine) -> Block:
        return on_prompt(engine, config, payload.prompt or "", cwd=payload.cwd, session_id=payload.session_id,
                         keep=capture, scope=default_scope(config)).block

    run_hook(config, PROMPT_EVENT, answer, create=capture)


@hook.command()
@click.pass_obj
def session(config: Config) -> None:
    """For SessionStart: the memories of the project (its repository, else the working folder)."""
    run_hook(config, SESSION_EVENT, lambda payload, engine: on_session(engine, config, cwd=payload.cwd,
                                                                        scope=default_scope(config)), create=False)


def run_hook(config: Config, event: str, answer: Answer, *, create: bool) -> None:
    """Read the payload and print ``answer``'s block as ``event``'s hook output, within
    ``hooks.deadline_seconds``; never fail.

    The work runs in a daemon thread: past the deadline this process says so on stderr and
    ends at once, whatever the thread is doing (reading stdin, loading a model, waiting for a
    lock). Only ``create`` (a capture, which stores) makes a database where there is none."""
    printed: list[Block] = []
    failed: list[str] = []

    def work() -> None:
        try:
            payload = read_payload(sys.stdin.read())
            with open_engine(config, create=create) as engine:
                printed.append(answer(payload, engine))
        except click.ClickException as exc:  # the engine's refusals, as open_engine words them
            failed.append(exc.format_message())
        except Exception as exc:  # noqa: BLE001 - a hook never breaks a session: anything else is one line too
            failed.append(str(exc) or type(exc).__name__)

    worker = threading.Thread(target=work, name="trimem-hook", daemon=True)
    worker.start()
    worker.join(config.hooks.deadline_seconds)
    if worker.is_alive():
        hook_says(f"gave up after {config.hooks.deadline_seconds:g} s (hooks.deadline_seconds); nothing injected")
        os._exit(0)  # the thread may hold a model load or a lock: do not wait for it
    if failed:
        hook_says(f"{failed[0]}; nothing injected")
    elif printed and printed[0].text:
        click.echo(json.dumps(hook_output(event, printed[0]), ensure_ascii=False))
