"""``python -m mcp_server``: the ``trimem`` command, serving over stdio when given no command."""

import sys

from mcp_server.cli import cli

if __name__ == "__main__":
    cli(sys.argv[1:] or ["serve"], prog_name="trimem")
