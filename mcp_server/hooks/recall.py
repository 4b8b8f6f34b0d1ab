"""What a hook recalls: for a prompt, what the prompt asks about; at session start, what the
project's name recalls and the project's most recent memories (``project.py`` says what a
project is). Both in the scope the caller gives (the default user's memories, every run, unless
a token narrows it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from mcp_server.hooks.block import PROMPT_HEADING, Block, render, session_heading
from mcp_server.hooks.project import Project
from store.config import Config
from store.ranking.standing import KEY

if TYPE_CHECKING:
    from store.engine import Engine


def for_prompt(engine: Engine, config: Config, prompt: str, scope: Mapping[str, str]) -> Block:
    """The block for ``prompt``: the few memories relevant to it, or nothing.

    No threshold is passed, so search decides whether anything in the scope is relevant at
    all (``search.relevance_check``) and returns nothing when nothing is; only memories scored at
    least ``hooks.recall_min_score`` are injected, unasked, into the prompt. A prompt longer than
    a query may be is searched by its start: the embedding reads no further anyway, and a
    pasted log must not cost the prompt its recall."""
    query = prompt.strip()[: config.limits.max_text_chars]
    if not query:
        return Block()
    hits = engine.search(query, **scope, top_k=config.hooks.recall_top_k, min_score=config.hooks.recall_min_score)
    return render([hit.memory for hit in hits], PROMPT_HEADING, config.hooks.max_block_chars)


def for_session(engine: Engine, config: Config, project: Project | None, scope: Mapping[str, str]) -> Block:
    """The block for a session starting in ``project``: the scope's standing preferences
    (``store.ranking.standing``, the newest ``hooks.session_standing``), what the project's name
    recalls, then the most recent memories captured in it (``hooks.session_recent``), each shown
    once. No project, no block. A memory captured in another project of the same name is neither:
    the name is only a label, so its search leaves out what was captured elsewhere.

    The name is searched with ``search.relevance_floor`` as its threshold: a bare name the
    scope knows always passes the relevance decision, and the gate alone (``search.threshold``)
    would then let in memories that merely share a word or two with it."""
    if project is None:
        return Block()
    standing = engine.list(**scope, filters={KEY: True}, limit=config.hooks.session_standing)
    hits = engine.search(project.name, **scope, top_k=config.hooks.recall_top_k,
                         threshold=config.search.relevance_floor, filters=project.not_captured_elsewhere())
    found = [hit.memory for hit in hits]
    recent = engine.list(**scope, filters=project.captured_here(), limit=config.hooks.session_recent)
    memories = list({memory.id: memory for memory in [*standing, *found, *recent]}.values())
    return render(memories, session_heading(project.name), config.hooks.max_block_chars)
