"""The limits of ``trimem serve --transport http --auth tokens`` as an attacker meets them.

Real server processes on the test's store, reached as the attacks were made: raw sockets for
bodies that never finish arriving, plain HTTP where the status and headers are the point, and
the SDK's client where what an integrator sees is. Each test names the hardening finding it
closes (round 3: 3, 5, 6, 7, 10).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import RestartablePostgres
from mcp import MCPError
from test_service import INITIALIZE, connected, post, served, structured

from bench.load import free_port
from store import Config, Engine, load_config

LEGACY = "2025-06-18"
MODERN = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "list_memories"}
"""The headers of a 2026-protocol tool call, which has no session."""
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_memories", "arguments": {}}}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
PROBES = 40
"""How many times a test asks again for an answer the server gives once it has counted what is
in flight (each try is one request; a bound, not a timing)."""


def message_of(answer: httpx2.Response) -> str:
    """The message of a refusal, which trimem words as the SDK words its own: a JSON-RPC error."""
    assert answer.headers["content-type"] == "application/json", answer.text
    return answer.json()["error"]["message"]


def opened(url: str, secret: str) -> str:
    """A 2025-protocol session opened with ``initialize`` and left open (no DELETE), as a crashed agent leaves it."""
    answer = post(url, secret)
    assert answer.status_code == 200, answer.text
    return answer.headers["mcp-session-id"]


def in_session(url: str, secret: str, session: str, body: Any = PING) -> httpx2.Response:
    return post(url, secret, body, **{"mcp-session-id": session, "mcp-protocol-version": LEGACY})


@contextmanager
def slow_bodies(url: str, headers: dict[str, str], count: int) -> Iterator[None]:
    """``count`` POSTs whose body never finishes arriving: each is in flight until the block ends."""
    parts = urllib.parse.urlsplit(url)
    head = {**headers, "Host": parts.netloc, "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream", "Content-Length": "4096"}
    request = f"POST {parts.path} HTTP/1.1\r\n" + "".join(f"{name}: {value}\r\n" for name, value in head.items())
    with ExitStack() as stack:
        for _ in range(count):
            sock = stack.enter_context(socket.create_connection((parts.hostname, parts.port), timeout=30))
            sock.sendall(request.encode() + b"\r\n" + b'{"jsonrpc": "2.0", ')
        yield


@contextmanager
def listening(url: str, secret: str, session: str) -> Iterator[None]:
    """A GET stream open on ``session`` (as the SDK's client keeps one): a request in flight."""
    headers = {"Authorization": f"Bearer {secret}", "Accept": "text/event-stream", "mcp-session-id": session,
               "mcp-protocol-version": LEGACY}
    with httpx2.stream("GET", url, headers=headers, timeout=30) as stream:
        assert stream.status_code == 200
        yield


def first_refusal(ask: Callable[[], httpx2.Response]) -> httpx2.Response:
    """``ask()`` until it is answered 429, at most ``PROBES`` times (the server counts a request
    in flight once its headers reached it; this waits for that, not for a time)."""
    for _ in range(PROBES):
        answer = ask()
        if answer.status_code == 429:
            return answer
    raise AssertionError(f"never refused; last answer {answer.status_code}: {answer.text[:200]}")


# Finding 3: a store that cannot be reached is 503 with its reason, at the token check too.

@pytest.mark.only_on("postgres")
def test_a_server_whose_postgres_cannot_be_reached_answers_503_with_the_reason(
    config: Config, tmp_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = urllib.parse.urlsplit(config.store.database_url)
    nowhere = config.using(urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{free_port()}")))

    async def with_the_sdk(url: str) -> None:
        refused = pytest.RaisesExc(MCPError, match="cannot reach the PostgreSQL server")
        with pytest.RaisesGroup(refused, flatten_subgroups=True):  # the SDK's task groups wrap it
            async with connected(url, "tm_" + "x" * 43):
                pass

    with served(nowhere, log, monkeypatch) as url:
        for _ in range(3):
            answer = post(url, "tm_" + "x" * 43)
            assert answer.status_code == 503, answer.text
            assert int(answer.headers["Retry-After"]) >= 1
            assert "cannot reach the PostgreSQL server" in message_of(answer)
        assert post(url, None).status_code == 401  # no token: nothing to look up
        anyio.run(with_the_sdk, url)
    written = log.read_text()
    assert "Traceback" not in written and "Exception in ASGI application" not in written
    assert written.count("answering 503") == 1  # one line, not one per request


@pytest.mark.only_on("postgres")
def test_postgres_going_down_under_a_running_server_is_503_at_the_token_check(
    restartable_postgres: RestartablePostgres, model_cache: Path, engine_factory: Callable[[Config], Engine],
    log: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = load_config(environ={}).replace("store", database_url=restartable_postgres.database(),
                                             model_cache=str(model_cache))
    with engine_factory(config) as engine:
        secret = engine.tokens.create(user_id="alice").secret

    async def calls(url: str) -> None:
        async with connected(url, secret) as client:
            structured(await client.call_tool("list_memories", {}))

    with served(config, log, monkeypatch) as url:
        anyio.run(calls, url)
        restartable_postgres.stop()
        answer = post(url, secret)
        assert answer.status_code == 503, answer.text
        assert int(answer.headers["Retry-After"]) >= 1
        assert "cannot reach the PostgreSQL server" in message_of(answer)
        restartable_postgres.start()
        assert post(url, secret).status_code == 200
        anyio.run(calls, url)
    assert "Traceback" not in log.read_text()


@pytest.mark.only_on("sqlite")
def test_a_store_that_cannot_be_opened_answers_503_with_the_reason(
    config: Config, db_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_path.write_bytes(b"not a database " * 400)
    with served(config, log, monkeypatch) as url:
        answer = post(url, "tm_" + "x" * 43)
        assert answer.status_code == 503 and "Retry-After" not in answer.headers  # waiting will not help
        assert "is not an SQLite database" in message_of(answer)
    assert "Traceback" not in log.read_text()


# Finding 5: a session id the cap does not hold is a call in flight.

@pytest.mark.parametrize("session", [{}, {"mcp-session-id": "anything"}], ids=["no session", "made-up session"])
@pytest.mark.only_on("sqlite")
def test_calls_in_flight_are_capped_whatever_session_they_name(
    session: dict[str, str], config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tokens(user_id="alice")
    headers = {"Authorization": f"Bearer {secret}", **MODERN, **session}
    with served(config, log, monkeypatch, max_sessions_per_token=3) as url:
        with slow_bodies(url, headers, 3):
            refused = first_refusal(lambda: post(url, secret, CALL, **MODERN, **session))
            assert int(refused.headers["Retry-After"]) >= 1
            assert message_of(refused).startswith("this token has 3 calls in flight outside a session: 3 at once")
            assert "sessions open" not in message_of(refused)  # it opened none
        assert post(url, secret, CALL, **MODERN, **session).status_code != 429  # done: room again
    assert "Traceback" not in log.read_text()


# Finding 6: abandoned sessions yield; busy ones hold; an operator clears a token's sessions.

@pytest.mark.only_on("sqlite")
def test_an_abandoned_session_yields_to_a_new_one_and_a_busy_one_holds(
    config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tokens(user_id="alice")
    with served(config, log, monkeypatch, max_sessions_per_token=2) as url:
        oldest, newer = opened(url, secret), opened(url, secret)
        assert in_session(url, secret, newer).status_code == 200  # newer is now the more recently used
        newest = opened(url, secret)  # at the cap: the least recently used idle session yields
        assert in_session(url, secret, oldest).status_code == 404
        with listening(url, secret, newer), listening(url, secret, newest):
            refused = post(url, secret)
            assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
            assert message_of(refused).startswith(
                "this token has 2 sessions open with a request in flight: 2 at once is the most allowed")
            assert in_session(url, secret, newest).status_code == 200  # an open session keeps working
            ended = httpx2.delete(url, headers={"Authorization": f"Bearer {secret}", "mcp-session-id": newer,
                                                "mcp-protocol-version": LEGACY}, timeout=30)
            assert ended.status_code == 200
            opened(url, secret)  # the place its client gave back, while newest is still busy
        opened(url, secret)  # the streams ended: an idle session yields again
    assert "Traceback" not in log.read_text()


def test_a_real_client_is_admitted_after_a_crashed_one_left_its_sessions(
    config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack as a restarted agent meets it: the cap's worth of sessions opened and never
    closed, then the SDK's client with the same token."""
    secret = tokens(user_id="alice")

    async def restarted(url: str) -> None:
        async with connected(url, secret, "legacy") as client:
            structured(await client.call_tool("add_memory", {"text": "Alice restarted her agent on Monday"}))

    with served(config, log, monkeypatch, max_sessions_per_token=3) as url:
        left = [opened(url, secret) for _ in range(3)]
        anyio.run(restarted, url)
        assert in_session(url, secret, left[0]).status_code == 404
    assert "Traceback" not in log.read_text()


def test_clear_sessions_ends_a_tokens_sessions_on_every_server_process(
    config: Config, tokens: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret, other = tokens(user_id="alice", name="restarted"), tokens(user_id="bob", name="bystander")
    with served(config, tmp_path / "first.log", monkeypatch) as first, \
            served(config, tmp_path / "second.log", monkeypatch) as second:
        left = {url: opened(url, secret) for url in (first, second)}
        kept = {url: opened(url, other) for url in (first, second)}
        cleared = subprocess.run([sys.executable, "-m", "mcp_server", "token", "clear-sessions", "restarted"],
                                 check=False, capture_output=True, text=True, timeout=120)
        assert cleared.returncode == 0, cleared.stderr
        assert "cleared the sessions of token 'restarted'" in cleared.stderr
        for url in (first, second):
            fresh = opened(url, secret)  # the token's next request: the sessions before the mark end
            assert in_session(url, secret, left[url]).status_code == 404
            assert in_session(url, secret, fresh).status_code == 200  # one opened after it stays
            assert in_session(url, other, kept[url]).status_code == 200  # another token's are not touched
    listed = subprocess.run([sys.executable, "-m", "mcp_server", "token", "list", "--json"], check=True,
                            capture_output=True, text=True, timeout=120)
    by_name = {token["name"]: token for token in json.loads(listed.stdout)["tokens"]}
    assert by_name["restarted"]["sessions_cleared_at"] and by_name["bystander"]["sessions_cleared_at"] is None
    for name in ("first.log", "second.log"):
        assert "Traceback" not in (tmp_path / name).read_text()


# Finding 7: failed token checks per address and in all, before the lookup.

def test_failed_token_checks_are_refused_per_address_and_in_all_but_never_a_verified_token(
    config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Addresses are told apart by ``X-Forwarded-For``, which uvicorn trusts from loopback
    (its ``FORWARDED_ALLOW_IPS`` default), as from a reverse proxy on the same machine."""
    good, later = tokens(user_id="alice", name="good"), tokens(user_id="bob", name="later")
    wrong = "tm_" + "w" * 43
    limits = {"failed_auth_per_second": 0.001, "failed_auth_burst": 3, "failed_auth_total_per_second": 0.001,
              "failed_auth_total_burst": 5}

    def from_address(address: str, secret: str) -> httpx2.Response:
        return post(url, secret, **{"X-Forwarded-For": address})

    with served(config, log, monkeypatch, **limits) as url:
        assert from_address("203.0.113.7", good).status_code == 200  # verified before the flood
        assert [from_address("203.0.113.7", wrong).status_code for _ in range(3)] == [401] * 3
        refused = from_address("203.0.113.7", wrong)
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        assert message_of(refused).startswith("too many failed token checks from 203.0.113.7")
        assert from_address("203.0.113.7", later).status_code == 429  # an unknown token waits with that address
        assert from_address("203.0.113.7", good).status_code == 200  # a verified one never does
        assert [from_address(f"198.51.100.{n}", wrong).status_code for n in (1, 2)] == [401] * 2  # other addresses
        everywhere = from_address("198.51.100.3", wrong)  # five failed in all: the whole server's bucket is empty
        assert everywhere.status_code == 429
        assert message_of(everywhere).startswith("too many failed token checks on this server")
        assert from_address("198.51.100.4", good).status_code == 200
    assert "Traceback" not in log.read_text()


# Finding 10: an add costs the rate budget one unit per memory.

@pytest.mark.only_on("sqlite")
def test_an_add_of_many_messages_costs_one_unit_per_memory(
    config: Config, tokens: Callable[..., str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tokens(user_id="alice")
    messages = [{"role": "user", "content": f"Alice's locker number {n} is on floor {n % 4}"} for n in range(30)]

    async def scenario(url: str) -> None:
        async with connected(url, secret) as client:
            await client.list_tools()  # the SDK's client checks results against the tools' schemas
            added = structured(await client.call_tool("add_memory", {"messages": messages}))  # may go into debt once
            assert len(added["results"]) == 30
            with pytest.raises(MCPError, match=r"rate limit: 0\.5 requests per second per token, each memory stored "
                                               r"counting as one .*; retry in \d+ s"):
                await client.call_tool("list_memories", {})

    with served(config, log, monkeypatch, rate_per_second=0.5, rate_burst=10) as url:
        anyio.run(scenario, url)
        waiting = post(url, secret, INITIALIZE)
        assert waiting.status_code == 429
        assert int(waiting.headers["Retry-After"]) >= 2 * (30 - 10)  # the debt, at 0.5 a second
    assert "Traceback" not in log.read_text()
