"""The tools' JSON schemas as ``tools/list`` gives them: inputs trimmed for the model, outputs
quick for a client to validate, both meaning what pydantic's do.

Every client passes each tool's input schema to the model in every conversation, so it says
only what a model needs. Clients such as the MCP SDK's validate every structured result
against the output schema, so it says the same types in the form a validator checks
fastest: ``{"type": ["string", "null"]}`` rather than ``anyOf`` over two subschemas, and each
model's properties in place rather than behind a ``$ref``.
"""

from __future__ import annotations

from typing import Any


def without_titles(schema: Any) -> Any:
    """A JSON schema without the titles pydantic derives from names: the names say it already."""
    if isinstance(schema, dict):
        return {key: without_titles(value) for key, value in schema.items()
                if not (key == "title" and isinstance(value, str))}
    if isinstance(schema, list):
        return [without_titles(item) for item in schema]
    return schema


def for_model(schema: Any) -> Any:
    """An input schema as a model needs it: no titles, and an optional argument as its type alone
    (``anyOf [T, null]`` with default null is T, no default: a model leaves out what it does not
    mean to send), and no ``additionalProperties: true``, which JSON Schema assumes."""
    schema = without_titles(schema)
    if isinstance(schema, dict):
        schema = {key: for_model(value) for key, value in schema.items()
                  if not (key == "default" and value is None) and not (key == "additionalProperties" and value is True)}
        options = schema.get("anyOf")
        if options and {"type": "null"} in options and "default" not in schema:
            kept = [option for option in options if option != {"type": "null"}]
            schema = {key: value for key, value in schema.items() if key != "anyOf"}
            schema.update(kept[0] if len(kept) == 1 else {"anyOf": kept})
    elif isinstance(schema, list):
        schema = [for_model(item) for item in schema]
    return schema


def for_validation(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """An output schema with the same meaning, quicker to validate: no titles, each ``$ref`` replaced
    by its definition (trimem's output models do not nest themselves), and ``anyOf`` over bare
    types written as one list of types."""
    if schema is None:
        return None
    definitions = schema.get("$defs", {})

    def plain(node: Any) -> Any:
        if isinstance(node, list):
            return [plain(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return plain(definitions[node["$ref"].removeprefix("#/$defs/")])
        node = {key: plain(value) for key, value in node.items() if key != "$defs"}
        options = node.get("anyOf")
        if options and all(set(option) == {"type"} and isinstance(option["type"], str) for option in options):
            node = {key: value for key, value in node.items() if key != "anyOf"}
            node["type"] = [option["type"] for option in options]
        return node

    return plain(without_titles(schema))
