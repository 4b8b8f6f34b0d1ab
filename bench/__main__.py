"""``python -m bench NAME [options]`` runs one benchmark; ``python -m bench`` lists them.

A benchmark is a module of this package with a ``main(argv)``. The list is read from the
sources (each module's ``main`` and the first paragraph of its docstring), so listing imports
no benchmark and no model, and a new benchmark is listed without a second list to keep.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def benchmarks() -> dict[str, str]:
    """Every runnable benchmark's name, and its description: its docstring's first paragraph on one line."""
    found = {}
    for path in sorted(PACKAGE.glob("[!_]*.py")):  # not __init__ or this module
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
            found[path.stem] = " ".join((ast.get_docstring(tree) or "").split("\n\n")[0].split())
    return found


def listing(known: dict[str, str]) -> str:
    width = max(map(len, known))
    lines = [f"  {name:<{width}}  {description}" for name, description in known.items()]
    return "\n".join(["usage: python -m bench NAME [options]   (python -m bench NAME --help for its options)", "",
                      "benchmarks:", *lines])


def main(argv: list[str]) -> int:
    known = benchmarks()
    if not argv or argv[0] in ("-h", "--help"):
        print(listing(known))
        return 0
    name, options = argv[0], argv[1:]
    if name not in known:
        print(f"python -m bench: no benchmark named {name!r}\n\n{listing(known)}", file=sys.stderr)
        return 2
    # argparse names the program after sys.argv[0]; report.command_line records the run from it
    sys.argv = [f"python -m bench {name}", *options]
    return importlib.import_module(f"bench.{name}").main(options)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
