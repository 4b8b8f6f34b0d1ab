"""``trimem serve --transport http --auth tokens``: many users over HTTP, each held to its token.

Real server processes on the test's store (SQLite or PostgreSQL), reached with the SDK's
streamable-HTTP client carrying ``Authorization: Bearer …``, and with plain HTTP requests
where the answer's status is the point (401, 413, 429).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from test_mcp_http import served as serving  # pytest puts tests/ on sys.path (prepend import mode)

from bench.load import free_port
from store import Config, Engine
from store.tokens import token_hash

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@contextmanager
def served(config: Config, log: Path, monkeypatch: pytest.MonkeyPatch, **settings: Any) -> Iterator[str]:
    """``trimem serve --transport http --auth tokens`` on the test's store (``test_mcp_http.served``)."""
    with serving(config, log, monkeypatch, "--auth", "tokens", **settings) as url:
        yield url


@asynccontextmanager
async def connected(url: str, secret: str, mode: str = "auto") -> AsyncIterator[Client]:
    """An SDK client that sends ``secret`` as its bearer token (``mode="legacy"``: the 2025
    protocol, with a session id)."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {secret}"})
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


def post(url: str, secret: str | None, body: Any = INITIALIZE, **headers: str) -> httpx2.Response:
    """One plain POST to the endpoint (an initialize, unless told otherwise)."""
    if secret is not None:
        headers["Authorization"] = f"Bearer {secret}"
    return httpx2.post(url, json=body, headers={**ACCEPT, **headers}, timeout=30)


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def test_two_users_cannot_reach_each_others_memories_by_any_tool(
    config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, bob = tokens(user_id="alice", name="alice"), tokens(user_id="bob", name="bob")
    secret_text = "Alice keeps the spare key under the blue flowerpot"

    async def scenario(url: str) -> None:
        async with connected(url, alice) as as_alice, connected(url, bob) as as_bob:
            added = structured(await as_alice.call_tool(
                "add_memory", {"text": secret_text, "metadata": {"category": "home"}}))
            whole = structured(await as_alice.call_tool("get_memory", {"memory_id": added["results"][0]["id"]}))
            assert whole["user_id"] == "alice"
            alice_id = whole["id"]  # the full id; the tools' briefs show its first 8 characters
            structured(await as_bob.call_tool("add_memory", {"text": "Bob waters the plants on Sundays"}))

            refused = {
                "search_memory": {"query": "spare key flowerpot", "user_id": "alice"},
                "explain_search": {"query": "spare key flowerpot", "user_id": "alice"},
                "list_memories": {"user_id": "alice"},
                "add_memory": {"text": "Bob was here", "user_id": "alice"},
                "get_memory": {"memory_id": alice_id},
                "update_memory": {"memory_id": alice_id[:8], "text": "The key is gone"},
                "delete_memory": {"memory_id": alice_id},
                "memory_history": {"memory_id": alice_id[:8]},
                "delete_all_memories": {"user_id": "alice"},
            }
            for tool, arguments in refused.items():
                result = await as_bob.call_tool(tool, arguments)
                assert result.is_error, (tool, result.content[0].text)
                assert "flowerpot" not in result.content[0].text, tool
            named_other = await as_bob.call_tool("get_memory", {"memory_id": alice_id, "user_id": "alice"})
            assert "acts for user_id='bob' only" in named_other.content[0].text

            # Without user_id every read is Bob's own, filters and agents included.
            found = structured(await as_bob.call_tool("search_memory", {"query": "spare key flowerpot",
                                                                        "threshold": 0}))
            assert [hit["text"] for hit in found["results"]] == ["Bob waters the plants on Sundays"]
            page = structured(await as_bob.call_tool("list_memories", {"filters": {"category": "home"}}))
            assert page["memories"] == []
            explained = structured(await as_bob.call_tool("explain_search", {"query": "spare key", "threshold": 0}))
            assert "flowerpot" not in str(explained)
            assert structured(await as_bob.call_tool("delete_all_memories", {"agent_id": "none"}))[
                "deleted_count"] == 0

            # Alice's memory is as she left it, with one event.
            kept = structured(await as_alice.call_tool("get_memory", {"memory_id": alice_id}))
            assert kept["text"] == secret_text
            history = structured(await as_alice.call_tool("memory_history", {"memory_id": alice_id}))
            assert [event["event"] for event in history["events"]] == ["ADD"]

    with served(config, log, monkeypatch) as url:
        anyio.run(scenario, url)


def test_a_token_bound_to_an_agent_narrows_only_within_it(
    config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    support, alice = tokens(user_id="alice", agent_id="support"), tokens(user_id="alice")

    async def scenario(url: str) -> None:
        async with connected(url, support) as as_support, connected(url, alice) as as_alice:
            added = structured(await as_support.call_tool("add_memory", {"text": "Prefers email to phone calls"}))
            assert "agent_id" not in added["results"][0]  # the call's own agent, so the brief leaves it out
            whole = structured(await as_support.call_tool("get_memory", {"memory_id": added["results"][0]["id"]}))
            assert (whole["user_id"], whole["agent_id"]) == ("alice", "support")
            other = await as_support.call_tool("list_memories", {"agent_id": "planner"})
            assert other.is_error and "agent_id='support' only" in other.content[0].text
            structured(await as_alice.call_tool("add_memory", {"text": "Plans a trip to Lisbon", "agent_id": "planner"}))
            seen = structured(await as_support.call_tool("list_memories", {}))
            assert [m["text"] for m in seen["memories"]] == ["Prefers email to phone calls"]
            everything = structured(await as_alice.call_tool("list_memories", {}))
            assert len(everything["memories"]) == 2
            narrowed = structured(await as_alice.call_tool("list_memories", {"agent_id": "planner"}))
            assert [m["text"] for m in narrowed["memories"]] == ["Plans a trip to Lisbon"]

    with served(config, log, monkeypatch) as url:
        anyio.run(scenario, url)


def test_an_admin_token_acts_on_any_scope(
    config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin, alice = tokens(admin=True), tokens(user_id="alice")

    async def scenario(url: str) -> None:
        async with connected(url, alice) as as_alice, connected(url, admin) as as_admin:
            structured(await as_alice.call_tool("add_memory", {"text": "Alice's birthday is in May"}))
            page = structured(await as_admin.call_tool("list_memories", {"user_id": "alice"}))
            assert [m["text"] for m in page["memories"]] == ["Alice's birthday is in May"]

    with served(config, log, monkeypatch) as url:
        anyio.run(scenario, url)


def test_revoking_a_token_shuts_it_out_at_once_on_every_server_process(
    config: Config, tokens: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret, other = tokens(user_id="alice", name="leaked"), tokens(user_id="bob", name="kept")

    async def before(first: str, second: str) -> None:
        for url in (first, second):
            async with connected(url, secret) as client:
                structured(await client.call_tool("list_memories", {}))

    async def after(first: str, second: str) -> None:
        for url in (first, second):
            async with connected(url, other) as client:
                structured(await client.call_tool("list_memories", {}))

    with served(config, tmp_path / "first.log", monkeypatch) as first, \
            served(config, tmp_path / "second.log", monkeypatch) as second:
        anyio.run(before, first, second)
        revoke = subprocess.run([sys.executable, "-m", "mcp_server", "token", "revoke", "leaked"],
                                capture_output=True, text=True, timeout=120, check=False)
        assert revoke.returncode == 0, revoke.stderr
        assert "revoked token 'leaked'" in revoke.stderr
        for url in (first, second):
            refused = post(url, secret)
            assert refused.status_code == 401
            assert refused.headers["WWW-Authenticate"].startswith("Bearer ")
        anyio.run(after, first, second)


@pytest.mark.only_on("sqlite")
def test_missing_wrong_and_expired_tokens_get_401_with_the_resource_metadata(
    config: Config, engine: Engine, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tokens(user_id="alice")
    expired = tokens(user_id="alice", name="expired")
    with engine.backend.transaction() as txn:  # a token whose last day has passed
        row = txn.token_by_hash(token_hash(expired))
        txn.delete_token(row.name)
        txn.insert_token(type(row)(**{**row.__dict__, "expires_on": "2020-01-01"}))
    with served(config, log, monkeypatch) as url:
        for secret in (None, "tm_not-a-token", good[:-2], expired):
            answer = post(url, secret)
            assert answer.status_code == 401, secret
            assert answer.headers["WWW-Authenticate"].startswith('Bearer error="invalid_token"')
            assert "resource_metadata=" in answer.headers["WWW-Authenticate"]
        metadata = httpx2.get(url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"), timeout=30).json()
        assert metadata["resource"] == url
        assert post(url, good).status_code == 200


@pytest.mark.only_on("sqlite")
def test_a_flood_is_throttled_with_429_while_other_tokens_keep_working(
    config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flooder, calm = tokens(user_id="alice", name="flooder"), tokens(user_id="bob", name="calm")

    async def calm_calls(url: str) -> None:
        async with connected(url, calm) as client:
            structured(await client.call_tool("list_memories", {}))

    with served(config, log, monkeypatch, rate_per_second=1, rate_burst=3, max_sessions_per_token=100) as url:
        answers = [post(url, flooder, {"jsonrpc": "2.0", "id": 1, "method": "ping"}) for _ in range(10)]
        statuses = [answer.status_code for answer in answers]
        assert statuses.count(429) >= 6, statuses
        throttled = next(answer for answer in answers if answer.status_code == 429)
        assert int(throttled.headers["Retry-After"]) >= 1
        assert "rate limit" in throttled.text
        anyio.run(calm_calls, url)


@pytest.mark.only_on("sqlite")
def test_an_oversized_body_is_refused(
    config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tokens(user_id="alice")
    with served(config, log, monkeypatch, max_body_bytes=4096) as url:
        big = {**INITIALIZE, "params": {**INITIALIZE["params"], "padding": "x" * 5000}}
        assert post(url, secret, big).status_code == 413
        assert post(url, secret).status_code == 200


@pytest.mark.only_on("sqlite")
def test_a_tool_call_past_its_time_limit_is_an_error(
    config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tokens(user_id="alice")

    async def scenario(url: str) -> None:
        async with connected(url, secret) as client:
            result = await client.call_tool("search_memory", {"query": "anything at all"})
            assert result.is_error and "tool_timeout_seconds" in result.content[0].text

    with served(config, log, monkeypatch, tool_timeout_seconds=0.0001) as url:
        anyio.run(scenario, url)
    assert "tool=search_memory user_id=alice agent_id=- run_id=- results=0" in log.read_text()
    assert "status=timeout" in log.read_text()


@pytest.mark.only_on("sqlite")
def test_host_names_outside_the_allow_list_are_refused(
    config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tokens(user_id="alice")
    with served(config, log, monkeypatch, public_hosts="memory.example.com") as url:
        assert post(url, secret, Host="evil.example.com").status_code == 421
        assert post(url, secret, Host="memory.example.com").status_code == 200
        assert post(url, secret, Origin="https://evil.example.com").status_code == 403
        assert post(url, secret, Origin="https://memory.example.com").status_code == 200


@pytest.mark.only_on("sqlite")
def test_a_bind_beyond_loopback_without_tokens_refuses_to_start(db_arg: str) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "mcp_server", "--db", db_arg, "serve", "--transport", "http", "--host", "0.0.0.0",
         "--auth", "none", "--port", str(free_port())], capture_output=True, text=True, timeout=120, check=False,
    )
    assert refused.returncode == 2
    assert "--auth tokens" in refused.stderr and "Traceback" not in refused.stderr
    over_stdio = subprocess.run([sys.executable, "-m", "mcp_server", "--db", db_arg, "serve", "--auth", "tokens"],
                                capture_output=True, text=True, timeout=120, check=False)
    assert over_stdio.returncode == 2 and "go with --transport http" in over_stdio.stderr


def test_the_logs_hold_one_line_per_call_and_no_memory_text_or_token(
    config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tokens(user_id="alice", name="support bot")
    texts = ["Alice's locker code is 4711", "Alice is allergic to walnuts"]

    async def scenario(url: str) -> None:
        async with connected(url, secret) as client:
            for text in texts:
                structured(await client.call_tool("add_memory", {"text": text}))
            found = structured(await client.call_tool("search_memory", {"query": "walnut allergy"}))
            assert found["results"]
            refused = await client.call_tool("get_memory", {"memory_id": "no-such-id"})
            assert refused.is_error

    with served(config, log, monkeypatch) as url:
        anyio.run(scenario, url)
        post(url, secret + "x")
    written = log.read_text()
    access = [line for line in written.splitlines() if "trimem.access" in line]
    assert [line.split(" tool=")[1].split()[0] for line in access] == [
        "add_memory", "add_memory", "search_memory", "get_memory"]
    assert all('token="support bot"' in line and "user_id=alice" in line for line in access)
    assert access[2].endswith("status=ok") and " results=" in access[2] and " ms=" in access[2]
    assert access[3].endswith("status=refused")
    assert secret not in written and secret[:20] not in written
    for text in [*texts, "walnut allergy", "locker", "walnuts"]:
        assert text not in written
    assert "Traceback" not in written
