"""trimem's MCP server registered with Claude Code, so that one command sets everything up
(``trimem hooks install --register``): Claude Code's own command line does it,
``claude mcp add-json NAME JSON --scope user``, with the absolute path of the installing
``trimem``, its ``--config`` and ``--db`` and its ``TRIMEM_*`` variables: the world the hooks run in.

A server already registered under that name is left as it is (it may carry the user's own
``env``): the message says so, and how to replace it. This module knows no Click.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

from mcp_server.hooks.settings import SettingsError, Trimem

REGISTER_TIMEOUT_SECONDS = 60


def add_json(name: str, trimem: Trimem) -> list[str]:
    """Claude Code's command that registers ``trimem``'s server under ``name``, without the ``claude``
    before it: what ``register`` runs, and what a person is told to run."""
    return ["mcp", "add-json", name, json.dumps(trimem.server_entry()), "--scope", "user"]


def shown(name: str, trimem: Trimem) -> str:
    """``add_json`` as a person types it in a shell."""
    return shlex.join(["claude", *add_json(name, trimem)])


def register(name: str, trimem: Trimem, claude: str | None = None) -> str:
    """Register ``trimem``'s server with Claude Code under ``name`` (user scope) and say what was done;
    ``SettingsError`` when Claude Code's command cannot be found or refuses for another reason."""
    claude = claude or shutil.which("claude")
    if claude is None:
        raise SettingsError(f"cannot register the MCP server: no `claude` on PATH; register it yourself with "
                            f"{shown(name, trimem)}")
    try:
        done = subprocess.run([claude, *add_json(name, trimem)], capture_output=True,
                              text=True, timeout=REGISTER_TIMEOUT_SECONDS, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SettingsError(f"cannot register the MCP server: {claude} mcp add-json failed ({exc})") from None
    said = " ".join((done.stdout + done.stderr).split())
    if done.returncode == 0:
        return f"registered the MCP server {name!r} with Claude Code: {trimem.shell('serve')}"
    if "already exists" in said:
        return (f"Claude Code already has an MCP server named {name!r}; left as it is (to register this trimem "
                f"instead: claude mcp remove {name} --scope user, then run this again)")
    raise SettingsError(f"cannot register the MCP server: claude mcp add-json said: {said or done.returncode}")
