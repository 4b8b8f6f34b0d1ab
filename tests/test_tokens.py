"""Access tokens in the store, on every backend: made, listed, verified, revoked."""

from __future__ import annotations

import datetime as dt

import pytest

from store import Config, Engine
from store.errors import InvalidArgument, NotFound
from store.tokens import PREFIX_CHARS, TOKEN_MARK, token_hash


def test_a_token_is_shown_once_and_stored_only_as_its_hash(engine: Engine) -> None:
    issued = engine.tokens.create(user_id="alice", agent_id="support", name="support bot")
    assert issued.secret.startswith(TOKEN_MARK) and len(issued.secret) == len(TOKEN_MARK) + 43
    assert issued.token.prefix == issued.secret[:PREFIX_CHARS]
    with engine.backend.snapshot() as view:
        [row] = view.list_tokens()
    assert row.hash == token_hash(issued.secret)
    assert issued.secret not in repr(row)
    [listed] = engine.tokens.list()
    assert (listed.name, listed.user_id, listed.agent_id, listed.run_id, listed.admin) == (
        "support bot", "alice", "support", None, False)
    assert issued.secret not in repr(listed)


def test_verify_accepts_the_secret_only_and_records_the_use(engine: Engine) -> None:
    issued = engine.tokens.create(user_id="alice")
    assert engine.tokens.list()[0].last_used_at is None
    assert engine.tokens.verify(issued.secret).name == issued.token.name
    assert engine.tokens.list()[0].last_used_at is not None
    assert engine.tokens.verify(issued.secret[:-1] + ("A" if issued.secret[-1] != "A" else "B")) is None
    assert engine.tokens.verify("") is None


def test_revoke_by_name_or_prefix_shuts_the_token_out(engine: Engine) -> None:
    first = engine.tokens.create(user_id="alice", name="first")
    second = engine.tokens.create(user_id="bob")
    assert engine.tokens.revoke("first").name == "first"
    assert engine.tokens.verify(first.secret) is None
    assert engine.tokens.revoke(second.token.prefix[:7]).name == second.token.name
    assert engine.tokens.verify(second.secret) is None
    assert engine.tokens.list() == []
    with pytest.raises(NotFound, match="no token is named"):
        engine.tokens.revoke("first")


def test_an_ambiguous_prefix_revokes_nothing(engine: Engine) -> None:
    engine.tokens.create(user_id="alice", name="a")
    engine.tokens.create(user_id="bob", name="b")
    with pytest.raises(InvalidArgument, match="starts 2 tokens"):
        engine.tokens.revoke(TOKEN_MARK)
    assert len(engine.tokens.list()) == 2


def test_an_expired_token_is_refused(engine: Engine, config: Config) -> None:
    issued = engine.tokens.create(user_id="alice", expires=dt.date.today().isoformat())
    assert engine.tokens.verify(issued.secret) is not None
    yesterday = (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)).isoformat()
    with engine.backend.transaction() as txn:  # a day later, as the store sees it
        row = txn.token_by_hash(token_hash(issued.secret))
        txn.delete_token(row.name)
        txn.insert_token(type(row)(**{**row.__dict__, "expires_on": yesterday}))
    assert engine.tokens.verify(issued.secret) is None


@pytest.mark.parametrize(("arguments", "message"), [
    ({}, "needs the user_id"),
    ({"agent_id": "support"}, "needs the user_id"),
    ({"admin": True, "user_id": "alice"}, "admin token acts on every scope"),
    ({"user_id": "alice", "expires": "2020-01-01"}, "in the past"),
    ({"user_id": "alice", "expires": "next week"}, "must look like"),
    ({"user_id": "alice", "name": " leading space"}, "token name"),
])
def test_bad_token_arguments_are_refused(engine: Engine, arguments: dict, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        engine.tokens.create(**arguments)
    assert engine.tokens.list() == []


def test_names_are_unique(engine: Engine) -> None:
    engine.tokens.create(user_id="alice", name="bot")
    with pytest.raises(InvalidArgument, match="exists already"):
        engine.tokens.create(user_id="bob", name="bot")
    assert [token.user_id for token in engine.tokens.list()] == ["alice"]
