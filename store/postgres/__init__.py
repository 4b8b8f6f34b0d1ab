"""The PostgreSQL backend: pgvector and trimem's own keyword index, over psycopg 3 and its
pool; the only place psycopg and pgvector are imported."""

from .backend import PostgresBackend

__all__ = ["PostgresBackend"]
