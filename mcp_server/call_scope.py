"""The scope a call means when it names only part of one: the rules every front end shares."""

from __future__ import annotations

from store.config import Config
from store.errors import InvalidArgument


def default_scope(
    config: Config, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
) -> dict[str, str]:
    """The scope a call means: the default user whenever ``user_id`` is absent, with
    ``agent_id`` and ``run_id`` narrowing inside that user.

    The configured user names whose memories a call means when it names no one, so an
    agent or run id alone never reaches across users: ``{"agent_id": "planner"}`` is the
    default user's planner, not every user's. A caller that names ``user_id`` gets
    exactly that user.
    """
    scope = {"user_id": config.server.user_id if user_id is None else user_id}
    scope.update({key: value for key, value in (("agent_id", agent_id), ("run_id", run_id)) if value is not None})
    return scope


def named_scope(
    config: Config, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
) -> dict[str, str]:
    """``default_scope`` for calls that forget a whole scope: at least one id must be named,
    so "delete everything" is never what an omitted argument means."""
    require_named(user_id, agent_id, run_id)
    return default_scope(config, user_id, agent_id, run_id)


def require_named(user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None) -> None:
    """Refuse a call that forgets a whole scope but names none of its ids."""
    if user_id is None and agent_id is None and run_id is None:
        raise InvalidArgument(
            "name a scope: at least one of user_id, agent_id or run_id (agent_id and run_id alone mean the "
            "default user's)"
        )
