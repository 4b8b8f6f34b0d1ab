"""The MCP server: trimem's tools, registered on one ``MCPServer`` by ``server.build_server``."""
