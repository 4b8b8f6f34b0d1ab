"""The HTTP service's rules for every tool call (``tools.calls.CallRules``): with tokens, a call
acts in its token's scope (``auth.token_scope``) and an add costs the token's rate one unit per
memory (``limits.RateBudget``); every call, token or not, is one access-log line."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver.exceptions import ToolError

from mcp_server.service import access_log
from mcp_server.service.auth import StoreTokenVerifier, caller, token_scope
from mcp_server.service.limits import RateBudget, token_key
from mcp_server.tools.calls import CallRules
from store.config import Config

if TYPE_CHECKING:
    from store.engine import Engine


class ServiceRules(CallRules):
    """Tokens (when ``auth`` is set), the rate per token, and the access log."""

    def __init__(self, config: Config, auth: AuthSettings | None, budget: RateBudget) -> None:
        self.auth = auth
        self._budget = budget
        self._log_texts = config.service.log_texts

    def verifier(self, engine: Callable[[], Engine]) -> StoreTokenVerifier | None:
        return StoreTokenVerifier(engine) if self.auth else None

    def scoped(self, arguments: dict[str, Any], *, must_name: bool) -> dict[str, Any]:
        return token_scope(arguments, must_name=must_name)

    def admit(self) -> None:
        access = get_access_token()
        if access is not None and (wait := self._budget.charge(token_key(access), 0)):
            raise ToolError(self._budget.refused(wait))

    def settle(self, count: int) -> None:
        # The request paid the first memory; the rest may run the bucket into debt (RateBudget).
        access = get_access_token()
        if access is not None:
            self._budget.charge(token_key(access), count - 1)

    def record(self, tool: str, scope: dict[str, str], arguments: dict[str, Any], count: int, seconds: float,
               status: str) -> None:
        token = caller()
        texts = {key: arguments.get(key) for key in access_log.TEXT_ARGUMENTS if key in arguments} \
            if self._log_texts else {}
        access_log.record(tool, token and token["name"], scope, count, seconds, status, texts)
