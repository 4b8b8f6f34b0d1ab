"""The access log cannot be forged: whatever a caller sends as an id or a query, and whatever a
token is named, each call is one line whose fields are exactly the log's own.

The formatting is checked over every character ``str.isprintable`` rejects, by category; the
whole path through a real ``trimem serve --transport http --auth tokens`` process, with the
SDK's client sending such ids, and its stderr read back from the file it was written to.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import unicodedata
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_service import connected, served  # pytest puts tests/ on sys.path (prepend import mode)

from mcp_server.service.access_log import record
from store import Config, Engine, InvalidArgument

FIELDS = ["token", "tool", "user_id", "agent_id", "run_id", "results", "ms", "status"]
FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s"]+)')
NOT_PRINTABLE = "x".join(ch for ch in map(chr, range(sys.maxunicode + 1)) if not ch.isprintable())
"""Each character that is not printable, between x's (two lone surrogates side by side would
read back from JSON as the one character they encode)."""
FORGED = {
    "user_id": "x\b\b\b\x07bob",  # no space, quote, = or backslash: was written raw
    "agent_id": "a\u2028FAKE-LINE tool=delete_all_memories user_id=alice status=ok",  # was raw inside quotes
    "run_id": "r\x1b[2K\x1b[1Gforged\x85next\u2029line\u200e\ue000",
}


def fields(message: str) -> dict[str, Any]:
    """An access line's message as its fields, each value decoded (``-`` is None); fails
    unless the whole message is ``key=value`` pairs, one space apart."""
    pairs = FIELD.findall(message)
    assert " ".join(f"{key}={value}" for key, value in pairs) == message, message
    return {key: None if value == "-" else json.loads(value) if value.startswith('"') else value
            for key, value in pairs}


def logged(caplog: pytest.LogCaptureFixture, **scope: str) -> str:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="trimem.access"):
        record("list_memories", "ops bot", scope, 0, 0.0012, "refused", {"query": scope.get("user_id")})
    [line] = caplog.messages
    return line


def test_every_character_that_is_not_printable_is_escaped_quoted_or_not(caplog: pytest.LogCaptureFixture) -> None:
    categories = {unicodedata.category(ch) for ch in NOT_PRINTABLE[::2]}
    assert categories == {"Cc", "Cf", "Zl", "Zp", "Zs", "Cs", "Co", "Cn"}  # the whole set is covered
    line = logged(caplog, user_id=NOT_PRINTABLE, agent_id="plain", run_id="x\x07y")
    assert line.isprintable() and line.splitlines() == [line]
    parsed = fields(line)
    assert list(parsed) == [*FIELDS, "query"]
    read_back = parsed["user_id"] == parsed["query"] == NOT_PRINTABLE  # escaped, not dropped
    assert read_back  # (a plain name: the two strings are 2 million characters each)
    assert " agent_id=plain " in line and ' run_id="x\\u0007y" ' in line  # quoted: no longer raw


@pytest.mark.parametrize("sent", [*FORGED.values(), 'a"b', "a\\b", "a=b", "a b", "é", "-"])
def test_a_value_reads_back_as_sent_and_cannot_add_a_field_or_a_line(
    sent: str, caplog: pytest.LogCaptureFixture
) -> None:
    line = logged(caplog, user_id=sent, agent_id=sent, run_id=sent)
    assert line.isprintable() and line.splitlines() == [line]
    parsed = fields(line)
    assert list(parsed) == [*FIELDS, "query"]
    assert parsed["user_id"] == parsed["agent_id"] == parsed["run_id"] == parsed["query"] == sent
    assert (f" user_id={sent} " in line) == (sent == "é")  # only a plain value stays raw ("-" is None's)


@pytest.mark.parametrize("name", ["a\u2028b", "a\x00b", "a\x1b[2K", "a=b", 'a"b', "a\\b", "a\u00a0b", "a\tb"])
def test_a_token_name_that_could_forge_a_field_or_a_line_is_refused(engine: Engine, name: str) -> None:
    with pytest.raises(InvalidArgument, match="must be 1 to 64 letters, digits, spaces"):
        engine.tokens.create(user_id="alice", name=name)
    assert engine.tokens.list() == []


def test_forged_ids_over_http_are_logged_escaped_one_line_per_call(
    config: Config, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real server, real client: ids holding BEL, backspace, ESC sequences and line separators,
    and a query holding them (``log_texts``), each come back out of the log exactly as sent,
    in a line of the log's own fields; the raw characters appear nowhere in it."""
    secret = engine.tokens.create(admin=True, name="night shift: ops bot").secret
    log = tmp_path / "server.log"
    query = "walnut\u2029tool=delete_all_memories status=ok"

    async def scenario(url: str) -> None:
        async with connected(url, secret) as client:
            for tool, arguments in (("list_memories", FORGED), ("search_memory", {**FORGED, "query": query}),
                                    ("list_memories", {"user_id": "alice"})):
                await client.call_tool(tool, arguments)

    with served(config, log, monkeypatch, log_texts=1) as url:
        anyio.run(scenario, url)
    written = log.read_text(encoding="utf-8")
    sent = {ch for ch in "".join(FORGED.values()) + query if not ch.isprintable()}
    assert len(sent) == 8 and not sent & set(written) and "Traceback" not in written
    access = [line.split(" trimem.access: ", 1)[1] for line in written.splitlines() if " trimem.access: " in line]
    assert len(access) == 3 and not [line for line in written.splitlines() if "FAKE-LINE" in line
                                     and " trimem.access: " not in line]
    first, second, third = map(fields, access)
    for call in (first, second):
        assert list(call)[:len(FIELDS)] == FIELDS
        assert {key: call[key] for key in FORGED} == FORGED and call["token"] == "night shift: ops bot"
    assert (first["tool"], second["tool"], second["query"]) == ("list_memories", "search_memory", query)
    assert third["user_id"] == "alice" and third["status"] == "ok"
