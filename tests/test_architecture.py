"""The storage seam holds: each database driver stays inside its backend's package, the code
above the seam imports no database module, ``store`` and ``bench`` have no import circle, and no
benchmark edits ``sys.path``.

Imports are read from the source (every ``import`` statement, at any depth, including those
only for type checking), so a lazy import inside a function cannot slip past.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DRIVERS = {"sqlite": {"apsw", "sqlite_vec"}, "postgres": {"psycopg", "psycopg_pool", "pgvector"}}
"""Each backend package, and the driver modules only it may import."""
EVERY_DRIVER = set().union(*DRIVERS.values())
ABOVE_THE_SEAM = (
    "backend", "ranking/retrieval", "analysis/linking", "exchange/transfer", "analysis/reanalysis", "ranking/scoring",
    "filters", "scope", "clock", "records", "ids", "admin",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The modules a source file imports, as absolute dotted names (``from . import x`` gives
    both the package and ``package.x``, since x may be a module)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("folder", ["store", "mcp_server"])
@pytest.mark.parametrize("backend", sorted(DRIVERS))
def test_a_database_driver_is_imported_only_by_its_backend(folder: str, backend: str) -> None:
    outside = {
        module_name(path): sorted(name for name in imports(path) if name.split(".")[0] in DRIVERS[backend])
        for path in sources(folder) if not path.is_relative_to(ROOT / "store" / backend)
    }
    assert {module: names for module, names in outside.items() if names} == {}


def test_the_code_above_the_seam_imports_no_database_module() -> None:
    for name in ABOVE_THE_SEAM:
        found = imports(ROOT / "store" / f"{name}.py")
        database = sorted(module for module in found if module.split(".")[0] in EVERY_DRIVER
                          or module.split(".")[:2] in (["store", backend] for backend in DRIVERS))
        assert database == [], f"store.{name} imports {database}"


def import_circle(folder: str) -> list[str]:
    """The first import circle among the modules under ``folder``, as the modules around it
    (the first repeated at the end), or ``[]`` when there is none."""
    modules = {module_name(path): path for path in sources(folder)}
    graph = {name: {found for found in imports(path) if found in modules and found != name}
             for name, path in modules.items()}
    # a package's own __init__ importing its modules is how packages work; a circle through
    # one is still a circle between the modules, so only the modules' own edges count
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    graph = {name: edges - packages for name, edges in graph.items() if name not in packages}
    state: dict[str, str] = {}
    circle: list[str] = []

    def visit(name: str, trail: list[str]) -> bool:
        state[name] = "open"
        for following in sorted(graph.get(name, ())):
            if state.get(following) == "open":
                circle.extend([*trail[trail.index(following):], following] if following in trail else [name, following])
                return True
            if following not in state and visit(following, [*trail, following]):
                return True
        state[name] = "done"
        return False

    for name in sorted(graph):
        if name not in state and visit(name, [name]):
            break
    return circle


@pytest.mark.parametrize("folder", ["store", "mcp_server", "bench"])
def test_a_package_has_no_import_circle(folder: str) -> None:
    assert import_circle(folder) == []


def test_the_engine_knows_nothing_of_its_front_ends() -> None:
    """Imports go one way, ``mcp_server`` -> ``store``: the engine imports no front end, no MCP,
    no command line and no web framework."""
    fronts = {"mcp_server", "mcp", "click", "starlette", "uvicorn"}
    reaching = {module_name(path): sorted(name for name in imports(path) if name.split(".")[0] in fronts)
                for path in sources("store")}
    assert {module: names for module, names in reaching.items() if names} == {}


FRONT_ENDS = {"tools": {"hooks"}, "ui": set(), "service": {"tools"}, "cli": {"tools", "service", "ui", "hooks"},
              "hooks": set()}
"""Each front end of ``mcp_server`` and the front ends it stands on: the HTTP service serves the
MCP tools, the command line (``python -m mcp_server`` too) starts the servers and the page, and
what Claude Code's hooks run (``hooks``) is reached both as a tool and as a command.
What they share (``call_scope``, ``models``, ``replies``, ``wording``) stands on none of them."""


def test_each_front_end_imports_only_what_it_stands_on() -> None:
    reaching = {}
    for path in sources("mcp_server"):
        parts = module_name(path).split(".")
        own = "cli" if parts == ["mcp_server", "__main__"] else parts[1] if parts[1:2] and parts[1] in FRONT_ENDS else None
        reached = {name.split(".")[1] for name in imports(path)
                   if name.startswith("mcp_server.") and name.split(".")[1] in FRONT_ENDS} - {own}
        if reached - FRONT_ENDS.get(own, set()):
            reaching[module_name(path)] = sorted(reached - FRONT_ENDS.get(own, set()))
    assert reaching == {}


def test_no_benchmark_touches_the_import_path() -> None:
    """Every benchmark runs one way, ``python -m bench NAME``, which finds the checkout itself;
    a module that edits ``sys.path`` would hide a benchmark run some other way."""
    touching = sorted(module_name(path) for path in sources("bench")
                      if any(isinstance(node, ast.Attribute) and node.attr == "path"
                             and isinstance(node.value, ast.Name) and node.value.id == "sys"
                             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))))
    assert touching == []
