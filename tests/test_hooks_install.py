"""``trimem hooks install`` / ``uninstall`` through the real command line, on settings files as
people have them: other hooks on the same events and others, matchers, other keys, a missing,
empty or unparsable file. trimem's entries are written out here as the shared design spells
them, so a drift in what install writes fails these tests."""

from __future__ import annotations

import copy
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from mcp_server.cli import cli
from mcp_server.hooks.settings import write_settings

RECALL = {"type": "mcp_tool", "server": "trimem", "tool": "recall_for_prompt",
          "input": {"prompt": "${prompt}", "cwd": "${cwd}", "session_id": "${session_id}", "capture": False},
          "timeout": 10}
TRIMEM = str(Path(sys.executable).with_name("trimem"))
"""The trimem that installs the hooks, by its absolute path: Claude Code's PATH seldom has its virtualenv."""
SESSION = {"type": "command", "command": f"{TRIMEM} hook session", "timeout": 15}
PROMPT_COMMAND_CAPTURE = {"type": "command", "command": f"{TRIMEM} hook prompt --capture", "timeout": 10}

THEIRS: dict[str, Any] = {
    "model": "opus",
    "permissions": {"allow": ["Bash(git log:*)"]},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "trimem search --json today", "timeout": 5},
                                        {"type": "command", "command": "date"}]}],
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo hello"}]},
                         {"matcher": "resume", "hooks": [{"type": "mcp_tool", "server": "other", "tool": "recall_for_prompt"}]}],
    },
    "env": {"A": "1"},
}
"""A user's settings: hooks on trimem's events (with matchers, and commands that only look like
trimem's) and on others, and other keys."""


def trimem(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, ["hooks", *args], env=env)


def ok(*args: str, env: dict[str, str] | None = None) -> Result:
    result = trimem(*args, env=env)
    assert result.exit_code == 0, result.output
    return result


def write(path: Path, settings: Any) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=4))
    return path.read_bytes()


def read(path: Path) -> Any:
    return json.loads(path.read_text())


def backup_of(path: Path) -> Path:
    return path.with_name(path.name + ".trimem-backup")


@pytest.fixture(autouse=True)
def no_trimem_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hooks carry the installing shell's TRIMEM_* variables: here, a shell that sets none."""
    for name in [name for name in os.environ if name.startswith("TRIMEM_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def settings(tmp_path: Path) -> Path:
    """A settings file holding ``THEIRS``, readable by its owner only."""
    path = tmp_path / "claude" / "settings.json"
    write(path, THEIRS)
    path.chmod(0o600)
    return path


def test_install_appends_trimems_hooks_and_keeps_everything_else(settings: Path) -> None:
    original = settings.read_bytes()
    result = ok("install", "--settings", str(settings))
    expected = copy.deepcopy(THEIRS)
    expected["hooks"]["UserPromptSubmit"].append({"hooks": [RECALL]})
    expected["hooks"]["SessionStart"].append({"hooks": [SESSION]})
    installed = read(settings)
    assert installed == expected
    assert list(installed) == list(THEIRS) and list(installed["hooks"]) == list(THEIRS["hooks"])  # order kept
    assert result.stderr.splitlines() == [
        "UserPromptSubmit: added the tool recall_for_prompt of MCP server 'trimem' (no capture)",
        f"SessionStart: added the command `{TRIMEM} hook session`",
        f"wrote {settings}; the file as it was is in {backup_of(settings)}",
    ]
    assert result.stdout == ""
    assert backup_of(settings).read_bytes() == original
    assert stat.S_IMODE(settings.stat().st_mode) == 0o600
    assert sorted(path.name for path in settings.parent.iterdir()) == ["settings.json", "settings.json.trimem-backup"]


def test_a_second_install_changes_nothing(settings: Path) -> None:
    original = settings.read_bytes()
    ok("install", "--settings", str(settings))
    installed = settings.read_bytes()
    again = ok("install", "--settings", str(settings))
    assert again.stderr == f"trimem's hooks are already in {settings} as asked; nothing changed\n"
    assert settings.read_bytes() == installed
    assert backup_of(settings).read_bytes() == original  # no write, so no new backup


def test_install_with_other_options_replaces_trimems_hook_where_it_is(settings: Path) -> None:
    ok("install", "--settings", str(settings))
    result = ok("install", "--settings", str(settings), "--command", "--capture")
    assert result.stderr.splitlines()[0] == (
        f"UserPromptSubmit: replaced trimem's hook with the command `{TRIMEM} hook prompt --capture`")
    assert len(result.stderr.splitlines()) == 2
    prompt_groups = read(settings)["hooks"]["UserPromptSubmit"]
    assert prompt_groups == [*THEIRS["hooks"]["UserPromptSubmit"], {"hooks": [PROMPT_COMMAND_CAPTURE]}]
    back = ok("install", "--settings", str(settings), "--capture")
    assert read(settings)["hooks"]["UserPromptSubmit"][-1] == {"hooks": [{**RECALL, "input": {**RECALL["input"],
                                                                                              "capture": True}}]}
    assert "capturing prompts" in back.stderr


def test_uninstall_gives_back_the_settings_as_they_were(settings: Path) -> None:
    ok("install", "--settings", str(settings))
    ok("install", "--settings", str(settings), "--command", "--capture")
    result = ok("uninstall", "--settings", str(settings))
    assert read(settings) == THEIRS
    assert result.stderr.splitlines()[:2] == [
        f"UserPromptSubmit: removed the command `{TRIMEM} hook prompt --capture`",
        f"SessionStart: removed the command `{TRIMEM} hook session`",
    ]
    nothing = ok("uninstall", "--settings", str(settings))
    assert nothing.stderr == f"no hooks of trimem's in {settings}; nothing changed\n"


def test_uninstall_keeps_a_group_that_still_holds_other_hooks(settings: Path) -> None:
    """A hook of trimem's put by hand into a group of the user's goes; the group stays."""
    by_hand = copy.deepcopy(THEIRS)
    by_hand["hooks"]["SessionStart"][0]["hooks"].insert(0, SESSION)
    write(settings, by_hand)
    ok("install", "--settings", str(settings))
    installed = read(settings)
    assert installed["hooks"]["SessionStart"] == by_hand["hooks"]["SessionStart"]  # found where it was
    assert installed["hooks"]["UserPromptSubmit"][-1] == {"hooks": [RECALL]}
    ok("uninstall", "--settings", str(settings))
    assert read(settings) == THEIRS


@pytest.mark.parametrize("command", ["trimem hook session", "'/opt/old venv/bin/trimem' hook session",
                                     "/usr/bin/python3 -m mcp_server --db /x/m.db hook session"])
def test_a_hook_fixed_by_hand_is_recognised_by_what_it_runs(settings: Path, command: str) -> None:
    """An entry of trimem's whose path or options the user changed is replaced where it is, not
    doubled, and uninstall takes it out; a command that runs trimem for something else stays."""
    write(settings, {"hooks": {"SessionStart": [{"matcher": "startup", "hooks": [
        {"type": "command", "command": command}, {"type": "command", "command": "trimem search hook session"}]}]}})
    result = ok("install", "--settings", str(settings))
    assert f"SessionStart: replaced trimem's hook with the command `{TRIMEM} hook session`" in result.stderr
    assert read(settings)["hooks"]["SessionStart"] == [{"matcher": "startup", "hooks": [
        SESSION, {"type": "command", "command": "trimem search hook session"}]}]
    ok("uninstall", "--settings", str(settings))
    assert read(settings)["hooks"]["SessionStart"] == [{"matcher": "startup", "hooks": [
        {"type": "command", "command": "trimem search hook session"}]}]


def test_the_hooks_run_this_trimem_with_its_configuration_and_database(settings: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """--config and --db given before `hooks` go into the commands, absolute, so the hooks read the
    memories the server serves from whatever folder Claude Code runs them in."""
    (tmp_path / "my.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["--config", "my.toml", "--db", "mem.db", "hooks", "install", "--settings",
                                      str(settings), "--command"])
    assert result.exit_code == 0, result.output
    handlers = [group["hooks"][-1] for group in (read(settings)["hooks"][event][-1]
                                                 for event in ("UserPromptSubmit", "SessionStart"))]
    options = f"--config {tmp_path / 'my.toml'} --db {tmp_path / 'mem.db'}"
    assert [handler["command"] for handler in handlers] == [f"{TRIMEM} {options} hook prompt",
                                                             f"{TRIMEM} {options} hook session"]


def test_the_hooks_and_the_server_carry_the_installing_shells_trimem_variables(settings: Path) -> None:
    """Claude Code gives a hook none of the server's env: the TRIMEM_* variables set where install
    runs go into the hook commands (and the server --register adds), so both read the same user."""
    env = {"TRIMEM_USER_ID": "ana", "TRIMEM_HOME": "/srv/my trimem", "OTHER": "x"}
    shown = ok("install", "--settings", str(settings), "--command", "--register", "--print", env=env)
    variables = "TRIMEM_HOME='/srv/my trimem' TRIMEM_USER_ID=ana"
    assert json.loads(shown.stdout)["hooks"]["SessionStart"][-1] == {"hooks": [
        {**SESSION, "command": f"{variables} {TRIMEM} hook session"}]}
    entry = {"type": "stdio", "command": TRIMEM, "args": ["serve"],
             "env": {"TRIMEM_HOME": "/srv/my trimem", "TRIMEM_USER_ID": "ana"}}
    assert f"would register: claude mcp add-json trimem '{json.dumps(entry)}' --scope user" in shown.stderr
    ok("install", "--settings", str(settings), "--command", env=env)
    ok("install", "--settings", str(settings))  # without them: the same hooks, replaced where they are
    assert read(settings)["hooks"]["SessionStart"] == [*THEIRS["hooks"]["SessionStart"], {"hooks": [SESSION]}]


def test_a_hook_is_trimems_only_on_the_named_server(settings: Path) -> None:
    write(settings, {})
    ok("install", "--settings", str(settings), "--server", "memory")
    assert read(settings)["hooks"]["UserPromptSubmit"] == [{"hooks": [{**RECALL, "server": "memory"}]}]
    ok("uninstall", "--settings", str(settings))  # the server trimem: the recall on 'memory' is not its
    assert read(settings) == {"hooks": {"UserPromptSubmit": [{"hooks": [{**RECALL, "server": "memory"}]}]}}
    ok("uninstall", "--settings", str(settings), "--server", "memory")
    assert read(settings) == {}


@pytest.mark.parametrize("content", [None, "", " \n"], ids=["missing", "empty", "blank"])
def test_a_missing_or_empty_file_is_settings_without_hooks(tmp_path: Path, content: str | None) -> None:
    settings = tmp_path / "new" / "folder" / "settings.json"
    if content is not None:
        settings.parent.mkdir(parents=True)
        settings.write_text(content)
    result = ok("install", "--settings", str(settings))
    assert read(settings) == {"hooks": {"UserPromptSubmit": [{"hooks": [RECALL]}], "SessionStart": [{"hooks": [SESSION]}]}}
    assert backup_of(settings).exists() == (content is not None)
    assert result.stderr.splitlines()[-1].startswith(f"wrote {settings}")
    ok("uninstall", "--settings", str(settings))
    assert read(settings) == {}


@pytest.mark.parametrize(("content", "message"), [
    ('{"model": "opus",}', " is not valid JSON (Expecting property name enclosed in double quotes, line 1 column 18)"),
    ('// comment\n{}', " is not valid JSON (Expecting value, line 1 column 1)"),
    ('["hooks"]', ": the file is a list, where Claude Code expects an object"),
    ('{"hooks": []}', ": 'hooks' is a list, where Claude Code expects an object"),
    ('{"hooks": {"Stop": {"hooks": []}}}', ": hooks.Stop is an object, where Claude Code expects a list"),
    ('{"hooks": {"SessionStart": ["trimem hook session"]}}',
     ": hooks.SessionStart[0] is a string, where Claude Code expects an object"),
    ('{"hooks": {"UserPromptSubmit": [{"hooks": [null]}]}}',
     ": hooks.UserPromptSubmit[0].hooks[0] is null, where Claude Code expects an object"),
    # what could not be written back as it was: refused when read, before anything is written
    ('{"env": {"HOME": "/home/\\ud800"}}', ": env.HOME holds a lone surrogate (\\ud800), which no UTF-8 file can hold"),
    ('{"env": {"A\\udc80": "x"}}', ': the key env["A\\udc80"] holds a lone surrogate (\\udc80)'),
    ('{"cleanupPeriodDays": 1e400}', ": cleanupPeriodDays is 1e400, which trimem cannot write back as a JSON number"),
    ('{"hooks": {"Stop": [{"hooks": [{"timeout": NaN}]}]}}', ": hooks.Stop[0].hooks[0].timeout is NaN, which"),
    ('{"x": [-Infinity]}', ": x[0] is -Infinity, which trimem cannot write back as a JSON number"),
    pytest.param('{"n": ' + "9" * 5000 + "}", ": n is " + "9" * 80 + "…, which trimem cannot write back as a JSON number",
                 id="huge-integer"),
    ('{"model": "opus", "model": "sonnet"}', ': the file holds the key "model" twice, and only the last would be kept'),
    pytest.param("[" * 100_000, " nests deeper than trimem reads", id="deep"),
])
@pytest.mark.parametrize("command", ["install", "uninstall"])
def test_a_file_it_cannot_parse_is_refused_and_left_alone(tmp_path: Path, content: str, message: str,
                                                          command: str) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text(content)
    result = trimem(command, "--settings", str(settings))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: {settings}{message}")
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.output
    assert settings.read_text() == content
    assert [path.name for path in tmp_path.iterdir()] == ["settings.json"]


def test_a_failed_write_leaves_the_file_as_it_was_and_nothing_beside_it(settings: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever stops the write half-way (here the disk, as os.fsync fails with an error trimem
    does not expect), the temporary file goes and the settings are untouched."""
    original = settings.read_bytes()

    def disk_gone(descriptor: int) -> None:
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(os, "fsync", disk_gone)
    with pytest.raises(RuntimeError, match="the disk went away"):
        write_settings(settings, {"model": "sonnet"})
    assert settings.read_bytes() == original
    assert [path.name for path in settings.parent.iterdir()] == ["settings.json"]


def test_hooks_that_cannot_be_written_are_refused_and_leave_the_file_as_it_was(settings: Path) -> None:
    """A TRIMEM_* variable holding a byte that is not UTF-8 (Python gives it as a lone surrogate)
    goes into the hook commands, which no settings file can hold: a one-line refusal."""
    original = settings.read_bytes()
    result = trimem("install", "--settings", str(settings), "--command", env={"TRIMEM_HOME": "/srv/caf\udce9"})
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith(f"Error: cannot write {settings}: 'utf-8' codec can't encode")
    assert "Traceback" not in result.output
    assert settings.read_bytes() == original
    assert [path.name for path in settings.parent.iterdir()] == ["settings.json"]


def test_print_shows_the_result_and_writes_nothing(settings: Path, tmp_path: Path) -> None:
    original = settings.read_bytes()
    shown = ok("install", "--settings", str(settings), "--print")
    expected = copy.deepcopy(THEIRS)
    expected["hooks"]["UserPromptSubmit"].append({"hooks": [RECALL]})
    expected["hooks"]["SessionStart"].append({"hooks": [SESSION]})
    assert json.loads(shown.stdout) == expected
    assert shown.stderr.splitlines()[-1] == f"nothing written to {settings} (--print)"
    assert settings.read_bytes() == original and not backup_of(settings).exists()
    missing = tmp_path / "nowhere" / "settings.json"
    ok("install", "--settings", str(missing), "--print")
    assert not missing.parent.exists()


def test_project_settings_are_in_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project, config_dir = tmp_path / "project", tmp_path / "claude-config"
    project.mkdir()
    monkeypatch.chdir(project)
    ok("install", "--project", env={"CLAUDE_CONFIG_DIR": str(config_dir)})
    assert read(project / ".claude" / "settings.json")["hooks"]["SessionStart"] == [{"hooks": [SESSION]}]
    assert not config_dir.exists()
    refused = trimem("install", "--project", "--settings", str(tmp_path / "x.json"))
    assert refused.exit_code == 2 and "choose --project or --settings, not both" in refused.stderr


def test_user_settings_follow_claude_config_dir_else_home(tmp_path: Path) -> None:
    config_dir, home = tmp_path / "claude-config", tmp_path / "home"
    ok("install", env={"CLAUDE_CONFIG_DIR": str(config_dir), "HOME": str(home)})
    assert read(config_dir / "settings.json")["hooks"]["UserPromptSubmit"] == [{"hooks": [RECALL]}]
    assert not home.exists()
    ok("install", env={"CLAUDE_CONFIG_DIR": "", "HOME": str(home)})
    assert read(home / ".claude" / "settings.json")["hooks"]["UserPromptSubmit"] == [{"hooks": [RECALL]}]


def test_a_linked_settings_file_stays_a_link(settings: Path, tmp_path: Path) -> None:
    """Settings kept in a dotfiles folder and linked into place: the link's target is changed."""
    link = tmp_path / "link" / "settings.json"
    link.parent.mkdir()
    os.symlink(settings, link)
    ok("install", "--settings", str(link))
    assert link.is_symlink() and read(settings)["hooks"]["SessionStart"][-1] == {"hooks": [SESSION]}


def test_the_file_keeps_its_permissions_whatever_the_umask(settings: Path) -> None:
    settings.chmod(0o644)
    umask = os.umask(0o077)
    try:
        ok("install", "--settings", str(settings))
    finally:
        os.umask(umask)
    assert stat.S_IMODE(settings.stat().st_mode) == 0o644


def test_register_without_claude_on_path_says_how_to_register(settings: Path) -> None:
    """The hooks are installed; the server cannot be registered without Claude Code's command, and
    the refusal gives the command to run."""
    result = trimem("install", "--settings", str(settings), "--register", env={"PATH": str(settings.parent)})
    assert result.exit_code == 1
    entry = json.dumps({"type": "stdio", "command": TRIMEM, "args": ["serve"]})
    assert result.stderr.splitlines()[-1] == ("Error: cannot register the MCP server: no `claude` on PATH; register it "
                                              f"yourself with claude mcp add-json trimem '{entry}' --scope user")
    assert read(settings)["hooks"]["SessionStart"][-1] == {"hooks": [SESSION]}
    shown = ok("install", "--settings", str(settings), "--register", "--print", env={"PATH": str(settings.parent)})
    assert f"would register: claude mcp add-json trimem '{entry}' --scope user" in shown.stderr
