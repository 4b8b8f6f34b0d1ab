"""The ``trimem`` command: ``serve`` for MCP clients, and one command per engine operation.

Each command opens the engine, makes one ``Engine`` call and prints its result (a table
for a person, the MCP tool's JSON for a script). Engine errors become
``click.ClickException`` with the engine's message. Logs go to stderr. The modules, by job:

- ``app``: the group, its options and configuration, and opening the engine;
- ``options``: the options several commands share; ``output``: formats and printing;
  ``errors``: engine errors in the command line's words;
- ``memories``, ``exchange`` (export, import), ``admin`` (users, stats, doctor, reembed,
  backup), ``servers`` (serve, token, ui), ``hooks`` (installing Claude Code's hooks) and
  ``hook`` (what those hooks run): the commands;
- ``tables``, ``explain_table``, ``bulk`` and ``transfer``: what those commands print and read.
"""

from mcp_server.cli import admin, exchange, hook, hooks, memories, servers  # noqa: F401 (importing them registers their commands)
from mcp_server.cli.app import cli

__all__ = ["cli"]
