"""Claude Code's hooks on both paths: the documented payloads replayed through the real
``trimem hook`` command (a subprocess, JSON on stdin) and through a real MCP client calling
``recall_for_prompt`` with the input an ``mcp_tool`` hook sends, the hook's fields filled in."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_client import call  # pytest puts tests/ on sys.path (prepend import mode)
from test_service import connected, served, structured

from mcp_server.hooks.block import CLOSE_TAG, OPEN_TAG, PROMPT_HEADING, render, session_heading
from mcp_server.hooks.capture import SOURCE
from mcp_server.hooks.events import on_prompt, on_session
from mcp_server.hooks.project import Project, project_of
from mcp_server.hooks.settings import PROMPT_EVENT, HookChoice
from store import Config, Engine
from store.records import Memory

ROOT = Path(__file__).resolve().parents[1]
TRIMEM = Path(sys.executable).with_name("trimem")

SESSION = "5f0c8a8e-2d1b-4c4e-9a55-0b7e0c1d2e3f"
CWD = "/home/ana/code/atlas"
"""A folder in no repository (none on this machine): the project is the folder itself."""
CAPTURED_IN_ATLAS = {"project": "atlas", "project_path": CWD, "source": SOURCE}
USER = "default"
"""The configured default user, whose memories the hooks recall and capture."""


def prompt_payload(prompt: str) -> dict[str, str]:
    """A UserPromptSubmit hook's input, as Claude Code documents it."""
    return {"session_id": SESSION, "transcript_path": f"/home/ana/.claude/projects/atlas/{SESSION}.jsonl",
            "cwd": CWD, "permission_mode": "default", "hook_event_name": "UserPromptSubmit", "prompt": prompt}


SESSION_START = {"session_id": SESSION, "transcript_path": f"/home/ana/.claude/projects/atlas/{SESSION}.jsonl",
                 "cwd": CWD, "hook_event_name": "SessionStart", "source": "startup"}

MCP_TOOL_INPUT = HookChoice().handlers()[PROMPT_EVENT]["input"]
"""The ``input`` of the mcp_tool hook ``trimem hooks install`` writes (``capture`` true with --capture)."""


def substituted(template: dict[str, Any], payload: dict[str, str]) -> dict[str, Any]:
    """``template`` with each ``${field}`` replaced by the hook input's field, as Claude Code fills
    an mcp_tool hook's input; values that are not strings pass as they are."""
    return {key: re.sub(r"\$\{(\w+)\}", lambda m: payload[m.group(1)], value) if isinstance(value, str) else value
            for key, value in template.items()}


def hook(database: str, *args: str, stdin: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """``trimem --db DATABASE hook ARGS`` as Claude Code runs it, the payload on stdin."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           **settings}
    return subprocess.run([str(TRIMEM), "--db", database, "hook", *args], input=stdin, capture_output=True,
                          text=True, timeout=120, env=env, check=False)


def quiet_failure(result: subprocess.CompletedProcess[str]) -> str:
    """A hook that failed without breaking the session: exit 0, nothing injected, one line of log."""
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def injected(stdout: str, event: str) -> str:
    """The block a command hook's output injects: hook JSON naming ``event``, or nothing at all."""
    if not stdout:
        return ""
    output = json.loads(stdout)
    assert list(output) == ["hookSpecificOutput"] and output["hookSpecificOutput"]["hookEventName"] == event
    return output["hookSpecificOutput"]["additionalContext"]


def fill(engine: Engine) -> None:
    engine.add("Ana works as a nurse at Santa Maria hospital", metadata={"category": "work"}, user_id=USER)
    engine.add("The Atlas release is planned for March 3", metadata={"project": "atlas"}, user_id=USER)
    engine.add("Tomás is learning to play the cello", user_id=USER)


# --- the command path -------------------------------------------------------------------------------------------


def test_prompt_hook_injects_the_relevant_memory_and_nothing_for_an_unrelated_prompt(engine: Engine,
                                                                                      db_arg: str) -> None:
    fill(engine)
    relevant = hook(db_arg, "prompt", stdin=json.dumps(prompt_payload("Where does Ana work these days?")))
    assert relevant.returncode == 0, relevant.stderr
    lines = injected(relevant.stdout, "UserPromptSubmit").splitlines()
    assert lines[:2] == [OPEN_TAG, PROMPT_HEADING] and lines[-1] == CLOSE_TAG
    assert any(line.endswith("Ana works as a nurse at Santa Maria hospital") for line in lines[2:-1])
    assert not any("cello" in line for line in lines)

    unrelated = hook(db_arg, "prompt", stdin=json.dumps(prompt_payload("How do I center a div in CSS grid?")))
    assert (unrelated.returncode, unrelated.stdout) == (0, "")
    assert engine.list(user_id=USER, run_id=SESSION) == []  # no --capture: nothing stored


def test_session_hook_injects_the_projects_memories(engine: Engine, db_arg: str) -> None:
    fill(engine)
    started = hook(db_arg, "session", stdin=json.dumps(SESSION_START))
    assert started.returncode == 0, started.stderr
    block = injected(started.stdout, "SessionStart")
    assert "atlas" in block.splitlines()[1]
    assert "The Atlas release is planned for March 3" in block
    assert "nurse" not in block and "cello" not in block

    elsewhere = hook(db_arg, "session", stdin=json.dumps({**SESSION_START, "cwd": "/home/ana/code/gardening"}))
    assert (elsewhere.returncode, elsewhere.stdout) == (0, "")


def test_prompt_hook_captures_the_prompt_without_its_private_part(engine: Engine, db_arg: str) -> None:
    prompt = "We decided to ship Atlas on Postgres 17 <private>the staging password is hunter2</private> this week"
    captured = hook(db_arg, "prompt", "--capture", stdin=json.dumps(prompt_payload(prompt)))
    assert captured.returncode == 0, captured.stderr
    [memory] = engine.list(user_id=USER, run_id=SESSION)
    assert memory.text == "We decided to ship Atlas on Postgres 17  this week"
    assert (memory.user_id, memory.metadata) == (USER, CAPTURED_IN_ATLAS)


@pytest.mark.only_on("sqlite")
@pytest.mark.parametrize("stdin", ["not json", "[1, 2]", '{"prompt": 42}'])
def test_bad_input_breaks_nothing(engine: Engine, db_arg: str, stdin: str) -> None:
    assert "trimem hook: the hook's input" in quiet_failure(hook(db_arg, "prompt", stdin=stdin))


def test_a_bad_setting_breaks_nothing(tmp_path: Path) -> None:
    payload = json.dumps(prompt_payload("Where does Ana work?"))
    line = quiet_failure(hook(str(tmp_path / "m.db"), "prompt", stdin=payload, TRIMEM_RECALL_TOP_K="many"))
    assert line.startswith("trimem hook: ") and line.endswith("; nothing injected")


def test_a_missing_or_unwritable_database_breaks_nothing(tmp_path: Path) -> None:
    missing = quiet_failure(hook(str(tmp_path / "none.db"), "prompt", stdin=json.dumps(prompt_payload("Hi there"))))
    assert "no database" in missing
    assert not (tmp_path / "none.db").exists()  # recall alone creates nothing
    unwritable = tmp_path / "a-file"
    unwritable.write_text("")
    payload = json.dumps(prompt_payload("Remember that the Atlas demo is on Friday"))
    assert quiet_failure(hook(str(unwritable / "memories.db"), "prompt", "--capture", stdin=payload))


def test_work_past_the_deadline_is_given_up(tmp_path: Path) -> None:
    """stdin never ends, as when a host keeps it open: the hook still ends in time, saying so."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "TRIMEM_DEADLINE_SECONDS": "1"}
    with subprocess.Popen([str(TRIMEM), "--db", str(tmp_path / "m.db"), "hook", "prompt"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as running:
        running.wait(timeout=60)  # stdin stays open
        out, err = running.stdout.read(), running.stderr.read()
    assert running.returncode == 0
    assert out == ""
    assert err.strip().splitlines() == ["trimem hook: gave up after 1 s (hooks.deadline_seconds); nothing injected"]


# --- the mcp_tool path ------------------------------------------------------------------------------------------


def block_of(output: dict[str, Any]) -> str:
    """The block hook JSON injects before a prompt; ``""`` for ``{}``, which injects nothing at all."""
    if output == {}:
        return ""
    assert list(output) == ["hookSpecificOutput"] and output["hookSpecificOutput"]["hookEventName"] == PROMPT_EVENT
    return output["hookSpecificOutput"]["additionalContext"]


async def recall(client: Client, prompt: str, *, capture: bool = False) -> str:
    """The call an mcp_tool hook makes for ``prompt``, and the block it injects: Claude Code reads the
    tool's text as hook JSON; the structured content is the same object."""
    arguments = substituted({**MCP_TOOL_INPUT, "capture": capture}, prompt_payload(prompt))
    result = await client.call_tool("recall_for_prompt", arguments)
    assert not result.is_error, result.content[0].text
    [content] = result.content
    assert json.loads(content.text) == result.structured_content
    return block_of(result.structured_content)


@pytest.mark.anyio
async def test_the_tool_injects_the_relevant_memory_and_nothing_for_an_unrelated_prompt(client: Client) -> None:
    added = await call(client, "add_memory", text="Ana works as a nurse at Santa Maria hospital")
    memory_id = added["results"][0]["id"]
    await call(client, "add_memory", text="Tomás is learning to play the cello")

    block = await recall(client, "Where does Ana work these days?")
    assert block.startswith(f"{OPEN_TAG}\n{PROMPT_HEADING}\n- {memory_id} ") and block.endswith(CLOSE_TAG)
    assert "cello" not in block

    assert await recall(client, "How do I center a div in CSS grid?") == ""
    assert (await call(client, "list_memories", run_id=SESSION))["memories"] == []  # no capture asked


@pytest.mark.anyio
async def test_the_tool_captures_only_when_asked_and_only_what_may_be_kept(client: Client) -> None:
    def stored() -> Any:
        return call(client, "list_memories", run_id=SESSION)

    await recall(client, "Remember that the Atlas demo moved to Friday")
    assert (await stored())["memories"] == []  # capture off: nothing stored

    injected = f"{OPEN_TAG}\n{PROMPT_HEADING}\n- 2bc388d0 2026-12-03 Ana works as a nurse\n{CLOSE_TAG}"
    prompt = f"{injected}\nThe Atlas demo moved to Friday <private>my token is tm_secret</private>"
    await recall(client, prompt, capture=True)
    [memory] = (await stored())["memories"]
    assert memory["text"] == "The Atlas demo moved to Friday"
    assert memory["metadata"] == CAPTURED_IN_ATLAS

    await recall(client, "The Atlas demo moved to Friday", capture=True)  # the engine's DUPLICATE
    for trivial in ("yes, go on", "/compact", "/review the Atlas pull request please", "<private>all of it</private>"):
        await recall(client, trivial, capture=True)
    assert (await stored())["memories"] == [memory]


@pytest.mark.anyio
async def test_the_tool_recalls_before_it_captures(client: Client) -> None:
    """A prompt never recalls itself: the first time it is said, nothing is there to recall."""
    assert await recall(client, "My sister Inês lives in Coimbra and teaches chemistry", capture=True) == ""
    [memory] = (await call(client, "list_memories", run_id=SESSION))["memories"]
    assert memory["text"] == "My sister Inês lives in Coimbra and teaches chemistry"


@pytest.mark.anyio
async def test_the_block_never_exceeds_max_block_chars(connect: Callable[..., Any], config: Config) -> None:
    small = config.replace("hooks", max_block_chars=400, recall_top_k=20)
    async with connect(small) as client:
        for city in ("Lisbon", "Porto", "Braga", "Coimbra", "Faro", "Évora", "Aveiro", "Viseu"):
            await call(client, "add_memory", text=f"Ana visited {city} last spring and loved the food in {city}")
        block = await recall(client, "Which cities did Ana visit last spring?")
    assert 0 < len(block) <= 400
    lines = block.splitlines()
    assert lines[:2] == [OPEN_TAG, PROMPT_HEADING] and lines[-1] == CLOSE_TAG  # whole lines: tags and heading
    assert 1 < len(lines) - 3 < 8


@pytest.mark.anyio
async def test_a_tool_call_without_a_database_injects_nothing(connect: Callable[..., Any], config: Config,
                                                            tmp_path: Path) -> None:
    unopenable = tmp_path / "a-file"
    unopenable.write_text("")
    async with connect(config.using(str(unopenable / "memories.db"))) as client:
        assert await recall(client, "Where does Ana work?", capture=True) == ""


# --- the block --------------------------------------------------------------------------------------------------


def memory(text: str, number: int) -> Memory:
    return Memory(f"{number:08x}-0000-4000-8000-000000000000", text, "default", None, None, None, None, {},
                  "2026-12-03T10:00:00+00:00", "2026-12-03T10:00:00+00:00", None)


def test_the_block_holds_whole_lines_and_a_memory_can_neither_close_nor_open_one() -> None:
    """Tags in a memory are shown as text (tests/test_hook_texts.py: whatever a memory holds)."""
    memories = [memory("x" * 300, 1), memory(f"line one\nline two {CLOSE_TAG} {OPEN_TAG}", 2), memory("short", 3)]
    block = render(memories, PROMPT_HEADING, 250)
    assert len(block.text) <= 250
    assert block.text.splitlines() == [
        OPEN_TAG, PROMPT_HEADING, "- 00000002 2026-12-03 line one line two &lt;/trimem-memories&gt; &lt;trimem-memories&gt;",
        "- 00000003 2026-12-03 short", CLOSE_TAG]
    assert block.memory_ids == (memories[1].id, memories[2].id)
    assert render([memory("x" * 300, 1)], PROMPT_HEADING, 250).text == ""



# --- the project --------------------------------------------------------------------------------------------------


def test_a_project_is_its_repository_else_its_folder(tmp_path: Path) -> None:
    repository, worktree, plain = tmp_path / "clientA" / "backend", tmp_path / "feature", tmp_path / "notes"
    (repository / ".git").mkdir(parents=True)
    (repository / "src" / "api").mkdir(parents=True)
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: /elsewhere/.git/worktrees/feature\n")  # a worktree's .git is a file
    assert project_of(str(repository / "src" / "api")) == Project("backend", str(repository))
    assert project_of(f"{repository}/src/../src/api/") == Project("backend", str(repository))
    assert project_of(str(worktree)) == Project("feature", str(worktree))
    assert project_of(str(plain / "drafts")) == Project("drafts", str(plain / "drafts"))
    assert project_of("/") is None and project_of("relative/backend") is None and project_of(None) is None


def test_two_folders_of_one_name_are_two_projects(engine: Engine, config: Config, tmp_path: Path) -> None:
    """clientA/backend (a repository, the session in a subfolder) and clientB/backend (a plain
    folder): a prompt captured in one is not recalled at the other's session start. A memory
    captured before trimem kept the path has only the name, and is recalled in both."""
    a_root, b_folder = tmp_path / "clientA" / "backend", tmp_path / "clientB" / "backend"
    (a_root / ".git").mkdir(parents=True)
    (a_root / "src" / "api").mkdir(parents=True)
    b_folder.mkdir(parents=True)
    scope = {"user_id": USER}

    in_a = {a_root: "Our backend service deploys to Fly.io every Friday afternoon",
            a_root / "src" / "api": "The API of client A answers in JSON:API format, paginated"}
    for cwd, prompt in in_a.items():
        on_prompt(engine, config, prompt, cwd=str(cwd), session_id="A", keep=True, scope=scope)
    captured = engine.list(user_id=USER, run_id="A")
    assert {memory.text for memory in captured} == set(in_a.values())
    assert [memory.metadata for memory in captured] == [
        {"project": "backend", "project_path": str(a_root), "source": SOURCE}] * 2
    legacy = "Deploys need two approvals from the platform team"  # not found by the name: listed as recent or not at all
    engine.add(legacy, metadata={"project": "backend", "source": SOURCE}, user_id=USER)

    started_in_b = on_session(engine, config, cwd=str(b_folder), scope=scope).text.splitlines()
    assert started_in_b[1] == session_heading("backend")
    assert any(line.endswith(legacy) for line in started_in_b)
    assert not any("Fly.io" in line or "JSON:API" in line for line in started_in_b)

    started_in_a = on_session(engine, config, cwd=str(a_root / "docs"), scope=scope).text
    assert all(prompt in started_in_a for prompt in in_a.values())
    assert legacy in started_in_a


def test_capture_redacts_secrets_unless_told_not_to(engine: Engine, config: Config) -> None:
    token = "gh" + "p_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"  # put together: no scanner takes it for a leak
    prompt = f"Deploy the Atlas staging with GITHUB_TOKEN={token} and password=hunter2"
    scope = {"user_id": USER}
    on_prompt(engine, config, prompt, cwd=CWD, session_id="redacted", keep=True, scope=scope)
    [stored] = engine.list(user_id=USER, run_id="redacted")
    assert stored.text == ("Deploy the Atlas staging with GITHUB_TOKEN=[redacted: github token] and "
                           "password=[redacted: secret]")
    verbatim = config.replace("hooks", redact_secrets=False)
    on_prompt(engine, verbatim, prompt, cwd=CWD, session_id="verbatim", keep=True, scope=scope)
    assert [memory.text for memory in engine.list(user_id=USER, run_id="verbatim")] == [prompt]


def test_over_the_service_the_hook_acts_in_its_tokens_scope(
    config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HTTP with tokens, as a product would run it: the hook's input names no user, so the
    token's scope decides whose memories are recalled and where the prompt is captured."""
    alice, bob = tokens(user_id="alice", name="alice"), tokens(user_id="bob", name="bob")

    async def scenario(url: str) -> None:
        async with connected(url, alice) as as_alice, connected(url, bob) as as_bob:
            added = structured(await as_alice.call_tool("add_memory", {"text": "Alice's flight to Oslo leaves at 7"}))
            memory_id = added["results"][0]["id"]
            prompt = prompt_payload("When does my flight to Oslo leave?")
            arguments = substituted({**MCP_TOOL_INPUT, "capture": True}, prompt)
            found = block_of(structured(await as_alice.call_tool("recall_for_prompt", arguments)))
            assert f"\n- {memory_id} " in found
            kept = structured(await as_alice.call_tool("list_memories", {"run_id": SESSION}))
            assert [m["text"] for m in kept["memories"]] == ["When does my flight to Oslo leave?"]

            nothing = structured(await as_bob.call_tool("recall_for_prompt", substituted(MCP_TOOL_INPUT, prompt)))
            assert nothing == {}
            assert structured(await as_bob.call_tool("list_memories", {"run_id": SESSION}))["memories"] == []

    with served(config, log, monkeypatch) as url:
        anyio.run(scenario, url)
    assert "Traceback" not in log.read_text()
