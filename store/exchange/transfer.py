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
from pathlib import Path
from typing import Any, BinaryIO, get_args

from store.backend import Snapshot, to_memory
from store.config import LimitsConfig
from store.errors import InvalidArgument, TrimemError, shown
from store.filters import Filter
from store.records import MESSAGE_ROLES, HistoryEvent, HistoryEventKind, Memory
from store.scope import SCOPE_KEYS, Scope
from store.validation import (
    CheckedMemory,
    check_expiration,
    check_id,
    check_metadata,
    check_scope,
    check_text,
    check_timestamp,
    json_object,
    scope_keys_in,
)
from store.versions import trimem_version

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


class ImportInterrupted(TrimemError):
    """An import stopped between two chunks when asked to (``stop``): ``report`` counts what
    was done, every memory it counts as imported is stored, and a second run adds the rest."""

    def __init__(self, report: ImportReport) -> None:
        if report.dry_run:
            message = "import interrupted while checking the file: nothing was imported"
        else:
            message = (f"import interrupted: {report.imported} memories kept ({report.read} records read); run the "
                       "same import again to add the rest: what is stored is skipped")
        super().__init__(message)
        self.report = report


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


def export_lines(
    snapshot: Snapshot,
    scope: Scope,
    filters: Mapping[str, Any] | None,
    parsed: Filter | None,
    *,
    history: bool,
    model: str,
    dimension: int,
    at: str,
) -> Iterator[str]:
    """The header, then one line per memory (with its events if ``history``), each ending in a
    newline; every line is read from one ``snapshot``, so the counts match the lines. ``filters``
    as sent goes in the header, and ``parsed`` chooses the memories."""
    memories, events = snapshot.export_counts(scope, parsed)
    yield _dump({
        "format": FORMAT, "format_version": FORMAT_VERSION, "trimem_version": trimem_version(),
        "embedding_model": model, "embedding_dimension": dimension, "exported_at": at,
        "scope": scope.named() or None, "filters": filters, "history": history,
        "counts": {"memories": memories, "history_events": events if history else 0},
    })
    previous = None
    for row in snapshot.export_memories(scope, parsed):
        line = dataclasses.asdict(to_memory(row))
        if previous is not None and row.rowid != previous + 1:
            line["gap_before"] = True  # stored apart (a deleted or unexported memory between): not neighbours
        previous = row.rowid
        if history:
            line["history"] = [{key: getattr(event, key) for key in EVENT_KEYS}
                               for event in snapshot.history(row.id, row.scope)]
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
    skipped because their id is taken (stored, or kept by a deleted memory's history) or their
    text (normalised, in the same scope) is stored already; whose scope each record went to;
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
    own_scope: int
    """Records that named their own user_id, agent_id or run_id, and kept it."""
    import_scope: int
    """Records that named none, and went to ``default_scope``, the import's."""
    default_scope: dict[str, str] | None
    """The ids the import named, if any."""


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
        raise BadLine(f"line {number} is not a trimem export header (no \"format\": \"{FORMAT}\"); "
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
    default_scope: Scope | None,
    limits: LimitsConfig,
    write: Write,
    *,
    dry_run: bool,
    progress: Callable[[int, int | None], None] | None,
    stop: Callable[[], bool] | None = None,
) -> ImportReport:
    """Check and write the source's memories chunk by chunk (see ``Engine.import_memories``).

    Twins within the file are skipped here (the database cannot show them before they are
    written); ``write`` skips what the database holds. A memory after a skipped one, and
    the file's first, is kept apart from the memory written before it (``gap_before``).
    ``stop()`` is asked after each chunk; true, the import ends there (``ImportInterrupted``).
    """
    counts: Counter[str] = Counter()
    seen_ids: set[str] = set()
    seen_texts: set[tuple[Scope, str]] = set()
    gap = True
    with contextlib.closing(source.records):  # a bad record stops the reading: close the file now
        for chunk in checked_chunks(source, default_scope, limits, counts):
            todo = []
            for memory in chunk:
                text_key = (memory.scope, memory.hash)
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
            if stop is not None and stop():
                raise ImportInterrupted(_report(source, counts, default_scope, dry_run))
    return _report(source, counts, default_scope, dry_run)


def _report(source: Source, counts: Counter[str], default_scope: Scope | None, dry_run: bool) -> ImportReport:
    return ImportReport(
        source=source.name, read=counts["read"], imported=counts["ADD"], skipped_same_id=counts["SAME_ID"],
        skipped_same_text=counts["DUPLICATE"], history_events=counts["events"], dry_run=dry_run,
        embedding_model=source.embedding_model, mapped=dict(source.mapped), skipped=dict(source.skipped),
        own_scope=counts["own_scope"], import_scope=counts["import_scope"],
        default_scope=None if default_scope is None else default_scope.named(),
    )


def checked_chunks(
    source: Source, default_scope: Scope | None, limits: LimitsConfig, scopes: Counter[str],
    size: int = CHUNK,
) -> Iterator[list[CheckedMemory]]:
    """The source's memories, checked, in chunks of ``size``; a bad one raises ``BadLine``
    before its chunk is handed out, so no chunk is ever half-written. ``scopes`` counts the
    records that named their own scope (``own_scope``) and those that took the import's."""
    chunk: list[CheckedMemory] = []
    for where, value in source.records:
        try:
            chunk.append(check_line(value, default_scope, limits))
        except InvalidArgument as exc:
            raise BadLine(f"{where}: {exc}") from None
        scopes["own_scope" if own_scope(value) else "import_scope"] += 1
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def check_line(
    value: Mapping[str, Any], default_scope: Scope | None, limits: LimitsConfig, today: str | None = None
) -> CheckedMemory:
    """One memory line checked as every engine write checks its arguments, and its history as
    trimem records one; a line naming no scope id takes ``default_scope``. An expiration date
    before ``today`` is refused (``None``, an import: memories keep the dates they had)."""
    if "text" not in value:
        raise InvalidArgument('has no "text"; every line needs the fact to remember')
    own = own_scope(value)
    if not own and default_scope is None:
        raise InvalidArgument("names no user_id, agent_id or run_id; add one, or give the import a scope")
    created_at = _optional(value, "created_at", check_timestamp)
    text = check_text(value["text"], limits.max_text_chars)
    metadata = _metadata(value.get("metadata"), limits)
    return CheckedMemory(
        text=text,
        scope=check_scope(**own) if own else default_scope,
        metadata=metadata,
        expiration_date=check_expiration(value.get("expiration_date"), today),
        actor_id=_optional(value, "actor_id", check_id),
        role=_optional(value, "role", _check_role),
        id=_optional(value, "id", check_id),
        created_at=created_at,
        updated_at=_optional(value, "updated_at", check_timestamp) or created_at,
        history=_history(value.get("history"), text, metadata, limits),
        gap_before=_optional(value, "gap_before", _check_flag) or False,
    )


def own_scope(value: Mapping[str, Any]) -> dict[str, Any]:
    """The scope ids a line names itself: they win over the import's scope, which only goes to
    lines that name none (an export of several users puts each memory back with its own)."""
    return {key: value[key] for key in SCOPE_KEYS if value.get(key) is not None}


def _optional(value: Mapping[str, Any], key: str, check: Callable[[Any, str], Any]) -> Any:
    return None if value.get(key) is None else check(value[key], key)


def _metadata(metadata: Any, limits: LimitsConfig) -> dict[str, Any]:
    """Scope keys inside a line's metadata would be silently dropped: refuse them instead."""
    if misplaced := scope_keys_in(metadata):
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


def _history(history: Any, text: str, metadata: dict[str, Any], limits: LimitsConfig) -> tuple[HistoryEvent, ...]:
    """A line's exported events, each checked, and together a story trimem could have recorded
    (``_check_story``) that leaves the memory as the line has it."""
    if not isinstance(history or [], list):
        raise InvalidArgument(f"history must be a list of events, got {type(history).__name__}")
    events = tuple(_event(event, index, limits) for index, event in enumerate(history or []))
    if not events:
        return events
    left = _check_story(events)
    if left[0] is None:
        raise InvalidArgument("history ends with DELETE, but the line is a stored memory (an export holds no "
                              "deleted one); drop the last event, or the line")
    _require_state("", text, metadata, left, "what its history leaves")
    return events


NEXT_EVENTS: dict[str, tuple[tuple[str, ...], str]] = {
    "new": (("ADD",), "a history starts with ADD"),
    "live": (("UPDATE", "DELETE"), "a stored memory can only be updated or deleted"),
    "deleted": (("RESTORE", "ADD"), "a deleted memory can only be restored (or added again)"),
}
"""The events that may follow each state, as trimem records them (before RESTORE existed, a
restore was recorded as ADD, so an ADD after a DELETE is kept too)."""


def _check_story(events: Sequence[HistoryEvent]) -> tuple[str | None, dict[str, Any]]:
    """The text and metadata the events leave a memory with (text ``None`` when it ends deleted).

    Each event must be allowed where it comes (``NEXT_EVENTS``); an UPDATE or DELETE starts from
    the text and metadata the event before it left, and a RESTORE brings back what the DELETE
    took. Times are not compared: trimem's own histories can go back in time (a clock set back,
    or a memory imported with a later date than the edits made to it afterwards).
    """
    state: tuple[str | None, dict[str, Any]] = (None, {})
    deleted = False
    for index, event in enumerate(events):
        where = f"history[{index}]"
        allowed, rule = NEXT_EVENTS["deleted" if deleted else "live" if state[0] is not None else "new"]
        if event.event not in allowed:
            raise InvalidArgument(f"{where} is {event.event}, which cannot come here: {rule}")
        if event.event in ("UPDATE", "DELETE"):
            _require_state(f"{where}.old_", event.old_text, event.old_metadata, state, "what the event before it left")
        if event.event == "RESTORE":
            _require_state(f"{where}.new_", event.new_text, event.new_metadata, state, "what the DELETE took")
        if event.event != "DELETE" and not isinstance(event.new_text, str):
            raise InvalidArgument(f"{where} is {event.event} without new_text, the text it leaves")
        deleted = event.event == "DELETE"
        if not deleted:
            state = (event.new_text, event.new_metadata or {})
    return (None, {}) if deleted else state


def _require_state(prefix: str, text: Any, metadata: Any, state: tuple[str | None, dict[str, Any]], what: str) -> None:
    """Refuse ``text`` and ``metadata`` (fields ``{prefix}text`` and ``{prefix}metadata``) unless
    they are the ``state`` that ``what`` names."""
    for name, got, expected in (("text", text, state[0]), ("metadata", metadata or {}, state[1])):
        if got != expected:
            raise InvalidArgument(f"{prefix}{name} {shown(got)} is not {shown(expected)}, {what}")


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
