"""What a front end adds around every tool call: who calls, in which scope, at what cost, and
the call's record.

``CallRules`` adds nothing: over stdio the server is one user's own, and a call's arguments are
its own. The HTTP service hands ``build_server`` its token rules instead
(``mcp_server.service.calls``), so the tools never reach into the service.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcp_types import CallToolResult
from pydantic import BaseModel

from mcp_server.call_scope import require_named
from store.scope import SCOPE_KEYS

if TYPE_CHECKING:
    from mcp.server.auth.provider import TokenVerifier
    from mcp.server.auth.settings import AuthSettings

    from store.engine import Engine

COUNTED = ("results", "memories", "events")
"""The fields of a tool's output that list what it returned."""


def result_count(output: Any) -> int:
    """How many memories (or events) a tool's output holds."""
    data = output.structured_content if isinstance(output, CallToolResult) else output
    if isinstance(data, BaseModel):
        data = data.model_dump()
    for key in COUNTED:
        if key in data:
            return len(data[key])
    return data.get("deleted_count", 1)


class CallRules:
    """No caller, no cost, no record: the rules of a server only its own user reaches."""

    auth: AuthSettings | None = None
    """The SDK's token settings, when HTTP requests need a token."""

    def verifier(self, engine: Callable[[], Engine]) -> TokenVerifier | None:
        """What checks a request's token against the store that ``engine`` opens, if any."""
        return None

    def scoped(self, arguments: dict[str, Any], *, must_name: bool) -> dict[str, Any]:
        """``arguments`` in the scope the caller may reach. ``must_name``: the call forgets a whole
        scope, so it must name one itself (an omitted id never means "everything")."""
        if must_name:
            require_named(*(arguments.get(key) for key in SCOPE_KEYS))
        return arguments

    def admit(self) -> None:
        """Refuse (``ToolError``) a call that costs per memory, while its caller may not spend."""

    def settle(self, count: int) -> None:
        """Charge a call that cost per memory for the ``count`` it returned."""

    def record(self, tool: str, scope: dict[str, str], arguments: dict[str, Any], count: int, seconds: float,
               status: str) -> None:
        """Keep the call's record: its tool, scope, result count, time and status."""
