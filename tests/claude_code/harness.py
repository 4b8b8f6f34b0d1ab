"""Run the real Claude Code CLI (``claude -p``) in a throwaway home against ``FakeMessagesAPI``.
Written against Claude Code 2.1.337 (npm ``@anthropic-ai/claude-code@2.1.337``).

Every run gets its own ``HOME`` and ``CLAUDE_CONFIG_DIR`` (user ``settings.json``,
``.claude.json`` with the user-scope MCP servers, transcripts), the minimal system ``PATH``
with no virtualenv on it (trimem must work when only its absolute path is known), a fake API
key, and ``ANTHROPIC_BASE_URL`` at the fake. Nothing is inherited from the test process: an
MCP server gets its variables from ``mcp_add(env=...)``, a command hook from
``ClaudeCode.isolated(env=...)``.

``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`` stops the calls ``claude -p`` otherwise makes
to api.anthropic.com at start-up; as a safety net the HTTP(S) proxy is a closed local port,
so anything not for 127.0.0.1 fails at once instead of leaving the machine. No onboarding or
trust keys are needed: ``-p`` skips the trust dialog, starts user-scope MCP servers and runs
the user's hooks. ``ENABLE_TOOL_SEARCH=false`` offers MCP tools in ``tools`` directly;
Claude Code's default defers them behind its ``ToolSearch`` tool (pass
``env={"ENABLE_TOOL_SEARCH": "true"}`` for that). Tools run only when allowed: root may not
use ``--dangerously-skip-permissions`` (without ``IS_SANDBOX=1``), so ``run_prompt`` passes
``--allowedTools``; a tool not allowed gets an ``is_error`` result ("Claude requested
permissions to use ..."). ``mcp_tool`` hooks need no permission.

Usage, in a pytest module::

    from claude_code.fake_api import FakeMessagesAPI  # pytest puts tests/ on sys.path
    from claude_code.harness import NO_CLAUDE_REASON, ClaudeCode, find_claude

    CLAUDE = find_claude()
    pytestmark = pytest.mark.skipif(CLAUDE is None, reason=NO_CLAUDE_REASON)

    def test_search_result_reaches_the_model(tmp_path: Path) -> None:
        trimem_env = {"TRIMEM_HOME": str(tmp_path / "data"), "TRIMEM_MODEL_CACHE": ...}
        with FakeMessagesAPI() as api:
            claude = ClaudeCode.isolated(CLAUDE, tmp_path / "home", api.base_url)
            claude.mcp_add("trimem", [sys.prefix + "/bin/trimem", "serve"], env=trimem_env)
            prompt = 'What do I drink? [[call mcp__trimem__search_memory {"query": "tea"}]]'
            run = claude.run_prompt(prompt, cwd=tmp_path, allowed_tools=["mcp__trimem"])
        assert run.returncode == 0, run.stderr
        last = api.conversation(prompt)[-1]
        (call,) = last.tool_uses
        assert "green tea" in last.tool_result_content(call["id"])
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JSON = dict[str, Any]

NO_CLAUDE_REASON = "Claude Code not found: set CLAUDE_CODE_BIN or put `claude` on PATH"

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
"""No virtualenv: what a user's shell has before activating anything."""

DEAD_PROXY = "http://127.0.0.1:9"
"""Nothing listens here: traffic not meant for the fake fails instead of leaving the machine."""

RUN_TIMEOUT = 60.0
"""Seconds a ``claude`` command may take; a run here takes 0.5 s, or about 2.5 with trimem."""

OFFLINE_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "HTTPS_PROXY": DEAD_PROXY,
    "HTTP_PROXY": DEAD_PROXY,
    "NO_PROXY": "127.0.0.1,localhost",
}
"""Keeps a run quiet and local. The first variable alone stops every start-up call to
api.anthropic.com (telemetry, feature flags, update checks); the next three say the same for
readers and other versions."""


def find_claude() -> str | None:
    """The Claude Code binary: ``CLAUDE_CODE_BIN``, else ``claude`` on ``PATH``, else None.
    A ``CLAUDE_CODE_BIN`` is taken as is, so a wrong one fails the tests instead of skipping them."""
    return os.environ.get("CLAUDE_CODE_BIN") or shutil.which("claude")


def isolated_env(home: Path, base_url: str) -> dict[str, str]:
    """The whole environment of a run: nothing is inherited from the test process, so neither
    the developer's Claude Code login nor the test virtualenv leaks in."""
    return {
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "PATH": SYSTEM_PATH,
        "LANG": "C.UTF-8",
        "TMPDIR": str(home / "tmp"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-fake-key",
        "ENABLE_TOOL_SEARCH": "false",
    } | OFFLINE_ENV


@dataclass(frozen=True)
class Run:
    """One finished ``claude -p`` run."""

    returncode: int
    events: list[JSON]
    stderr: str
    seconds: float

    @property
    def result(self) -> JSON | None:
        """The final ``{"type": "result", ...}`` event, None when the run died before it."""
        return next((event for event in reversed(self.events) if event.get("type") == "result"), None)

    def hook_events(self, hook_event: str | None = None) -> list[JSON]:
        """The hook lifecycle events (``hook_started``, ``hook_response``, ...) of the stream,
        only those of ``hook_event`` (e.g. ``"UserPromptSubmit"``) when given."""
        return [
            event
            for event in self.events
            if event.get("type") == "system"
            and str(event.get("subtype", "")).startswith("hook_")
            and hook_event in (None, event.get("hook_event"))
        ]


@dataclass(frozen=True)
class ClaudeCode:
    """The ``claude`` binary bound to one isolated home and environment."""

    binary: str
    home: Path
    env: dict[str, str]

    @classmethod
    def isolated(cls, binary: str, home: Path, base_url: str, env: Mapping[str, str] | None = None) -> ClaudeCode:
        """Make ``home`` (and its config and temp folders) and bind ``binary`` to it;
        ``env`` adds or overrides variables, e.g. ``MCP_TIMEOUT``."""
        environment = isolated_env(home, base_url) | dict(env or {})
        for folder in (home, Path(environment["CLAUDE_CONFIG_DIR"]), Path(environment["TMPDIR"])):
            folder.mkdir(parents=True, exist_ok=True)
        return cls(binary, home, environment)

    @property
    def config_dir(self) -> Path:
        """``CLAUDE_CONFIG_DIR``: ``settings.json``, ``.claude.json``, transcripts."""
        return Path(self.env["CLAUDE_CONFIG_DIR"])

    def write_settings(self, settings: JSON) -> Path:
        """Write the user ``settings.json`` (hooks, permissions) and return its path."""
        path = self.config_dir / "settings.json"
        path.write_text(json.dumps(settings, indent=2))
        return path

    def mcp_add(self, name: str, command: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        """``claude mcp add NAME --scope user [-e K=V ...] -- COMMAND...``; raises on failure.
        ``command[0]`` must be absolute: the run's ``PATH`` has no virtualenv."""
        if not Path(command[0]).is_absolute():
            raise ValueError(f"MCP server command must be an absolute path, not {command[0]!r}")
        options = [f"--env={key}={value}" for key, value in (env or {}).items()]
        completed = self._run(["mcp", "add", name, "--scope", "user", *options, "--", *command], self.home)
        if completed.returncode != 0:
            raise RuntimeError(f"claude mcp add {name} failed ({completed.returncode}): {completed.stderr}")

    def run_prompt(
        self,
        prompt: str,
        cwd: Path,
        allowed_tools: Iterable[str] = (),
        extra_args: Sequence[str] = (),
        timeout: float = RUN_TIMEOUT,
    ) -> Run:
        """``claude -p PROMPT`` with the stream-json output and hook events, the tools in
        ``allowed_tools`` (e.g. ``mcp__trimem`` for all of a server's) allowed without asking;
        raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        allowed = list(allowed_tools)
        args = [
            "-p", prompt,
            "--output-format", "stream-json",
            "--verbose",
            "--include-hook-events",
            *(["--allowedTools", ",".join(allowed)] if allowed else []),
            *extra_args,
        ]
        started = time.monotonic()
        completed = self._run(args, cwd, timeout)
        return Run(completed.returncode, parse_stream(completed.stdout), completed.stderr, time.monotonic() - started)

    def _run(self, args: Sequence[str], cwd: Path, timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, *args],
            cwd=cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def parse_stream(stdout: str) -> list[JSON]:
    """The stream-json events, one JSON object a line; a line that is not one is kept as
    ``{"type": "unparsed", "line": ...}`` so nothing printed is lost."""
    events = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        events.append(event if isinstance(event, dict) else {"type": "unparsed", "line": line})
    return events
