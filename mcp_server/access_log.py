"""The access log: one line per tool call on stderr, for the operator of a shared server.

Each line names the token (by its name, never its secret), the tool, the scope, how many
memories came back, the milliseconds and the status (``ok``; ``refused``: the call's own
fault, as a bad argument, an unknown id or another user's scope; ``timeout``; ``error``: a
crash, whose traceback the SDK logs). Memory and query texts appear only with
``service.log_texts``. The time is the log line's own (``trimem`` formats every record).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from mcp_types import CallToolResult
from pydantic import BaseModel

log = logging.getLogger("trimem.access")

TEXT_ARGUMENTS = ("query", "text")
"""The arguments that hold what users said: logged only with ``service.log_texts``."""
COUNTED = ("results", "memories", "events")
_PLAIN = re.compile(r"[^\s\"=\\]+")


def result_count(output: Any) -> int:
    """How many memories (or events) a tool's output holds."""
    data = output.structured_content if isinstance(output, CallToolResult) else output
    if isinstance(data, BaseModel):
        data = data.model_dump()
    for key in COUNTED:
        if key in data:
            return len(data[key])
    return data.get("deleted_count", 1)


def _value(value: Any) -> str:
    if value is None:
        return "-"
    text = str(value)
    return text if _PLAIN.fullmatch(text) else json.dumps(text, ensure_ascii=False)


def record(tool: str, token: str | None, scope: dict[str, str], count: int, seconds: float, status: str,
           texts: dict[str, Any]) -> None:
    """Log one call as ``key=value`` pairs (a value with spaces or quotes as a JSON string)."""
    fields = {"token": token, "tool": tool, "user_id": scope.get("user_id"), "agent_id": scope.get("agent_id"),
              "run_id": scope.get("run_id"), "results": count, "ms": f"{seconds * 1000:.1f}", "status": status,
              **texts}
    log.info(" ".join(f"{key}={_value(value)}" for key, value in fields.items()))
