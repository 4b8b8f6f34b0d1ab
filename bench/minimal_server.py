"""The cold-start floor: the smallest MCP server, one trivial tool, nothing else loaded.

Spawned by ``bench/coldstart.py`` beside ``trimem serve``: whatever trimem's start-up
costs above this is ours (config, database, models), the rest is Python and the SDK.
"""

from mcp.server.mcpserver import MCPServer

server = MCPServer("minimal")


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


if __name__ == "__main__":
    server.run("stdio")
