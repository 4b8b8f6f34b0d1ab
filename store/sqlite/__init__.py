"""The SQLite storage backend: what only SQLite (apsw, JSON1, sqlite-vec) knows."""
