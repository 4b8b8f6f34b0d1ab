"""trimem in the real Claude Code (npm ``@anthropic-ai/claude-code``, the version ``.ci/run`` pins),
driven with ``claude -p`` against a fake Messages API on 127.0.0.1 (``tests/claude_code``): set up
as the README says, with trimem registered by its absolute path and its virtualenv off Claude
Code's PATH, every assertion is on what reached the model.

Both trimem and its hooks use the default database of the run's (temporary) home, as a user's
would; only the model cache is shared with the test session, so no run exports the model again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from claude_code.fake_api import FakeMessagesAPI, RecordedRequest  # pytest puts tests/ on sys.path
from claude_code.harness import NO_CLAUDE_REASON, SYSTEM_PATH, ClaudeCode, Run, find_claude

from mcp_server.hooks.block import CLOSE_TAG, OPEN_TAG
from store import Engine
from store.config import load_config

CLAUDE = find_claude()
pytestmark = pytest.mark.skipif(CLAUDE is None, reason=NO_CLAUDE_REASON)

TRIMEM = Path(sys.executable).with_name("trimem")
TEA = "Ana drinks sencha green tea every morning"
CAR = "Ana drives a blue Toyota Corolla"
RELEASE = "The Atlas release is planned for March 3"
PROMPT_CONTEXT = "UserPromptSubmit hook additional context: "
SESSION_CONTEXT = "SessionStart hook additional context: "


@dataclass(frozen=True)
class Setup:
    """A user's machine: Claude Code with trimem registered, and trimem's memories."""

    api: FakeMessagesAPI
    claude: ClaudeCode
    project: Path
    database: Path

    def trimem(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The ``trimem`` command by its absolute path, in Claude Code's environment (no virtualenv on PATH)."""
        return subprocess.run([str(TRIMEM), *args], env=self.claude.env, cwd=self.project, capture_output=True,
                              text=True, timeout=120, check=False)

    def ask(self, prompt: str, *, tools: tuple[str, ...] = ()) -> list[RecordedRequest]:
        """``claude -p PROMPT`` in the project; the requests of its conversation, checked to have
        offered trimem's tools from the first one (trimem was connected before Claude Code went on)."""
        run = self.claude.run_prompt(prompt, cwd=self.project, allowed_tools=tools)
        assert run.returncode == 0, failure(run)
        requests = self.api.conversation(prompt)
        assert requests, failure(run)
        assert "mcp__trimem__search_memory" in requests[0].tool_names, failure(run)
        return requests


def failure(run: Run) -> str:
    return f"claude -p ended {run.returncode}: {run.stderr[-2000:]}\n{run.events[-3:]}"


def seen(request: RecordedRequest) -> str:
    """All the model saw of the turn besides tool results: the prompt, reminders, hook output."""
    return "\n".join(request.turn_texts)


@pytest.fixture
def setup(tmp_path: Path, model_cache: Path) -> Iterator[Setup]:
    home = tmp_path / "home"
    database = home / ".local" / "share" / "trimem" / "memories.db"  # the default under this home
    project = tmp_path / "code" / "atlas"
    project.mkdir(parents=True)
    assert CLAUDE is not None
    with FakeMessagesAPI() as api:
        claude = ClaudeCode.isolated(CLAUDE, home, api.base_url, env={"TRIMEM_MODEL_CACHE": str(model_cache)})
        with Engine(load_config(environ={"TRIMEM_DB_PATH": str(database), "TRIMEM_MODEL_CACHE": str(model_cache)}),
                    create=True) as engine:
            engine.add(TEA, user_id="default")
            engine.add(CAR, user_id="default")
            engine.add(RELEASE, user_id="default", metadata={"project": "atlas"})
        claude.mcp_add("trimem", [str(TRIMEM), "serve"], env={"TRIMEM_MODEL_CACHE": str(model_cache)})
        yield Setup(api, claude, project, database)


def test_the_recall_reaches_the_model_and_uninstall_takes_it_away(setup: Setup) -> None:
    before = setup.claude.config_dir / "settings.json"
    before.write_text('{"model": "opus"}\n')
    installed = setup.trimem("hooks", "install")
    assert installed.returncode == 0, installed.stderr

    [first] = setup.ask("Which tea should I buy for my mornings?")
    text = seen(first)
    assert f"{PROMPT_CONTEXT}{OPEN_TAG}\n" in text and TEA in text
    assert f"{SESSION_CONTEXT}{OPEN_TAG}\n" in text and RELEASE in text  # the project's block at session start
    assert text.count(OPEN_TAG) == text.count(CLOSE_TAG) == 2

    [unrelated] = setup.ask("How do I center a div with CSS grid?")
    prompt_part = seen(unrelated).split(SESSION_CONTEXT)[-1].split(CLOSE_TAG, 1)[-1]
    assert OPEN_TAG not in prompt_part and "UserPromptSubmit" not in prompt_part  # nothing at all, not even a line

    removed = setup.trimem("hooks", "uninstall")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(before.read_text()) == {"model": "opus"}
    [after] = setup.ask("Which tea should I buy for my evenings?")
    assert OPEN_TAG not in seen(after) and "UserPromptSubmit" not in seen(after) and "SessionStart" not in seen(after)


def test_the_command_path_reaches_the_model_without_trimem_on_path(setup: Setup) -> None:
    installed = setup.trimem("--db", str(setup.database), "hooks", "install", "--command")
    assert installed.returncode == 0, installed.stderr
    assert "trimem" not in subprocess.run(["sh", "-c", "command -v trimem || true"], capture_output=True, text=True,
                                          env={"PATH": SYSTEM_PATH}, check=True).stdout
    [first] = setup.ask("Which tea should I buy for my mornings?")
    text = seen(first)
    assert f"{PROMPT_CONTEXT}{OPEN_TAG}\n" in text and TEA in text
    assert f"{SESSION_CONTEXT}{OPEN_TAG}\n" in text and RELEASE in text


def test_the_models_tool_calls_are_answered_lean(setup: Setup) -> None:
    """A search and an add the model makes: what Claude Code forwards (the structured content, as
    compact JSON) stays within the issue's budgets, and the add is stored."""
    prompt = ('What do I drink, and remember my bike. [[call mcp__trimem__search_memory {"query": "Ana"}]] '
              '[[call mcp__trimem__add_memory {"text": "Ana rides a green bike to work"}]]')
    *_, last = setup.ask(prompt, tools=("mcp__trimem",))
    search, add = last.tool_uses
    assert (search["name"], add["name"]) == ("mcp__trimem__search_memory", "mcp__trimem__add_memory")
    found = last.tool_result_content(search["id"])
    added = last.tool_result_content(add["id"])
    assert isinstance(found, str) and isinstance(added, str), (found, added)
    results = json.loads(found)["results"]
    assert TEA in {result["text"] for result in results}
    assert len(found) / len(results) <= 160, found
    [entry] = json.loads(added)["results"]
    named = len(entry.get("may_supersede", []))  # older memories it may update: up to 100 characters each
    assert len(added) <= 150 + 100 * named and entry["event"] == "ADD", added
    listed = setup.trimem("list", "--json")
    assert "Ana rides a green bike to work" in listed.stdout, listed.stderr


def test_one_command_sets_it_all_up(tmp_path: Path, model_cache: Path) -> None:
    """`trimem hooks install --register` on a machine where Claude Code knows no trimem yet: the
    server registered by its absolute path and the hooks installed, so the next prompt's recall
    and the tools reach the model; a second run leaves the registered server alone."""
    home, project = tmp_path / "home", tmp_path / "code" / "atlas"
    project.mkdir(parents=True)
    assert CLAUDE is not None
    with FakeMessagesAPI() as api:
        claude = ClaudeCode.isolated(CLAUDE, home, api.base_url, env={"TRIMEM_MODEL_CACHE": str(model_cache)})
        shell = {**claude.env, "PATH": f"{Path(CLAUDE).parent}:{SYSTEM_PATH}"}  # claude on PATH, no virtualenv
        said = []
        for _ in range(2):
            setup = subprocess.run([str(TRIMEM), "hooks", "install", "--register"], env=shell, capture_output=True,
                                   text=True, timeout=120, check=False)
            assert setup.returncode == 0, setup.stderr
            said.append(setup.stderr.splitlines()[-1])
        assert said[0] == f"registered the MCP server 'trimem' with Claude Code: TRIMEM_MODEL_CACHE={model_cache} {TRIMEM} serve"
        assert said[1].startswith("Claude Code already has an MCP server named 'trimem'; left as it is")
        added = subprocess.run([str(TRIMEM), "add", TEA], env=shell, capture_output=True, text=True, timeout=120,
                               check=False)
        assert added.returncode == 0, added.stderr
        [first] = Setup(api, claude, project, home).ask("Which tea should I buy for my mornings?")
    assert f"{PROMPT_CONTEXT}{OPEN_TAG}\n" in seen(first) and TEA in seen(first)


COLD_RUNS = 20


@pytest.mark.skipif(os.environ.get("TRIMEM_STRESS") != "1", reason="set TRIMEM_STRESS=1 for the 20 cold starts")
def test_no_cold_start_goes_ahead_without_trimem(setup: Setup) -> None:
    """Each ``claude -p`` spawns trimem anew, and Claude Code waits about two seconds for its servers:
    in every run the first request offers trimem's tools and carries both blocks."""
    installed = setup.trimem("hooks", "install")
    assert installed.returncode == 0, installed.stderr
    for run in range(COLD_RUNS):
        [first] = setup.ask(f"Which tea should I buy this week? ({run})")
        assert f"{PROMPT_CONTEXT}{OPEN_TAG}\n" in seen(first) and f"{SESSION_CONTEXT}{OPEN_TAG}\n" in seen(first)
