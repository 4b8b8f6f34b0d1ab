"""The access log: one line per tool call on stderr, for the operator of a shared server.

Each line names the token (by its name, never its secret), the tool, the scope, how many
memories came back, the milliseconds and the status (``ok``; ``refused``: the call's own
fault, as a bad argument, an unknown id or another user's scope; ``timeout``; ``error``: a
crash, whose traceback the SDK logs). Memory and query texts appear only with
``service.log_texts``. The time is the log line's own (``trimem`` formats every record).

No value can pass for another field or another line, whatever a caller sends as an id: a
value is written raw only when it is printable characters other than space, quote, ``=`` and
backslash, else as a JSON string in which every character ``str.isprintable`` rejects
(control, format, line and paragraph separators, surrogates, private-use, unassigned, blanks
other than space) is escaped, since terminals act on ESC, backspace and BEL, and readers break
lines at U+2028 and U+0085 too.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

log = logging.getLogger("trimem.access")

TEXT_ARGUMENTS = ("query", "text")
"""The arguments that hold what users said: logged only with ``service.log_texts``."""
_PLAIN = re.compile(r"[^\s\"=\\]+")
NONE = "-"
"""What a field that is not set shows (an unnamed agent or run, a call without a token)."""


def _escaped(ch: str) -> str:
    """``ch`` as it stands inside a quoted value: itself when printable, else its JSON escape."""
    return ch if ch.isprintable() and ch not in '"\\' else json.dumps(ch)[1:-1]


def _value(value: Any) -> str:
    """One field's value as the log line shows it: ``-`` for none, raw when plain, else quoted
    (an id ``-`` too, so that it reads as itself)."""
    if value is None:
        return NONE
    text = str(value)
    if _PLAIN.fullmatch(text) and text.isprintable() and text != NONE:
        return text
    return '"' + "".join(map(_escaped, text)) + '"'


def record(tool: str, token: str | None, scope: dict[str, str], count: int, seconds: float, status: str,
           texts: dict[str, Any]) -> None:
    """Log one call as ``key=value`` pairs on one line (a value that is not plain as a JSON string)."""
    fields = {"token": token, "tool": tool, "user_id": scope.get("user_id"), "agent_id": scope.get("agent_id"),
              "run_id": scope.get("run_id"), "results": count, "ms": f"{seconds * 1000:.1f}", "status": status,
              **texts}
    log.info(" ".join(f"{key}={_value(value)}" for key, value in fields.items()))
