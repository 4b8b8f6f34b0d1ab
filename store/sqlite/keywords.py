"""trimem's own keyword index in an SQLite file, ranked with FTS5's BM25 over one user's statistics.

FTS5's ``bm25()`` counts N, n(t) and avgdl over the whole file, so one user's raw scores moved
when another user wrote a word, and said how often. The rule of ``store.sql.keywords`` counts them
over the user the query is scoped to, as PostgreSQL does, and this module holds its SQL:

- ``memory_terms`` (user, term, memory, frequency, length): each memory's postings, filed under
  its own user and keyed by user first, so a query reads only its user's postings of its terms,
  each with its memory's length in terms, so a posting is scored without reading its memory;
- ``memories.terms``: a memory's length in terms, |D|;
- ``keyword_users`` (user, memories, terms): each user's N and total length, kept in step with
  ``memories`` by triggers (migration m005), so a search reads one row instead of counting
  the user's memories.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import apsw

from store.sql.keywords import term_frequencies, term_score_sql, weight_sql

KEYWORD_WEIGHTS_SQL = f"""
WITH query(term, repeats) AS (
    SELECT value, count(*) FROM json_each(?) GROUP BY value
), corpus(documents, tokens) AS (
    SELECT total(u.memories), max(total(u.terms), 1.0) FROM keyword_users u WHERE {{users}}
), weights(term, weight) AS (
    SELECT q.term, {weight_sql("q.repeats", "c.documents", "count(*)", "max")}
    FROM query q CROSS JOIN corpus c CROSS JOIN memory_terms p
    WHERE p.term = q.term AND {{postings}}
    GROUP BY q.term
)"""
"""What both keyword statements start from: the query's terms, the user's N and total length,
and each term's weight. Its parameters: the query terms (a JSON array), those of ``{users}``
(the user the counts are over, on ``u``) and of ``{postings}`` (the same, on ``p``)."""

SCORE_SQL = term_score_sql("w.weight", "p.frequency", "p.length", "(c.tokens / c.documents)")
"""A posting's share of its memory's score, from the posting alone (it carries the memory's length)."""

BM25_SQL = KEYWORD_WEIGHTS_SQL + f"""
SELECT m.rowid, sum({SCORE_SQL}) AS score
FROM weights w CROSS JOIN corpus c CROSS JOIN memory_terms p CROSS JOIN memories m
WHERE p.term = w.term AND {{postings}} AND m.rowid = p.memory_rowid AND {{scope}} AND ({{live}})
GROUP BY m.rowid
ORDER BY score DESC, m.rowid
LIMIT ?
"""
"""The keyword signal over the memories the scope and filters let through. Its parameters
after ``KEYWORD_WEIGHTS_SQL``'s: those of ``{postings}`` again, of ``{scope}`` and ``{live}``
(the memories ranked, on ``m``), and the limit. ``CROSS JOIN`` fixes the order SQLite joins in:
from the few query terms into the user's postings of each (the primary key's range), then to
each posting's memory by key; left to itself the planner may walk the scope's memories through
their scope index instead."""

USER_POSTINGS_SQL = """
WITH counted AS MATERIALIZED (
    SELECT p.term, count(*) AS n FROM memory_terms p
    WHERE {postings} AND p.term IN (SELECT value FROM json_each(?)) GROUP BY p.term
)
SELECT NULL, total(u.memories), max(total(u.terms), 1.0), NULL, NULL, NULL, {expired}, NULL
FROM keyword_users u WHERE {users}
UNION ALL
SELECT c.term, NULL, NULL, w.memories, w.frequencies, w.lengths, NULL, c.n
FROM counted c LEFT JOIN (
    SELECT p.term, json_group_array(p.memory_rowid) AS memories, json_group_array(p.frequency) AS frequencies,
        json_group_array(p.length) AS lengths
    FROM memory_terms p WHERE {postings} AND p.term IN (SELECT term FROM counted WHERE n <= ?) GROUP BY p.term
) w ON w.term = c.term
"""
"""What the keyword signal over a user's whole scope reads first, to score in the process
(``store.sql.keywords``): one row (its term NULL) with the user's N and total length and whether
any of its memories has expired (``{expired}``, ``EXPIRED_SQL`` or FALSE when no day is asked
about), then one row for each of the query's terms the user wrote, with how many memories hold
it and, when that is at most the last parameter, its postings as JSON arrays of memories,
frequencies and lengths. Its parameters: those of ``{postings}`` (on ``p``), the query terms (a
JSON array), those of ``{expired}`` and of ``{users}`` (on ``u``), those of ``{postings}`` again,
and the most postings a term read whole may have."""

TERM_POSTINGS_SQL = """
SELECT p.term, json_group_array(p.memory_rowid), json_group_array(p.frequency), json_group_array(p.length)
FROM memory_terms p WHERE {postings} AND p.term IN (SELECT value FROM json_each(?)) AND {among} GROUP BY p.term
"""
"""A user's postings of some terms (a JSON array), all of them or those of some memories
(``{among}``), as the same JSON arrays."""

EXPIRED_SQL = "EXISTS (SELECT 1 FROM memories e INDEXED BY memories_expiration WHERE {user} AND {expired})"
"""Whether a memory of the user (``{user}``, on ``e``) has expired (``{expired}``), read through its
dated memories only."""

POST_SQL = (
    "INSERT INTO memory_terms(user_id, term, memory_rowid, frequency, length) "
    "SELECT m.user_id, t.key, m.rowid, t.value, m.terms FROM memories m, json_each(?) t WHERE m.rowid = ?"
)
"""A memory's postings (a JSON object of term → frequency), filed under the user of its own row
with its length in terms (``memories.terms``, stored first)."""

USERS_SQL = "SELECT user_id, count(*) AS memories, sum(terms) AS terms FROM memories GROUP BY user_id"
"""Each user's N and total length, counted from ``memories`` (what ``keyword_users`` holds)."""


def users_sql(user_id: str) -> tuple[str, str, list[str]]:
    """Whose memories the statistics are counted over, as ``{users}`` (on ``u``) and
    ``{postings}`` (on ``p``), and the parameters of each: the scope's user, or every user when
    it names none. On the postings every user is the users of ``keyword_users`` rather than no
    condition, so the scan still seeks each user's range of a term (the primary key leads with
    the user) instead of reading every posting."""
    if user_id:
        return "u.user_id = ?", "p.user_id = ?", [user_id]
    return "1", "p.user_id IN (SELECT user_id FROM keyword_users)", []


def post_terms(conn: apsw.Connection, rowid: int, frequencies: Mapping[str, int]) -> None:
    """Replace a memory's postings by ``frequencies`` (``store.sql.keywords.term_frequencies`` of its
    lemmas; the caller has stored their total in ``memories.terms``, where the triggers count it)."""
    conn.execute("DELETE FROM memory_terms WHERE memory_rowid = ?", (rowid,))
    if frequencies:
        conn.execute(POST_SQL, (json.dumps(frequencies, ensure_ascii=False), rowid))


def misposted(conn: apsw.Connection) -> list[tuple[int, str]]:
    """(rowid, id) of each memory whose postings or length in terms are not those of its
    ``text_lemmatized``, or whose postings carry another length: the content check of ``trimem
    doctor``, a read (so it runs on a read-only file too)."""
    rows = conn.execute(
        "SELECT m.rowid, m.id, m.text_lemmatized, m.terms, (SELECT json_group_object(p.term, p.frequency) "
        "FROM memory_terms p WHERE p.memory_rowid = m.rowid AND p.user_id = m.user_id), EXISTS (SELECT 1 "
        "FROM memory_terms p WHERE p.memory_rowid = m.rowid AND p.user_id = m.user_id AND p.length <> m.terms) "
        "FROM memories m"
    )
    return [
        (rowid, memory_id)
        for rowid, memory_id, text_lemmatized, terms, posted, mislengthed in rows
        if terms != (expected := term_frequencies(text_lemmatized)).total() or json.loads(posted) != expected
        or mislengthed
    ]


def rebuild(conn: apsw.Connection) -> None:
    """Post every memory again from its ``text_lemmatized`` and count each user again: what
    ``trimem doctor --repair`` does when a check of the keyword index fails."""
    conn.execute("DELETE FROM memory_terms")
    for rowid, text_lemmatized in conn.execute("SELECT rowid, text_lemmatized FROM memories").fetchall():
        frequencies = term_frequencies(text_lemmatized)
        conn.execute("UPDATE memories SET terms = ? WHERE rowid = ?", (frequencies.total(), rowid))
        post_terms(conn, rowid, frequencies)
    conn.execute("DELETE FROM keyword_users")
    conn.execute(f"INSERT INTO keyword_users(user_id, memories, terms) {USERS_SQL}")
