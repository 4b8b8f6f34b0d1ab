"""The MCP server: trimem's tools as plain functions (``memories.py``, ``search.py``), registered on
one ``MCPServer`` by ``server.build_server``."""
