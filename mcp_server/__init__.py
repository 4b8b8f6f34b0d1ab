"""trimem's front ends, one sub-package each over ``store.Engine``:

- ``tools``: the MCP server and its tools (stdio and HTTP);
- ``service``: the HTTP service for many users (tokens bound to scopes, limits, access log);
- ``cli``: the ``trimem`` command line, with its table renderers;
- ``ui``: the local page.

What they share: ``call_scope`` (the scope a call means), ``models`` (the replies' shapes)
and ``replies`` (the replies' words). Each makes one engine call per tool or command and
only parses, scopes and formats around it. Importing this package loads no model.
"""
