"""Argument checks shared by every engine operation.

Arguments come from language models, scripts and people; each check raises
``InvalidArgument`` with a message that says what to send instead, and nothing is
written before every check has passed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from store.errors import InvalidArgument, shown
from store.records import HistoryEvent
from store.scope import SCOPE_KEYS, Scope

MAX_ID_CHARS = 256
DATE_PATTERN = r"\d{4}-\d{2}-\d{2}"
"""How an expiration date is written (``YYYY-MM-DD``); the tools' input schemas say it too."""
NO_EXPIRATION = "never"
"""The ``expiration_date`` that ``update`` reads as "clear it": the memory stays until deleted."""


def json_object(text: str, example: str) -> dict[str, Any]:
    """``text`` as a JSON object, or ``InvalidArgument`` saying what is wrong, with ``example``
    (a good value) to show. The message names no subject: callers put theirs in front."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:  # a few of json's messages end in " at" already
        raise InvalidArgument(
            f"not valid JSON ({exc.msg.removesuffix(' at')} at column {exc.colno}); e.g. {example}"
        ) from None
    except RecursionError:
        raise InvalidArgument("JSON nested too deeply") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"must be a JSON object like {example}, got {type(value).__name__}")
    return value


def check_utf8(value: str, what: str) -> str:
    """SQLite stores UTF-8: a lone surrogate cannot be stored, so refuse it up front."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} contains an unpaired surrogate character; send valid Unicode text") from None
    return value


def check_id(value: Any, name: str) -> str:
    """An id is trimmed, non-empty, without inner whitespace (as Mem0 requires) or NUL (which
    PostgreSQL cannot store in text, and C code reads as the end of the id)."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string, got {type(value).__name__}")
    value = check_utf8(value.strip(), name)
    if not value:
        raise InvalidArgument(f"{name} must not be empty; omit it instead")
    if len(value) > MAX_ID_CHARS:  # before any message quotes it
        raise InvalidArgument(
            f"{name} has {len(value)} characters, more than the limit of {MAX_ID_CHARS}; use a short id "
            "such as 'ana_lopez'"
        )
    if "\x00" in value:
        raise InvalidArgument(f"{name}={shown(value)} contains a NUL character (\\x00, a control character); "
                              "use an id of letters, digits and punctuation, e.g. 'ana_lopez'")
    if any(ch.isspace() for ch in value):
        raise InvalidArgument(f"{name}={shown(value)} contains whitespace; use an id without spaces, e.g. 'ana_lopez'")
    return value


def check_scope(user_id: Any = None, agent_id: Any = None, run_id: Any = None) -> Scope:
    """The named scope ids, checked; at least one is required so that reads never span users."""
    given = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
    scope = Scope.of({key: check_id(value, key) for key, value in given.items() if value is not None})
    if not scope:
        raise InvalidArgument("name a scope: at least one of user_id, agent_id or run_id")
    return scope


INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"})
"""Control, format (zero-width), surrogate, private-use, unassigned and blank characters."""


def has_visible_character(text: str) -> bool:
    """Whether any character would show on screen: a text of only NUL, zero-width spaces or
    control characters embeds to noise, matches nothing by keyword and reads as nothing."""
    return any(unicodedata.category(ch) not in INVISIBLE_CATEGORIES for ch in text)


WANTED = {
    "text": ("the fact to remember as a sentence", "split it into smaller facts"),
    "query": ("what to recall, in words", "ask with fewer words"),
    "entity": ("the entity's name", "send just the name"),
}
"""For each kind of text, what to send instead of an empty one, and what to do with one too long."""


def check_text(text: Any, max_chars: int, what: str = "text") -> str:
    """A text (memory, query or entity name, ``WANTED``): a string with at least one visible
    character, no longer than ``max_chars``."""
    wanted, shorter = WANTED[what]
    if not isinstance(text, str):
        raise InvalidArgument(f"{what} must be a string, got {type(text).__name__}")
    check_utf8(text, what)
    if not text.strip():
        raise InvalidArgument(f"{what} is empty; send {wanted}")
    if len(text) > max_chars:
        raise InvalidArgument(f"{what} has {len(text)} characters, more than the limit of {max_chars}; {shorter}")
    if not has_visible_character(text):
        raise InvalidArgument(
            f"{what} has no visible character (only control, zero-width or blank ones); send {wanted}"
        )
    return text


def check_query(query: Any, max_chars: int) -> str:
    """A search query: like memory text, so the same limits apply."""
    return check_text(query, max_chars, "query")


def scope_keys_in(metadata: Any) -> list[str]:
    """The scope keys a metadata object holds (``check_metadata`` drops them)."""
    return [key for key in SCOPE_KEYS if isinstance(metadata, Mapping) and key in metadata]


MAX_METADATA_DEPTH = 64
"""Objects and lists nested in metadata, at most. Deeper values are refused the same way every time:
Python's encoder stops at a depth that depends on how deep the call already is, and SQLite's JSON
at 1,000 levels (a CHECK constraint that would fail the write instead of saying why)."""


def nesting(value: Any) -> int:
    """How many objects and lists deep ``value`` is (0 for a scalar), counted without recursion
    and no further than one level past ``MAX_METADATA_DEPTH``."""
    deepest, pending = 0, [(value, 1)]
    while pending and deepest <= MAX_METADATA_DEPTH:
        item, level = pending.pop()
        if isinstance(item, Mapping):
            pending.extend((child, level + 1) for child in item.values())
        elif isinstance(item, list | tuple):
            pending.extend((child, level + 1) for child in item)
        else:
            continue
        deepest = max(deepest, level)
    return deepest


def check_metadata(metadata: Any, max_bytes: int) -> dict[str, Any]:
    """A JSON object of bounded size and depth; scope keys inside it are dropped, never applied.

    Dropping (rather than honouring) ``user_id`` and friends here stops a caller from
    writing into another scope through metadata; ``scope_keys_in`` names them, so the
    caller is told.
    """
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidArgument(f"metadata must be a JSON object, got {type(metadata).__name__}")
    cleaned = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not key.strip():
            raise InvalidArgument(f"metadata keys must be non-empty strings, got {shown(key)}")
        if key in SCOPE_KEYS:
            continue
        cleaned[key] = value
    if nesting(cleaned) > MAX_METADATA_DEPTH:
        raise InvalidArgument(f"metadata nests objects and lists more than {MAX_METADATA_DEPTH} levels deep; "
                              "flatten it, e.g. {\"topic\": \"travel\"}")
    try:
        encoded = json.dumps(cleaned, ensure_ascii=False, allow_nan=False)
        encoded.encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidArgument(f"metadata must be plain JSON (strings, numbers, booleans, lists, objects): {exc}") from None
    if len(encoded.encode("utf-8")) > max_bytes:
        raise InvalidArgument(f"metadata is larger than {max_bytes} bytes of JSON; store less or put it in the text")
    return cleaned


def check_expiration(value: Any, today: str | None) -> str | None:
    """``YYYY-MM-DD``, today (UTC, ``today``) or later: the memory is hidden from the day after.

    A past date would store a memory that no read shows, so it is refused; with ``today``
    ``None`` (an import keeping a memory as it was) any real date passes.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(DATE_PATTERN, value.strip()):
        raise InvalidArgument(f"expiration_date must look like 2026-12-31, got {shown(value)}")
    try:
        date = dt.date.fromisoformat(value.strip()).isoformat()
    except ValueError:
        raise InvalidArgument(f"expiration_date {shown(value)} is not a real calendar date") from None
    if today is not None and date < today:
        raise InvalidArgument(
            f"expiration_date {date} is in the past (today is {today}, UTC), so the memory would be hidden at once; "
            "send today or a later date, or omit it"
        )
    return date


def check_timestamp(value: Any, name: str) -> str:
    """An ISO 8601 date and time, as UTC with six digits of microseconds (the form trimem stores,
    so text order is time order); one without a time zone is read as UTC."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be an ISO 8601 timestamp such as '2026-12-01T09:30:00+00:00', "
                              f"got {shown(value)}")
    try:
        stamp = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidArgument(f"{name} {shown(value)} is not an ISO 8601 timestamp such as "
                              "'2026-12-01T09:30:00+00:00'") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    try:
        return stamp.astimezone(dt.UTC).isoformat(timespec="microseconds")
    except OverflowError:  # 0001-01-01T00:00+14:00 is still year 0 in UTC
        raise InvalidArgument(f"{name} {shown(value)} falls outside the years 1 to 9999 in UTC; "
                              "send a real date and time") from None


@dataclass(frozen=True)
class CheckedMemory:
    """One memory for the write path, every field checked: what ``add_many`` and an import hand
    to it. ``id``, ``created_at`` and ``updated_at`` are kept when set (an import, a restore),
    else made when written; ``history`` replaces the ADD event the write would record;
    ``gap_before`` stores it apart from the memory written before it (not its neighbour, see
    ``store.backend``); ``reclaims_id`` lets it take back an id that only its own history holds
    (a restore)."""

    text: str
    scope: Scope
    metadata: dict[str, Any]
    expiration_date: str | None = None
    actor_id: str | None = None
    role: str | None = None
    id: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    history: tuple[HistoryEvent, ...] = ()
    gap_before: bool = False
    reclaims_id: bool = False

    @property
    def hash(self) -> str:
        return normalized_hash(self.text)


def check_top_k(top_k: Any, maximum: int, name: str = "top_k") -> int:
    """A result count from 1 to ``maximum``; ``name`` is the argument's (``limit`` for a page)."""
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise InvalidArgument(f"{name} must be an integer, got {shown(top_k)}")
    if not 1 <= top_k <= maximum:
        raise InvalidArgument(f"{name} must be between 1 and {maximum}, got {shown(top_k)}")
    return top_k


MAX_SQL_INTEGER = 2**63 - 1
"""SQLite integers are 64-bit: a larger offset cannot even be bound."""


def check_offset(offset: Any) -> int:
    """A page offset from 0 to SQLite's largest integer."""
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_SQL_INTEGER:
        raise InvalidArgument(
            f"offset must be a whole number from 0 to {MAX_SQL_INTEGER}, got {shown(offset)}; "
            "use next_offset from the last page"
        )
    return offset


def check_threshold(threshold: Any, name: str = "threshold", usual: float = 0.1) -> float:
    """The semantic gate, a similarity from 0 to 1 (or another bar from 0 to 1: ``name``, usually ``usual``)."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or math.isnan(threshold):
        raise InvalidArgument(f"{name} must be a number between 0 and 1, got {shown(threshold)}")
    if not 0.0 <= threshold <= 1.0:
        raise InvalidArgument(f"{name} must be between 0 and 1, got {shown(threshold)}; {usual:g} is a good default")
    return float(threshold)


def normalized_hash(text: str) -> str:
    """Hash of the text with case, Unicode form and spacing folded: re-adding a fact finds its twin."""
    folded = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return hashlib.sha256(folded.encode("utf-8")).hexdigest()
