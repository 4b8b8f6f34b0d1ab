"""Claude Code hooks: what they run on both of their paths into trimem, and their place in
Claude Code's settings (``settings.py``, written by ``trimem hooks install``).

How it works: before each prompt (``UserPromptSubmit``) the prompt is searched in the default
user's memories, every run, with the relevance decision on, so a prompt nothing answers adds
nothing at all; at session start (``SessionStart``) the project (its repository root, else the
working folder: ``project.py``) is searched by name and its most recent memories are listed. What was found is one block between
``<trimem-memories>`` tags, whole lines within ``hooks.max_block_chars`` (``block.py``). When
asked (``capture``; off by default, since keeping every prompt is the user's choice), the
prompt is then stored in the session's run, without its ``<private>`` parts (``private.py``),
its secrets (``secrets.py``) and any block trimem injected (``capture.py``), so recall never
feeds capture and a prompt never recalls itself.

Two paths reach it: the ``recall_for_prompt`` MCP tool, which an ``mcp_tool`` hook calls on
the already running server, and ``trimem hook prompt|session``, a ``command`` hook reading the
hook's JSON on stdin (``payload.py``). Neither ever breaks a session: a failure injects nothing
and says one line to the log. These modules make ``Engine`` calls only (search, list, add).
"""
