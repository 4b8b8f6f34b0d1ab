"""Other memory servers' files, read as memories to import (``trimem import --from NAME``).

Each reader turns its format's records into trimem memory lines (``store/exchange/transfer.py``)
and counts, by kind, what it mapped and, by reason, what it left out; the lines then go
through the same checks and the same write path as a trimem export.

- ``mcp-memory``: the MCP reference memory server's ``memory.jsonl`` (modelcontextprotocol/
  servers, ``src/memory``), a knowledge graph of entity lines ``{"type": "entity", "name",
  "entityType", "observations": [...]}`` and relation lines ``{"type": "relation", "from",
  "to", "relationType"}``. Each observation becomes the memory "Ana Lopez: works at Santa
  Maria hospital" (the name first, so it is linked to that entity), with ``entity`` and
  ``entity_type`` in metadata; each relation becomes "Ana Lopez works at Santa Maria
  hospital", with ``relation``, ``from`` and ``to`` in metadata. Underscores in names and
  relation types are read as spaces in the text (``John_Smith``, ``works_at``) and kept in
  the metadata. An entity without
  observations states nothing by itself and is left out.
- ``mcp-memory-service``: its SQLite database (the sqlite-vec backend's ``memories``
  table): ``content`` is the text, ``tags`` (comma-separated) become a list and
  ``memory_type`` a key of the metadata beside the row's own JSON ``metadata``, and
  ``created_at`` / ``updated_at`` (epoch seconds) the dates. Rows with a ``deleted_at``
  are deletions and are left out.
- ``mem0``: Mem0's ``get_all`` output, ``{"results": [...]}`` (older versions: the bare
  list): ``memory`` is the text; ``id``, ``user_id`` / ``agent_id`` / ``run_id``,
  ``actor_id``, ``role``, ``metadata``, ``created_at`` and ``updated_at`` are kept.

None of these files has trimem's scopes except Mem0's: a record without scope ids goes
to the scope the import names (the CLI's default user). Every memory is tagged with
``source`` in its metadata.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, get_args

from store.errors import InvalidArgument, shown
from store.exchange import transfer
from store.exchange.transfer import BadLine, Source
from store.records import MESSAGE_ROLES
from store.scope import SCOPE_KEYS

SourceFormat = Literal["trimem", "mcp-memory", "mcp-memory-service", "mem0"]


def open_source(name: SourceFormat, path: Path) -> Source:
    """The memories of ``path``, read as the format ``name``."""
    readers: dict[str, Callable[[Path], Source]] = {
        "trimem": transfer.read_export, "mcp-memory": read_mcp_memory,
        "mcp-memory-service": read_mcp_memory_service, "mem0": read_mem0,
    }
    if name not in readers:
        raise InvalidArgument(f"unknown format {shown(name)}; use one of {', '.join(get_args(SourceFormat))}")
    return readers[name](path)


def _count(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


# --- the MCP reference memory server -------------------------------------------------------


def read_mcp_memory(path: Path) -> Source:
    """The knowledge graph of ``memory.jsonl``, one memory per observation and per relation."""
    handle = transfer.open_file(path)
    source = Source("mcp-memory", iter(()))

    def records() -> Iterator[tuple[str, dict[str, Any]]]:
        example = '{"type": "entity", "name": "Ana Lopez", "entityType": "person", "observations": ["..."]}'
        with handle:
            for where, line in transfer.numbered(handle, None, example):
                try:
                    yield from _graph_line(line, where, source)
                except InvalidArgument as exc:
                    raise BadLine(f"{where}: {exc}") from None

    source.records = records()
    return source


def _graph_line(line: dict[str, Any], where: str, source: Source) -> Iterator[tuple[str, dict[str, Any]]]:
    kind = line.get("type")
    if kind == "entity":
        name, observations = _name(line, "name"), line.get("observations", [])
        if not isinstance(observations, list) or not all(isinstance(o, str) for o in observations):
            raise InvalidArgument("observations must be a list of strings")
        kept = [observation.strip() for observation in observations if observation.strip()]
        if not kept:
            _count(source.skipped, "entities without observations")
        for observation in kept:
            _count(source.mapped, "observations")
            metadata = {"source": "mcp-memory", "entity": name, "entity_type": line.get("entityType")}
            yield where, {"text": f"{_words(name)}: {observation}", "metadata": metadata}
    elif kind == "relation":
        start, relation, end = _name(line, "from"), _name(line, "relationType"), _name(line, "to")
        _count(source.mapped, "relations")
        metadata = {"source": "mcp-memory", "relation": relation, "from": start, "to": end}
        yield where, {"text": f"{_words(start)} {_words(relation)} {_words(end)}", "metadata": metadata}
    else:
        _count(source.skipped, f"lines of type {str(kind)[:40]!r}")


def _words(name: str) -> str:
    """``works_at`` and ``John_Smith`` as words, so the memory reads as a sentence and the name is
    found as an entity (the metadata keeps the graph's own spelling)."""
    return " ".join(name.replace("_", " ").split())


def _name(line: dict[str, Any], key: str) -> str:
    value = line.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{line.get('type')} has no {key}")
    return value.strip()


# --- mcp-memory-service --------------------------------------------------------------------

MEMORY_SERVICE_COLUMNS = ("content",)
MEMORY_SERVICE_OPTIONAL = ("tags", "memory_type", "metadata", "created_at", "updated_at", "created_at_iso",
                           "updated_at_iso", "deleted_at")


def read_mcp_memory_service(path: Path) -> Source:
    """The ``memories`` table of an mcp-memory-service SQLite database, one memory per row."""
    from store.sqlite.foreign import foreign_rows  # the database driver loads only for a command that reads one

    total, rows = foreign_rows(str(path), "memories", MEMORY_SERVICE_COLUMNS, MEMORY_SERVICE_OPTIONAL)
    source = Source("mcp-memory-service", iter(()), total)

    def records() -> Iterator[tuple[str, dict[str, Any]]]:
        for row in rows:
            where = f"row {row['rowid']}"
            if row.get("deleted_at") is not None:
                _count(source.skipped, "deleted rows")
                continue
            if not isinstance(row["content"], str) or not row["content"].strip():
                _count(source.skipped, "rows without content")
                continue
            try:
                line = _service_row(row)
            except InvalidArgument as exc:
                raise BadLine(f"{where}: {exc}") from None
            _count(source.mapped, "memories")
            yield where, line

    source.records = records()
    return source


def _service_row(row: dict[str, Any]) -> dict[str, Any]:
    metadata: Any = {}
    if row.get("metadata"):
        try:
            metadata = json.loads(row["metadata"])
        except (TypeError, ValueError, RecursionError):  # ValueError: bad JSON, or bytes that are not UTF-8
            raise InvalidArgument(f"metadata {shown(row['metadata'])} is not JSON") from None
        if not isinstance(metadata, dict):
            raise InvalidArgument(f"metadata {shown(row['metadata'])} is not a JSON object")
    metadata = {key: value for key, value in metadata.items() if key not in SCOPE_KEYS}
    metadata["source"] = "mcp-memory-service"
    if tags := _tags(row.get("tags")):
        metadata["tags"] = tags
    if row.get("memory_type"):
        metadata["memory_type"] = row["memory_type"]
    line = {"text": row["content"], "metadata": metadata}
    for key in ("created_at", "updated_at"):
        if (stamp := _stamp(row.get(key), row.get(f"{key}_iso"), key)) is not None:
            line[key] = stamp
    return line


def _tags(tags: Any) -> list[str]:
    """Comma-separated text (the sqlite-vec backend), or a JSON list (some versions)."""
    if not isinstance(tags, str) or not tags.strip():
        return []
    if tags.lstrip().startswith("["):
        try:
            listed = json.loads(tags)
            return [str(tag).strip() for tag in listed if str(tag).strip()] if isinstance(listed, list) else []
        except (json.JSONDecodeError, RecursionError):
            pass
    return [tag.strip() for tag in tags.split(",") if tag.strip()]


def _stamp(epoch: Any, iso: Any, name: str) -> str | None:
    """Epoch seconds as an ISO 8601 timestamp, else the ISO column's text (checked later)."""
    if isinstance(epoch, (int, float)) and not isinstance(epoch, bool):
        try:
            return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="microseconds")
        except (OverflowError, ValueError, OSError):  # beyond year 9999 or before year 1, or not a number (NaN)
            raise InvalidArgument(f"{name} {shown(epoch)} is not a time in seconds since 1970 between the years "
                                  "1 and 9999") from None
    return iso if isinstance(iso, str) and iso.strip() else None


# --- Mem0 ----------------------------------------------------------------------------------

MEM0_KEPT = ("id", *SCOPE_KEYS, "actor_id", "role", "metadata", "created_at", "updated_at")


def read_mem0(path: Path) -> Source:
    """Mem0's ``get_all`` output, one memory per result."""
    with transfer.open_file(path) as handle:
        try:
            data = json.load(handle)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else exc  # as json_object says it
            raise InvalidArgument(f"{path} is not Mem0's get_all JSON ({why}); save `memory.get_all(...)` "
                                  "with json.dump") from None
    results = data.get("results") if isinstance(data, dict) else data
    if not isinstance(results, list):
        raise InvalidArgument(f"{path} is not Mem0's get_all JSON: expected {{\"results\": [...]}} or a list")
    source = Source("mem0", iter(()), len(results))

    def records() -> Iterator[tuple[str, dict[str, Any]]]:
        for index, result in enumerate(results):
            where = f"results[{index}]"
            if not isinstance(result, dict):
                raise BadLine(f"{where}: must be an object with \"memory\", got {type(result).__name__}")
            if not isinstance(result.get("memory"), str) or not result["memory"].strip():
                _count(source.skipped, "results without memory text")
                continue
            line = {key: result[key] for key in MEM0_KEPT if result.get(key) is not None}
            if line.get("role") not in (None, *MESSAGE_ROLES):
                line.pop("role")
                _count(source.skipped, "roles other than user and assistant (memory kept)")
            metadata = line.get("metadata", {})  # anything but an object is refused by the line check
            line["metadata"] = {**metadata, "source": "mem0"} if isinstance(metadata, dict) else metadata
            _count(source.mapped, "memories")
            yield where, {"text": result["memory"], **line}

    source.records = records()
    return source
