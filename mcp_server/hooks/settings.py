"""trimem's hooks in Claude Code's settings: which handlers are trimem's, put in and taken out.

Claude Code reads hooks from a settings file's ``hooks`` key: for each event, a list of matcher
groups, each with its list of handlers. trimem adds one handler to ``UserPromptSubmit`` (recall,
and capture when asked, before each prompt) and one to ``SessionStart`` (recall at session
start), each in a group of its own. A command is written with the absolute path of the
``trimem`` that installs it (``trimem_command``), so it runs whether or not that virtualenv is on
Claude Code's PATH. trimem recognises its handlers by what they run, the ``recall_for_prompt``
tool on the named MCP server or a ``trimem hook`` command by any path (``runs_trimem_hook``), so a
second install replaces them where they are, one the user fixed by hand included, and an
uninstall takes out exactly them.
Everything else in the file (other hooks, their order, other keys) is left as it was.

This module knows no Click: ``mcp_server/cli/hooks.py`` reads the options and prints what changed.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import shlex
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Literal

from store.config import ENV_PREFIX
from store.errors import SHOWN_CHARS

RECALL_TOOL = "recall_for_prompt"
"""The MCP tool a ``UserPromptSubmit`` hook calls on the mcp_tool path."""
HOOK_GROUP = "hook"
"""The command path: ``trimem hook prompt`` and ``trimem hook session``."""
HOOK_COMMANDS = ("prompt", "session")
DEFAULT_SERVER = "trimem"
"""The trimem MCP server's name in ``claude mcp list`` when the user kept the default."""
PROMPT_TIMEOUT_SECONDS = 10
"""Claude Code's limit on the prompt hook: recall must never hold a prompt up for longer."""
SESSION_TIMEOUT_SECONDS = 15
"""Claude Code's limit on the session hook: the command path may load the models there."""
PROMPT_EVENT, SESSION_EVENT = "UserPromptSubmit", "SessionStart"
EVENTS = (PROMPT_EVENT, SESSION_EVENT)
"""The events trimem hooks, and the only ones install and uninstall touch."""
BACKUP_SUFFIX = ".trimem-backup"
"""The file beside the settings that holds them as they were before trimem's last change."""

ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
"""A shell variable assignment before a command's name."""
PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")
"""A settings key that a message can name as it is, after a dot."""

Settings = dict[str, Any]
Handler = dict[str, Any]


class SettingsError(Exception):
    """A settings file trimem cannot read, parse or write; the message names the file and why."""


@dataclass(frozen=True)
class Trimem:
    """A trimem and its world, as another process must run it to read what this one reads: its
    command line (the absolute path, then ``--config`` and ``--db``) and the ``TRIMEM_*``
    variables set where it runs (the user, the data folder, the settings)."""

    command: tuple[str, ...]
    variables: tuple[tuple[str, str], ...] = ()

    def shell(self, *args: str) -> str:
        """A POSIX shell command running this trimem with ``args``: each variable assigned before it."""
        assignments = [f"{name}={shlex.quote(value)}" for name, value in self.variables]
        return " ".join([*assignments, shlex.join([*self.command, *args])])

    def server_entry(self) -> dict[str, Any]:
        """The MCP server entry of Claude Code's configuration that runs ``trimem serve`` here."""
        entry: dict[str, Any] = {"type": "stdio", "command": self.command[0], "args": [*self.command[1:], "serve"]}
        return {**entry, "env": dict(self.variables)} if self.variables else entry


@dataclass(frozen=True)
class HookChoice:
    """What ``trimem hooks install`` was asked for."""

    capture: bool = False
    """Store each prompt as a memory (off by default: storing every prompt is the user's choice)."""
    command: bool = False
    """Recall before each prompt with ``trimem hook prompt`` rather than the running server's tool."""
    server: str = DEFAULT_SERVER
    trimem: Trimem = Trimem(("trimem",))
    """This trimem, as the hooks run it (``trimem_command``)."""

    def hook_command(self, *args: str) -> str:
        """The shell command that runs ``trimem hook ARGS`` with this trimem, its variables and options."""
        return self.trimem.shell(HOOK_GROUP, *args)

    def handlers(self) -> dict[str, Handler]:
        """trimem's handler for each event it hooks, as Claude Code's settings spell it."""
        if self.command:
            prompt = {"type": "command", "command": self.hook_command("prompt", *(["--capture"] if self.capture else [])),
                      "timeout": PROMPT_TIMEOUT_SECONDS}
        else:
            # Claude Code fills ${field} from the hook's input (the UserPromptSubmit payload)
            prompt = {"type": "mcp_tool", "server": self.server, "tool": RECALL_TOOL,
                      "input": {"prompt": "${prompt}", "cwd": "${cwd}", "session_id": "${session_id}",
                                "capture": self.capture},
                      "timeout": PROMPT_TIMEOUT_SECONDS}
        # Claude Code runs no mcp_tool hook at SessionStart ("no MCP client context"): always the command path
        session = {"type": "command", "command": self.hook_command("session"), "timeout": SESSION_TIMEOUT_SECONDS}
        return {PROMPT_EVENT: prompt, SESSION_EVENT: session}


@dataclass(frozen=True)
class Change:
    """One handler trimem added, replaced (with ``handler``) or removed in one event."""

    action: Literal["added", "replaced", "removed"]
    event: str
    handler: Handler

    def __str__(self) -> str:
        verb = "replaced trimem's hook with" if self.action == "replaced" else self.action
        return f"{self.event}: {verb} {describe(self.handler)}"


def describe(handler: Handler) -> str:
    """A handler of trimem's in a few words."""
    if handler.get("type") == "mcp_tool":
        capture = "capturing prompts" if handler.get("input", {}).get("capture") else "no capture"
        return f"the tool {handler.get('tool')} of MCP server {handler.get('server')!r} ({capture})"
    return f"the command `{handler.get('command')}`"


def is_trimem_handler(handler: Handler, server: str) -> bool:
    """Whether a handler is one trimem installs: the recall tool on ``server``, or a ``trimem hook`` command."""
    if handler.get("type") == "mcp_tool":
        return handler.get("tool") == RECALL_TOOL and handler.get("server") == server
    command = handler.get("command")
    return handler.get("type") == "command" and isinstance(command, str) and runs_trimem_hook(command)


def runs_trimem_hook(command: str) -> bool:
    """Whether a shell command runs ``trimem hook prompt|session``, by whatever path and with whatever
    options: ``trimem``, ``/any/where/trimem`` (or ``trimem.exe``), or ``PYTHON -m mcp_server``."""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: not a command trimem wrote
        return False
    while words and ASSIGNMENT.match(words[0]):  # TRIMEM_USER_ID=ana trimem hook …
        words = words[1:]
    if words and PurePath(words[0]).name in ("trimem", "trimem.exe"):
        rest = words[1:]
    elif words[1:3] == ["-m", "mcp_server"]:
        rest = words[3:]
    else:
        return False
    while rest and rest[0].startswith("-"):  # the group's options: --config FILE, --db PATH, --log-level L
        rest = rest[1:] if "=" in rest[0] else rest[2:]
    return rest[:1] == [HOOK_GROUP] and rest[1:2] != [] and rest[1] in HOOK_COMMANDS


def trimem_command(executable: str, options: Sequence[str] = (), environ: Mapping[str, str] | None = None) -> Trimem:
    """The trimem of the Python at ``executable``, with ``options`` (``--config`` and ``--db``,
    made absolute by the caller) before its command and the ``TRIMEM_*`` variables of ``environ``.

    The ``trimem`` script pip put beside that Python when there is one, else that Python with
    ``-m mcp_server``: either by absolute path, since Claude Code runs hooks with its own PATH,
    where a virtualenv's ``bin`` seldom is. ``SettingsError`` when there is no such Python."""
    python = Path(executable) if executable else None
    if python is None or not python.is_absolute() or not python.exists():
        raise SettingsError(f"cannot tell where this trimem's Python is (sys.executable is {executable!r}); run "
                            "trimem hooks install with the trimem you registered with Claude Code")
    variables = tuple(sorted((name, value) for name, value in (environ or {}).items() if name.startswith(ENV_PREFIX)))
    for name in ("trimem", "trimem.exe"):
        script = python.with_name(name)
        if script.is_file():
            return Trimem((str(script), *options), variables)
    return Trimem((str(python), "-m", "mcp_server", *options), variables)


def install(settings: Settings, choice: HookChoice) -> tuple[Settings, list[Change]]:
    """``settings`` with trimem's handlers as ``choice`` asks, and what that changed (nothing
    when they are there already). A handler of trimem's already in an event is replaced where it
    is; a missing one is added at the end of the event, in a group of its own."""
    merged = copy.deepcopy(settings)
    hooks = merged.setdefault("hooks", {})
    changes = []
    for event, wanted in choice.handlers().items():
        groups, replaced, removed = sweep(hooks.get(event, []), choice.server, wanted)
        if replaced is None:
            groups.append({"hooks": [wanted]})
            changes.append(Change("added", event, wanted))
        elif replaced != wanted:
            changes.append(Change("replaced", event, wanted))
        changes.extend(Change("removed", event, handler) for handler in removed)
        hooks[event] = groups
    return (merged, changes) if changes else (settings, [])


def uninstall(settings: Settings, server: str) -> tuple[Settings, list[Change]]:
    """``settings`` without trimem's handlers, and what that removed. A matcher group, an event
    or the ``hooks`` key goes too only when removing trimem's handlers left it empty."""
    merged = copy.deepcopy(settings)
    hooks = merged.get("hooks", {})
    changes = []
    for event in EVENTS:
        if event not in hooks:
            continue
        groups, _, removed = sweep(hooks[event], server, None)
        changes.extend(Change("removed", event, handler) for handler in removed)
        if removed and not groups:
            del hooks[event]
        else:
            hooks[event] = groups
    if changes and not hooks:
        del merged["hooks"]
    return (merged, changes) if changes else (settings, [])


def sweep(groups: list[dict[str, Any]], server: str,
          replacement: Handler | None) -> tuple[list[dict[str, Any]], Handler | None, list[Handler]]:
    """One event's groups with trimem's first handler swapped for ``replacement`` (when given)
    and its others taken out, in order; the handler it replaced (or None) and those it removed.
    A group is dropped only when taking out trimem's handlers left it empty."""
    swept, replaced, removed = [], None, []
    for group in groups:
        handlers = group.get("hooks", [])
        kept = []
        for handler in handlers:
            if not is_trimem_handler(handler, server):
                kept.append(handler)
            elif replacement is not None and replaced is None:
                replaced = handler
                kept.append(replacement)
            else:
                removed.append(handler)
        if kept != handlers:
            if kept:
                swept.append({**group, "hooks": kept})
        else:
            swept.append(group)
    return swept, replaced, removed


def user_settings_path(environ: Mapping[str, str]) -> Path:
    """Claude Code's user settings: ``~/.claude/settings.json``, or in ``CLAUDE_CONFIG_DIR`` when
    that moves Claude Code's configuration folder."""
    folder = environ.get("CLAUDE_CONFIG_DIR") or "~/.claude"
    return Path(folder).expanduser() / "settings.json"


def project_settings_path(folder: Path) -> Path:
    """A project's shared settings, checked in with it: ``.claude/settings.json``."""
    return folder / ".claude" / "settings.json"


def read_settings(path: Path) -> Settings:
    """The settings in ``path``: empty when the file is missing or blank; ``SettingsError`` when
    it is not a JSON object, its ``hooks`` are not shaped as Claude Code reads them, or it holds
    a value trimem could not write back as it is (``exact_json``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not text.strip():
        return {}
    try:
        settings = exact_json(text)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{path} is not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno}): "
                            "fix it or move it away, then run this again") from None
    except RecursionError:
        raise SettingsError(f"{path} nests deeper than trimem reads; fix it, then run this again") from None
    except Unkeepable as exc:
        raise SettingsError(f"{path}: {exc}; fix it, then run this again") from None
    check_shape(settings, path)
    return settings


class Unkeepable(ValueError):
    """A value of a settings file that would not come back the same once written, and where it is."""


@dataclass(frozen=True)
class Unparsed:
    """A number as the file spells it, where Python would read another value: ``NaN`` and
    ``Infinity`` (JavaScript's, not JSON's), one beyond a double's range (``1e400`` → inf) or
    an integer of more digits than Python converts."""

    text: str


class Pairs(list[tuple[str, Any]]):
    """An object's members in the file's order, duplicates included, until ``plain`` checks them."""


def exact_json(text: str) -> Any:
    """``text`` parsed as JSON that ``json.dumps`` writes back as the same values, or
    ``Unkeepable`` naming the first value that would not be: a number ``Unparsed``, a text or
    key holding a lone surrogate (``"\\ud800"``, which no UTF-8 file can hold), a key given
    twice (only the last would be kept)."""
    parsed = json.loads(text, parse_float=float_or_unparsed, parse_int=int_or_unparsed, parse_constant=Unparsed,
                        object_pairs_hook=Pairs)
    return plain(parsed, "")


def float_or_unparsed(text: str) -> float | Unparsed:
    """A JSON number with a fraction or exponent, unless a double cannot hold it (``1e400``)."""
    value = float(text)
    return value if math.isfinite(value) else Unparsed(text)


def int_or_unparsed(text: str) -> int | Unparsed:
    """A JSON integer, unless it has more digits than Python converts to and from text."""
    try:
        return int(text)
    except ValueError:  # more digits than sys.get_int_max_str_digits() allows
        return Unparsed(text)


def plain(value: Any, place: str) -> Any:
    """``value`` with its objects as dicts, checked for what ``exact_json`` refuses; ``place``
    names it as the messages do (``hooks.SessionStart[0]``, ``""`` for the whole file)."""
    where = place or "the file"
    if isinstance(value, Unparsed):
        raise Unkeepable(f"{where} is {capped(value.text)}, which trimem cannot write back as a JSON number")
    if isinstance(value, str):
        check_utf8(value, where)
    elif isinstance(value, Pairs):
        members: dict[str, Any] = {}
        for key, item in value:
            inner = member_place(place, key)
            check_utf8(key, f"the key {inner}")
            if key in members:
                raise Unkeepable(f"{where} holds the key {capped(json.dumps(key))} twice, and only the last "
                                 "would be kept")
            members[key] = plain(item, inner)
        return members
    elif isinstance(value, list):
        return [plain(item, f"{place}[{i}]") for i, item in enumerate(value)]
    return value


def member_place(place: str, key: str) -> str:
    """Where an object's member is: ``hooks.Stop`` for a plain key, ``env["my key"]`` otherwise."""
    if PLAIN_KEY.fullmatch(key):
        return f"{place}.{key}" if place else key
    return f"{place}[{capped(json.dumps(key))}]"


def check_utf8(text: str, where: str) -> None:
    """Refuse a text holding a lone surrogate: JSON's ``\\ud800`` escape reads as one, and no
    UTF-8 file (so no settings file trimem writes) can hold it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise Unkeepable(f"{where} holds a lone surrogate (\\u{ord(text[exc.start]):04x}), which no UTF-8 "
                         "file can hold") from None


def capped(text: str) -> str:
    """``text`` as it is, cut to ``SHOWN_CHARS`` characters: a message quotes no megabyte."""
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"


def check_shape(settings: Any, path: Path) -> None:
    """Refuse settings that are not an object, or hooks not shaped as Claude Code's
    (``{event: [{"matcher": …, "hooks": [{handler}, …]}, …]}``): trimem would not know what to keep."""
    expect(settings, dict, "the file", path)
    hooks = settings.get("hooks", {})
    expect(hooks, dict, "'hooks'", path)
    for event, groups in hooks.items():
        expect(groups, list, f"hooks.{event}", path)
        for i, group in enumerate(groups):
            expect(group, dict, f"hooks.{event}[{i}]", path)
            handlers = group.get("hooks", [])
            expect(handlers, list, f"hooks.{event}[{i}].hooks", path)
            for j, handler in enumerate(handlers):
                expect(handler, dict, f"hooks.{event}[{i}].hooks[{j}]", path)


JSON_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "true or false", int: "a number",
              float: "a number", type(None): "null"}


def expect(value: Any, kind: type, where: str, path: Path) -> None:
    if not isinstance(value, kind):
        raise SettingsError(f"{path}: {where} is {JSON_KINDS[type(value)]}, where Claude Code expects "
                            f"{JSON_KINDS[kind]}; fix it, then run this again")


def settings_text(settings: Settings) -> str:
    """Settings as Claude Code writes them: JSON indented by two spaces, ending in a line end."""
    return json.dumps(settings, indent=2, ensure_ascii=False) + "\n"


def write_settings(path: Path, settings: Settings) -> Path | None:
    """Write ``settings`` to ``path`` whole or not at all (a temporary file renamed over it),
    with the file's permissions, through a symbolic link to the file it names, creating the
    folder when missing. The file as it was is copied to ``BACKUP_SUFFIX`` before it is
    replaced; returns that copy, or None when there was no file.

    The text is made before any file is touched, and the temporary file goes on any failure
    (an exception of any kind), so a refusal leaves the file as it was and no temporary file."""
    target = path.resolve()
    temporary = target.with_name(f".{target.name}.{os.getpid()}.trimem-tmp")
    try:
        data = settings_text(settings).encode("utf-8")
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else None
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            if mode is not None:
                os.chmod(temporary, mode)  # the umask may have narrowed it
            backup = target.with_name(target.name + BACKUP_SUFFIX) if mode is not None else None
            if backup:
                shutil.copy2(target, backup)
            os.replace(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    except (OSError, ValueError) as exc:  # ValueError: text no UTF-8 file holds (an env value's lone surrogate)
        raise SettingsError(f"cannot write {getattr(exc, 'filename', None) or target}: "
                            f"{getattr(exc, 'strerror', None) or exc}") from None
    return backup
