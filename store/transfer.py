"""trimem's export format: JSON Lines of memories after one header line, written and read.

    {"format": "trimem-memories", "format_version": 1, "trimem_version": "0.1.0",
     "embedding_model": "all-MiniLM-L6-v2", "embedding_dimension": 384,
     "exported_at": "2026-12-02T20:30:00.000000+00:00", "scope": {"user_id": "ana"},
     "filters": null, "history": false, "counts": {"memories": 2, "history_events": 0}}
    {"id": "2bc388d0-…", "text": "Ana is allergic to peanuts", "user_id": "ana", "agent_id": null,
     "run_id": null, "actor_id": null, "role": null, "metadata": {"category": "health"},
     "created_at": "…", "updated_at": "…", "expiration_date": null}

A memory line has the fields of ``store.records.Memory`` (and ``history``, its events,
when exported with them); vectors, lemmas and entity links are derived data, rebuilt
by the importing side with its own models. Only ``text`` is required on import; a line
without a scope takes the importer's, one without ``id`` or dates gets new ones.

The header's ``format_version`` changes when a reader of an older version could no
longer read the lines correctly; a file of a newer version is refused, not guessed at.
Reading checks every line with the engine's own argument checks and names a bad one
by its line number (``BadLine``); ``trimem add --file`` shares the line parsing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, get_args

from .config import LimitsConfig
from .errors import InvalidArgument, shown
from .records import MESSAGE_ROLES, SCOPE_KEYS, HistoryEvent, HistoryEventKind, Memory, scope_of, to_memory
from .validation import (
    CheckedMemory,
    check_expiration,
    check_id,
    check_metadata,
    check_scope,
    check_text,
    check_timestamp,
    json_object,
)

if TYPE_CHECKING:  # the CLI imports this module for its options: no database driver until a file is read
    import apsw

FORMAT = "trimem-memories"
FORMAT_VERSION = 1
"""The newest version this trimem reads and the one it writes."""

MEMORY_KEYS = tuple(f.name for f in dataclasses.fields(Memory))
LINE_KEYS = (*MEMORY_KEYS, "history", "gap_before")
"""The keys a memory line may have; any other is refused, so a misspelt one is not lost."""
EVENT_KEYS = tuple(f.name for f in dataclasses.fields(HistoryEvent) if f.name != "memory_id")
CHUNK = 256
"""Memories per write: one model batch and one transaction, small enough that a running
server gets the write lock between chunks and memory stays bounded."""


class BadLine(InvalidArgument):
    """A line (or record) that cannot be imported; the message starts with where it is."""


# --- lines ---------------------------------------------------------------------------------


def line_object(raw: bytes, number: int, keys: Sequence[str] | None, example: str) -> dict[str, Any] | None:
    """One JSON Lines line as an object with only ``keys`` (any, for ``None``); ``None`` for a
    blank line.

    Raises ``InvalidArgument`` saying what is wrong; ``example`` is a good line to show.
    """
    try:
        text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument("is not UTF-8 text; save the file as UTF-8") from None
    if not text.strip():
        return None
    value = json_object(text, example)
    unknown = [key for key in value if keys is not None and key not in keys]
    if unknown:
        raise InvalidArgument(f"unknown key {unknown[0][:40]!r}; a line may have {', '.join(keys)}")
    return value


def numbered(
    lines: Iterable[bytes], keys: Sequence[str] | None, example: str, start: int = 1
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each non-blank line's object with where it is (``"line 12"``); raises ``BadLine``."""
    for number, raw in enumerate(lines, start=start):
        try:
            value = line_object(raw, number, keys, example)
        except InvalidArgument as exc:
            raise BadLine(f"line {number}: {exc}") from None
        if value is not None:
            yield f"line {number}", value


# --- export --------------------------------------------------------------------------------


def trimem_version() -> str:
    try:
        return version("trimem")
    except PackageNotFoundError:
        return "unknown"


def export_lines(
    conn: apsw.Connection,
    scope: dict[str, str],
    filters: Mapping[str, Any] | None,
    filter_sql: tuple[str, list[Any]],
    *,
    history: bool,
    model: str,
    dimension: int,
    at: str,
) -> Iterator[str]:
    """The header, then one line per memory (with its events if ``history``), each ending in a
    newline; ``conn`` is in one read transaction, so the counts match the lines."""
    from . import db

    memories, events = db.export_counts(conn, scope, *filter_sql)
    yield _dump({
        "format": FORMAT, "format_version": FORMAT_VERSION, "trimem_version": trimem_version(),
        "embedding_model": model, "embedding_dimension": dimension, "exported_at": at,
        "scope": scope or None, "filters": filters, "history": history,
        "counts": {"memories": memories, "history_events": events if history else 0},
    })
    previous = None
    for row in db.export_memories(conn, scope, *filter_sql):
        line = dataclasses.asdict(to_memory(row))
        if previous is not None and row.rowid != previous + 1:
            line["gap_before"] = True  # stored apart (a deleted or unexported memory between): not neighbours
        previous = row.rowid
        if history:
            line["history"] = [dict(zip(EVENT_KEYS, event[1:])) for event in db.history(conn, row.id, scope_of(row))]
        yield _dump(line)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) + "\n"


# --- import --------------------------------------------------------------------------------


@dataclass
class Source:
    """Memories to import, as line-shaped objects with where each is (``"line 12"``), from a
    trimem export or a peer's file; ``mapped`` and ``skipped`` (peer records by kind and by
    reason) fill in as ``records`` is read."""

    name: str
    records: Iterator[tuple[str, dict[str, Any]]]
    total: int | None = None
    embedding_model: str | None = None
    mapped: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportReport:
    """What an import did (or, with ``dry_run``, would do): memories read, imported, and
    skipped because their id or their text (normalised, in the same scope) is stored already;
    for a peer's file, what each kind of record became and what was left out and why."""

    source: str
    read: int
    imported: int
    skipped_same_id: int
    skipped_same_text: int
    history_events: int
    dry_run: bool
    embedding_model: str | None
    mapped: dict[str, int]
    skipped: dict[str, int]


def read_export(path: Path) -> Source:
    """A trimem export: the header is read and checked now, the memory lines as they are used."""
    handle = open_file(path)
    try:
        number, header = _header(path, handle)
    except BaseException:
        handle.close()
        raise

    def records() -> Iterator[tuple[str, dict[str, Any]]]:
        with handle:
            yield from numbered(handle, LINE_KEYS, '{"text": "Ana likes tea"}', start=number + 1)

    counts = header["counts"] if isinstance(header.get("counts"), dict) else {}
    return Source("trimem", records(), counts.get("memories"), header.get("embedding_model"))


def _header(path: Path, lines: Iterable[bytes]) -> tuple[int, dict[str, Any]]:
    """The first non-blank line, checked as a header: its line number and object."""
    for number, raw in enumerate(lines, start=1):
        try:
            header = line_object(raw, number, None, f'{{"format": "{FORMAT}", ...}}')
        except InvalidArgument as exc:
            raise BadLine(f"line {number}: {exc}") from None
        if header is not None:
            _check_header(path, header, number)
            return number, header
    raise InvalidArgument(f"{path} is empty; export memories with `trimem export` first")


def open_file(path: Path) -> BinaryIO:
    """The file for reading bytes, or a message naming it."""
    try:
        return open(path, "rb")
    except OSError as exc:
        raise InvalidArgument(f"cannot read {path} ({exc.strerror or exc}); check the path") from None


def _check_header(path: Path, header: dict[str, Any], number: int) -> None:
    """Refuse a file that is not an export, or one of a newer format version than this trimem reads."""
    if header.get("format") != FORMAT:
        raise BadLine(f"line {number} of {path} is not a trimem export header (no \"format\": \"{FORMAT}\"); "
                      "export with `trimem export`, or name another tool's format with --from")
    version_ = header.get("format_version")
    if isinstance(version_, bool) or not isinstance(version_, int) or version_ < 1:
        raise BadLine(f"line {number}: format_version must be a whole number from 1, got {shown(version_)}")
    if version_ > FORMAT_VERSION:
        raise InvalidArgument(
            f"{path} is format version {version_}, written by trimem {shown(header.get('trimem_version'))}; this "
            f"trimem reads up to version {FORMAT_VERSION}: upgrade trimem to import it"
        )


Write = Callable[..., list[tuple[str, Any]]]
"""The engine's write path (``Engine._store``): checked memories in, one outcome each out."""


def run_import(
    source: Source,
    default_scope: dict[str, str] | None,
    limits: LimitsConfig,
    write: Write,
    *,
    dry_run: bool,
    progress: Callable[[int, int | None], None] | None,
) -> ImportReport:
    """Check and write the source's memories chunk by chunk (see ``Engine.import_memories``).

    Twins within the file are skipped here (the database cannot show them before they are
    written); ``write`` skips what the database holds. A memory after a skipped one, and
    the file's first, is kept apart from the memory written before it (``gap_before``).
    """
    counts: Counter[str] = Counter()
    seen_ids: set[str] = set()
    seen_texts: set[tuple[tuple[tuple[str, str], ...], str]] = set()
    gap = True
    with contextlib.closing(source.records):  # a bad record stops the reading: close the file now
        for chunk in checked_chunks(source, default_scope, limits):
            todo = []
            for memory in chunk:
                text_key = (tuple(sorted(memory.scope.items())), memory.hash)
                if memory.id is not None and memory.id in seen_ids:
                    counts["SAME_ID"], gap = counts["SAME_ID"] + 1, True
                elif text_key in seen_texts:
                    counts["DUPLICATE"], gap = counts["DUPLICATE"] + 1, True
                else:
                    todo.append(dataclasses.replace(memory, gap_before=memory.gap_before or gap))
                    seen_ids.add(memory.id or "")
                    seen_texts.add(text_key)
                    gap = False
            outcomes = write(todo, dry_run=dry_run, gap_after_skip=True)
            for memory, (outcome, _row) in zip(todo, outcomes):
                counts[outcome] += 1
                counts["events"] += len(memory.history) if outcome == "ADD" else 0
            gap = gap or (bool(outcomes) and outcomes[-1][0] != "ADD")
            counts["read"] += len(chunk)
            if progress is not None:
                progress(counts["read"], source.total)
    return ImportReport(
        source=source.name, read=counts["read"], imported=counts["ADD"], skipped_same_id=counts["SAME_ID"],
        skipped_same_text=counts["DUPLICATE"], history_events=counts["events"], dry_run=dry_run,
        embedding_model=source.embedding_model, mapped=dict(source.mapped), skipped=dict(source.skipped),
    )


def checked_chunks(
    source: Source, default_scope: dict[str, str] | None, limits: LimitsConfig, size: int = CHUNK
) -> Iterator[list[CheckedMemory]]:
    """The source's memories, checked, in chunks of ``size``; a bad one raises ``BadLine``
    before its chunk is handed out, so no chunk is ever half-written."""
    chunk: list[CheckedMemory] = []
    for where, value in source.records:
        try:
            chunk.append(check_line(value, default_scope, limits))
        except InvalidArgument as exc:
            raise BadLine(f"{where}: {exc}") from None
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def check_line(value: Mapping[str, Any], default_scope: dict[str, str] | None, limits: LimitsConfig) -> CheckedMemory:
    """One memory line checked as every engine write checks its arguments."""
    if "text" not in value:
        raise InvalidArgument('has no "text"; every line needs the fact to remember')
    own = {key: value[key] for key in SCOPE_KEYS if value.get(key) is not None}
    if not own and default_scope is None:
        raise InvalidArgument("names no user_id, agent_id or run_id; add one, or give the import a scope")
    created_at = _optional(value, "created_at", check_timestamp)
    history = value.get("history") or []
    if not isinstance(history, list):
        raise InvalidArgument(f"history must be a list of events, got {type(history).__name__}")
    return CheckedMemory(
        text=check_text(value["text"], limits.max_text_chars),
        scope=check_scope(**own) if own else dict(default_scope or {}),
        metadata=_metadata(value.get("metadata"), limits),
        expiration_date=check_expiration(value.get("expiration_date"), None),
        actor_id=_optional(value, "actor_id", check_id),
        role=_optional(value, "role", _check_role),
        id=_optional(value, "id", check_id),
        created_at=created_at,
        updated_at=_optional(value, "updated_at", check_timestamp) or created_at,
        history=tuple(_event(event, index, limits) for index, event in enumerate(history)),
        gap_before=_optional(value, "gap_before", _check_flag) or False,
    )


def _optional(value: Mapping[str, Any], key: str, check: Callable[[Any, str], Any]) -> Any:
    return None if value.get(key) is None else check(value[key], key)


def _metadata(metadata: Any, limits: LimitsConfig) -> dict[str, Any]:
    """Scope keys inside a line's metadata would be silently dropped: refuse them instead."""
    if isinstance(metadata, Mapping) and (misplaced := [key for key in SCOPE_KEYS if key in metadata]):
        raise InvalidArgument(f"metadata holds the scope key {misplaced[0]}; put it beside text, not in metadata")
    return check_metadata(metadata, limits.max_metadata_bytes)


def _check_flag(flag: Any, name: str) -> bool:
    if not isinstance(flag, bool):
        raise InvalidArgument(f"{name} must be true or false, got {shown(flag)}")
    return flag


def _check_role(role: Any, name: str) -> str:
    if role not in MESSAGE_ROLES:
        raise InvalidArgument(f"{name} must be one of {', '.join(MESSAGE_ROLES)}, got {shown(role)}")
    return role


def _event(event: Any, index: int, limits: LimitsConfig) -> HistoryEvent:
    """One exported history event (``history`` of a line exported with ``--history``)."""
    where = f"history[{index}]"
    if not isinstance(event, Mapping) or set(event) - set(EVENT_KEYS) or "event" not in event:
        raise InvalidArgument(f"{where} must be an object with {', '.join(EVENT_KEYS)}")
    if event["event"] not in get_args(HistoryEventKind):
        raise InvalidArgument(f"{where}.event must be one of {', '.join(get_args(HistoryEventKind))}, "
                              f"got {shown(event['event'])}")
    texts = [event.get(key) for key in ("old_text", "new_text")]
    if any(text is not None and not isinstance(text, str) for text in texts):
        raise InvalidArgument(f"{where}: old_text and new_text must be strings or null")
    metadatas = [None if event.get(key) is None else check_metadata(event[key], limits.max_metadata_bytes)
                 for key in ("old_metadata", "new_metadata")]
    return HistoryEvent("", event["event"], *texts, *metadatas,
                        check_timestamp(event.get("created_at"), f"{where}.created_at"))
