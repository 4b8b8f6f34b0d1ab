"""trimem's engine: memories in a store (one SQLite file by default), recalled by meaning, keywords and entities.

Importing this package loads no model, no database driver and opens no file: the
names below resolve on first use, so ``import store.ranking.scoring`` stays pure and the MCP
handshake stays fast. It knows nothing of MCP: ``mcp_server`` and the CLI sit on top.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Config": "config",
    "load_config": "config",
    "Engine": "engine",
    "MemoryInput": "engine",
    "InvalidArgument": "errors",
    "ModelUnavailable": "errors",
    "NotFound": "errors",
    "SchemaMismatch": "errors",
    "ReembedReport": "records",
    "TrimemError": "errors",
    "AddedMemory": "records",
    "EntityMatch": "records",
    "Explanation": "records",
    "HistoryEvent": "records",
    "ImportReport": "exchange.transfer",
    "Memory": "records",
    "SearchHit": "records",
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the lazy names above, listed once


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'store' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
