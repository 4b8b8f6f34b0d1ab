"""trimem's MCP server registered with Claude Code, so that one command sets everything up
(``trimem hooks install --register``): Claude Code's own command line does it,
``claude mcp add-json NAME JSON --scope user``, with the absolute path of the installing
``trimem``, its ``--config`` and ``--db`` and its ``TRIMEM_*`` variables: the world the hooks run in.

A server already registered under that name is left as it is (it may carry the user's own
``env``): the message says so, and how to replace it. This module knows no Click.
"""

from __future__ import annotations

import json
import shutil
import subprocess

from mcp_server.hooks.settings import SettingsError, Trimem

REGISTER_TIMEOUT_SECONDS = 60


def register(name: str, trimem: Trimem, claude: str | None = None) -> str:
    """Register ``trimem``'s server with Claude Code under ``name`` (user scope) and say what was done;
    ``SettingsError`` when Claude Code's command cannot be found or refuses for another reason."""
    claude = claude or shutil.which("claude")
    entry = json.dumps(trimem.server_entry())
    if claude is None:
        raise SettingsError(f"cannot register the MCP server: no `claude` on PATH; register it yourself with "
                            f"claude mcp add-json {name} '{entry}' --scope user")
    try:
        done = subprocess.run([claude, "mcp", "add-json", name, entry, "--scope", "user"], capture_output=True,
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
