"""Documentation stays complete and current: every tool, command and public ``Engine``
method is documented, every ``Engine`` method is served by a command or a tool (or is
listed below as deliberately not), and the generated parts of ``docs/`` match the code."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import anyio
import pytest
from cogapp import Cog

from mcp_server.cli import cli
from mcp_server.tools.server import build_server
from store import Engine, load_config

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ["docs/cli.md", "docs/tools.md", "docs/python-api.md", "docs/export-format.md"]

# Engine method → (CLI command, MCP tool); None where that surface deliberately lacks it.
SERVED = {
    "add": ("add", "add_memory"),
    "add_many": ("add", None),  # trimem add --file: bulk imports are for the machine's owner
    "search": ("search", "search_memory"),
    "explain": ("search", "explain_search"),  # trimem search --explain
    "get": ("get", "get_memory"),
    "list": ("list", "list_memories"),
    "update": ("update", "update_memory"),
    "delete": ("delete", "delete_memory"),
    "delete_all": ("delete-all", "delete_all_memories"),
    "history": ("history", "memory_history"),
    "restore": ("restore", None),
    "users": ("users", None),  # who has memories: for the machine's owner, never across users for the assistant
    "stats": ("stats", None),  # undoing a delete is the person's call, after reading the history
    "status": ("doctor", None),  # upkeep is for the machine's owner, not for the assistant
    "check": ("doctor", None),  # trimem doctor --check
    "file_warnings": ("doctor", None),  # trimem doctor --check warns about them
    "repair": ("doctor", None),  # trimem doctor --repair
    "backup": ("backup", None),
    "export": ("export", None),  # whole files of memories: for the machine's owner
    "import_memories": ("import", None),
    "reembed": ("reembed", None),  # changing the model is the machine's owner's decision
    "entities": ("ui", None),  # the page's entity chips
    "list_by_entity": ("ui", None),  # an entity chip opens the memories linked to it
}
HOOK_TOOLS = {"recall_for_prompt": "search, and add with capture, as Claude Code's hooks call them (mcp_server/hooks)"}
"""Tools for a host's hooks rather than the model, each serving engine methods that other tools serve too."""
NOT_SERVED = {
    "warm_up": "run by trimem serve's lifespan in a background thread",
    "close": "lifecycle; commands and the server close their engine themselves",
}


def engine_methods() -> set[str]:
    return {name for name, _ in inspect.getmembers(Engine, inspect.isfunction) if not name.startswith("_")}


def tool_names() -> set[str]:
    return {tool.name for tool in anyio.run(build_server(load_config(environ={})).list_tools)}


def read(page: str) -> str:
    return (ROOT / page).read_text()


@pytest.mark.parametrize("page", GENERATED)
def test_generated_docs_match_the_code(page: str) -> None:
    assert Cog().main(["cog", "--check", str(ROOT / page)]) == 0, f"run: cog -r {page}"


def test_every_engine_method_has_a_command_or_a_tool() -> None:
    assert engine_methods() == set(SERVED) | set(NOT_SERVED)
    tools = tool_names()
    for method, (command, tool) in SERVED.items():
        assert command in cli.commands, f"Engine.{method} has no `trimem {command}`"
        assert tool is None or tool in tools, f"Engine.{method} has no {tool} tool"
    assert tools == {tool for _, tool in SERVED.values() if tool} | set(HOOK_TOOLS), "a tool that no Engine method serves?"


def test_every_tool_is_documented() -> None:
    tools_page, readme = read("docs/tools.md"), read("README.md")
    for tool in tool_names():
        assert f"\n## {tool}\n" in tools_page, f"docs/tools.md lacks a section for {tool}"
        assert f"`{tool}`" in readme, f"README.md's tool list lacks {tool}"


def test_every_command_is_documented() -> None:
    page = read("docs/cli.md")
    for command in cli.commands:
        assert f"\n## trimem {command}\n" in page, f"docs/cli.md lacks a section for trimem {command}"


def test_every_engine_method_is_documented() -> None:
    page = read("docs/python-api.md")
    for method in engine_methods():
        assert f"### `Engine.{method}(" in page, f"docs/python-api.md lacks Engine.{method}"


def test_ci_runs_the_readme_test_command() -> None:
    readme_command = re.search(r"```(?:sh|bash)\n# run the tests\n(.+)\n", read("README.md"))
    assert readme_command, "README.md needs a '# run the tests' block"
    command = re.escape(readme_command.group(1))
    assert re.search(rf"^{command}( \|\| status=\$\?)?$", read(".ci/run"), re.MULTILINE), ".ci/run must run it"


def test_ci_installs_the_way_the_readme_says() -> None:
    readme_install = re.search(r"(pip install [^&\n]+?) &&", read("README.md"))
    assert readme_install and f"\n{readme_install.group(1)}\n" in read(".ci/run")
