"""The commands that run a server: ``serve`` (the MCP server, over stdio or HTTP), the access
tokens of its HTTP service (``token …``), and ``ui`` (the local page)."""

from __future__ import annotations

import contextlib
import os
import signal

import click

from mcp_server.cli import tables
from mcp_server.cli.app import cli, open_engine
from mcp_server.cli.output import emit, format_options, plain
from store.config import Config

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
        from mcp_server.tools.handshake import serve_stdio

        exit_on_stop_signals()
        serve_stdio(config)
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
    emit(plain(issued), tables.issued_token)


@token.command("list")
@format_options
@click.pass_obj
def token_list(config: Config) -> None:
    """Every token: name, prefix, scope, created, last used and expiry (never the secret)."""
    with open_engine(config) as engine:
        listed = engine.tokens.list()
    emit({"tokens": plain(listed)}, tables.tokens, items="tokens")


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
