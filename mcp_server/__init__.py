"""trimem's front: the MCP server (``server.py``) and the ``trimem`` command line (``cli.py``).

Both make one ``store.Engine`` call per tool or command and only parse, scope and
format around it. Importing this package loads no model: torch and spaCy load on the
first search or write, or in the server's warm-up thread.
"""

from __future__ import annotations

from store.config import Config


def default_scope(
    config: Config, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
) -> dict[str, str]:
    """The ids the caller named, or the configured default user when it named none.

    A single-user desktop set-up then works with no ids at all, while a caller that names
    any id never falls back to the default user (so scopes cannot leak into each other).
    """
    given = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
    scope = {key: value for key, value in given.items() if value is not None}
    return scope or {"user_id": config.server.user_id}
