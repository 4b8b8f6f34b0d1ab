"""Reaching a PostgreSQL server: the place it names, the pool, and the errors a person reads.

Every pooled connection names the schema its code knows (``connection_schema_version``), and
every driver error becomes a ``TrimemError`` of one line that names the server and the
setting to change (``store.database_url``, ``TRIMEM_DATABASE_URL``), never the password,
so neither the CLI nor a tool result shows a driver traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
from pgvector.psycopg import register_vector
from psycopg import errors as pg
from psycopg_pool import ConnectionPool, PoolTimeout

from store.errors import DatabaseUnavailable, DiskFull, InvalidArgument, SchemaMismatch, TrimemError, WriteConflict

from . import schema

SETTING = "store.database_url (TRIMEM_DATABASE_URL)"
CONNECT_TIMEOUT_S = 5
POOL_WAIT_S = 30
"""How long a call waits for a free connection of the pool before it is refused."""
FIRST_WAIT_S = 1.0
"""How long a call waits for a pooled connection before it asks whether the server answers at all."""


def connect(url: str, where: str) -> psycopg.Connection:
    """One connection in autocommit mode (transactions are explicit), or a one-line error."""
    with translated(where):
        return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)


def connection_schema_version(conn: psycopg.Connection) -> None:
    """Name, for the session, the schema this code knows, so the guard triggers
    (``schema.m012_schema_guard``) let its writes through: a session of a trimem from before
    the guard names none and is refused, as is one naming an older schema than a later
    migration raised the triggers to. Read when the connection opens, so a running server keeps
    the number its code had."""
    conn.execute("SELECT set_config(%s, %s, false)", (schema.SCHEMA_SETTING, str(schema.SCHEMA_VERSION)))


def configure(conn: psycopg.Connection) -> None:
    """Each pooled connection as it opens: pgvector's types, and the schema its code knows."""
    register_vector(conn)
    connection_schema_version(conn)


class Pool:
    """Up to ``size`` connections to one server, with pgvector's types registered on each.

    Each connection is checked as it is handed out (``check_connection``: one empty statement
    when it was idle), so the connections a restarted server dropped are replaced instead of
    failing a call each. A call that finds none free waits ``FIRST_WAIT_S``, then tries one
    connection of its own: a server that is down (or refuses this role) is said at once, with
    libpq's reason, while a busy pool is waited for up to ``POOL_WAIT_S`` in all. So an outage
    costs a caller about a second, not the whole wait, on every path: the token check too.
    """

    def __init__(self, url: str, where: str, size: int) -> None:
        self._url, self._where = url, where
        with translated(where):
            self._pool = ConnectionPool(
                url, min_size=1, max_size=size, timeout=POOL_WAIT_S, open=True, configure=configure,
                check=ConnectionPool.check_connection,
                kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
            )

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A connection of the pool for one transaction, handed back afterwards."""
        with translated(self._where):
            try:
                conn = self._pool.getconn(timeout=FIRST_WAIT_S)
            except PoolTimeout:
                connect(self._url, self._where).close()  # DatabaseUnavailable when the server does not answer
                conn = self._pool.getconn(timeout=POOL_WAIT_S - FIRST_WAIT_S)
            try:
                with conn:
                    yield conn
            finally:
                self._pool.putconn(conn)

    def close(self) -> None:
        self._pool.close()


@contextlib.contextmanager
def translated(where: str) -> Iterator[None]:
    """Driver errors as the one-line ``TrimemError`` a person can act on."""
    try:
        yield
    except psycopg.Error as exc:
        raise driver_error(exc, where) from None
    except PoolTimeout:
        raise DatabaseUnavailable(
            f"no connection to {where} came free within {POOL_WAIT_S} s; raise store.database_pool_size or the "
            "server's max_connections"
        ) from None


def driver_error(exc: psycopg.Error, where: str) -> TrimemError:
    """What a psycopg error means for the person running trimem."""
    detail = (getattr(exc, "diag", None) and exc.diag.message_primary) or str(exc).strip().splitlines()[0]
    if isinstance(exc, pg.DiskFull):
        return DiskFull(where)
    if exc.sqlstate == schema.SCHEMA_GUARD_STATE:
        return SchemaMismatch(detail)
    # A NUL is refused by psycopg for a bound parameter, and by the server in a COPY's text
    if isinstance(exc, pg.UntranslatableCharacter) or isinstance(exc, psycopg.DataError) and (
        "NUL" in str(exc) or "0x00" in detail
    ):
        return InvalidArgument("PostgreSQL cannot store the character U+0000 (NUL) in a text, an id or metadata; "
                               "remove it and send the rest")
    if 'extension "vector"' in detail:
        how = ("ask its owner or a superuser to run CREATE EXTENSION vector in it"
               if isinstance(exc, pg.InsufficientPrivilege) else
               "install pgvector on the server (e.g. apt install postgresql-18-pgvector; "
               "https://github.com/pgvector/pgvector#installation)")
        return DatabaseUnavailable(f"{where} lacks the pgvector extension trimem stores vectors with ({detail}): {how}")
    if isinstance(exc, (pg.SerializationFailure, pg.DeadlockDetected, pg.ForeignKeyViolation, pg.UniqueViolation)):
        return WriteConflict(f"another server wrote the same memories at the same moment ({detail}); nothing of "
                             "this write was kept. Send it again")
    if isinstance(exc, pg.InsufficientPrivilege):
        return DatabaseUnavailable(f"{where} refused this role: {detail}. Grant it the rights on the trimem tables, or "
                                   f"name a role that has them in {SETTING}")
    if isinstance(exc, pg.ReadOnlySqlTransaction):
        return DatabaseUnavailable(f"{where} is read-only ({detail}); writes need the primary server")
    if isinstance(exc, psycopg.OperationalError):
        text = str(exc)
        if "password authentication failed" in text or "no password supplied" in text:
            return DatabaseUnavailable(f"{where} refused the password of its user; correct it in {SETTING}")
        if "does not exist" in text:
            return DatabaseUnavailable(f"{where}: {detail}; create it (createdb, CREATE ROLE) or correct {SETTING}")
        return DatabaseUnavailable(f"cannot reach the PostgreSQL server of {where} ({_reason(text)}); start it, "
                                   f"or correct {SETTING}")
    return TrimemError(f"{where} refused a statement: {detail}")


def _reason(text: str) -> str:
    """The last line libpq gives that says why, without the address list it repeats."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reason = lines[-1] if lines else "no reason given"
    return reason.split(": ", 1)[-1] if reason.startswith("connection to server") else reason
