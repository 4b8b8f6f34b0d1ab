"""A hook's input as Claude Code sends it on stdin: one JSON object per event.

Every event carries ``session_id``, ``transcript_path``, ``cwd`` and ``hook_event_name``;
``UserPromptSubmit`` adds ``prompt`` and ``SessionStart`` adds ``source`` (startup, resume,
clear, compact). Fields trimem does not use are ignored, so a newer Claude Code that sends
more still works.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from store.errors import InvalidArgument


@dataclass(frozen=True)
class HookPayload:
    """The fields of a hook's input that trimem reads; a missing one is ``None``."""

    hook_event_name: str | None
    session_id: str | None
    cwd: str | None
    prompt: str | None
    source: str | None


def read_payload(text: str) -> HookPayload:
    """The payload in ``text``, or ``InvalidArgument`` saying why it is not one."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(f"the hook's input is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidArgument("the hook's input is not a JSON object")
    return HookPayload(**{name: text_field(data, name) for name in HookPayload.__dataclass_fields__})


def text_field(data: dict[str, Any], name: str) -> str | None:
    """``data[name]`` when it is a non-empty string, else ``None``."""
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidArgument(f"the hook's input has a {type(value).__name__} as {name}, not a string")
    return value or None

