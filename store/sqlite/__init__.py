"""The SQLite backend: one file with sqlite-vec and trimem's keyword postings, the only place
apsw and sqlite_vec are imported."""

from .backend import SQLiteBackend

__all__ = ["SQLiteBackend"]
