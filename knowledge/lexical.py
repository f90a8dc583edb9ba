"""The lexical (full-text) index of the chunks, kept in step with them, and BM25 ranking over it.

A chunk's terms are the words of `knowledge.embedding.tokenize` less English stop words, stemmed by the database.
On SQLite an FTS5 table (`knowledge_chunk_fts`) with terms prefixed by the owner's id, so one owner's statistics
are its own; on PostgreSQL a tsvector table with a GIN index, ranked by BM25 in one statement with per-owner
statistics kept by triggers. The "owner" of an entry is its chunk's collection, by `Collection.key` (the column
keeps its name, `owner_id`: a personal collection's key is its owner's user id, migration 0008). `index_add`
writes a document's rows in the transaction that inserts its chunks, and
a trigger deletes a chunk's row with the chunk: nothing is rebuilt for a query.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from itertools import filterfalse

import numpy as np
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from knowledge.embedding import tokenize
from knowledge.ranking import Ranker, Ranking, merged

MAX_QUERY_TERMS = 64  # the first distinct terms of a query that are looked up (a 32,000-character query...)
COMMON_CHUNKS = 2000  # a term in more of the owner's chunks than this is too common to rank by
BM25_K1 = 1.2
BM25_B = 0.75

# Short, common English words that say nothing about a passage (PostgreSQL's `english` list drops these too).
STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here hers
herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
once only or other our ours ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were what when where
which while who whom why will with would you your yours yourself yourselves
""".split())

FTS_TABLE = "knowledge_chunk_fts"
PG_TABLE = "knowledge_chunklexical"


# From a word's start (the lookbehind), lazily to its first lower-upper step: linear in the text's length.
_CAMEL_WORD = re.compile(r"(?<![A-Za-z])[A-Za-z]*?[a-z][A-Z][A-Za-z]*")
_CAMEL_STEP = re.compile(r"[a-z][A-Z]")
_CAMEL_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


def has_camel_case(text: str) -> bool:
    """Whether a lower-case letter is followed by an upper-case one anywhere in text (a camelCase word may be)."""
    if not text.isascii():
        return _CAMEL_STEP.search(text) is not None
    # A byte scan with NumPy: Python's regex engine walks a whole document at ~10 MB/s, this at hundreds.
    codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    lower = (codes >= 97) & (codes <= 122)
    upper = (codes >= 65) & (codes <= 90)
    return bool(np.any(lower[:-1] & upper[1:]))


def terms(text: str, tokens: Sequence[str] | None = None, *, camel: bool = True) -> list[str]:
    """The indexed words of text: those of tokenize() less stop words, then the parts of camelCase words.

    A camelCase or CapWords identifier (`DeprecationWarning`, `assertEqual`) is a word as tokenize() gives it
    and adds its lower-cased parts (`deprecation`, `warning`), so a question in plain words finds the code
    that names it (snake_case is split by tokenize() already). tokens: tokenize(text), when the caller has it;
    camel=False: the caller knows text has no camelCase word (has_camel_case of a whole document is False).
    """
    words = list(filterfalse(STOP_WORDS.__contains__, tokenize(text) if tokens is None else tokens))
    if not camel or not _CAMEL_STEP.search(text):  # most prose: no identifier to split
        return words
    for identifier in _CAMEL_WORD.findall(text):
        words.extend(part.lower() for part in _CAMEL_PART.findall(identifier))
    return words


def stored_bytes(words: Sequence[str] | str) -> int:
    """What a chunk's lexical entry holds, as the quota counts it: its terms twice (a copy and the postings).

    words: the terms, or already joined by single spaces (`joined`).
    """
    return 2 * len((words if isinstance(words, str) else " ".join(words)).encode("utf-8"))


def joined(words: Sequence[str]) -> str:
    """A chunk's terms as the index stores them: joined by single spaces (a term never holds a space)."""
    return " ".join(words)


def _owner_terms(owner_id: int, text: str) -> str:
    """Each term of a joined text prefixed with the owner's id: one C-level replace, not a join per term."""
    if not text:
        return ""
    prefix = f"{owner_id}x"
    return prefix + text.replace(" ", f" {prefix}")


# --- the schema (migration 0003) --------------------------------------------------------------------

def schema_create(connection: BaseDatabaseWrapper) -> None:
    with connection.cursor() as cursor:
        for statement in _SCHEMA[connection.vendor][0]:
            cursor.execute(statement)


def schema_drop(connection: BaseDatabaseWrapper) -> None:
    with connection.cursor() as cursor:
        for statement in _SCHEMA[connection.vendor][1]:
            cursor.execute(statement)


_SCHEMA = {
    "sqlite": (
        [
            # tokenchars: a decimal number stays one term ("3.14"), as tokenize() gives it.
            f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(terms, "
            "tokenize = \"porter unicode61 remove_diacritics 2 tokenchars '.,'\")",
            f"CREATE TRIGGER {FTS_TABLE}_chunk_delete AFTER DELETE ON knowledge_chunk "
            f"BEGIN DELETE FROM {FTS_TABLE} WHERE rowid = old.id; END",
        ],
        [f"DROP TRIGGER IF EXISTS {FTS_TABLE}_chunk_delete", f"DROP TABLE IF EXISTS {FTS_TABLE}"],
    ),
    "postgresql": (
        [
            f"CREATE TABLE {PG_TABLE} (chunk_id bigint PRIMARY KEY, owner_id integer NOT NULL, "
            "length integer NOT NULL, terms tsvector NOT NULL)",
            f"CREATE INDEX {PG_TABLE}_terms ON {PG_TABLE} USING gin (terms)",
            f"CREATE INDEX {PG_TABLE}_owner ON {PG_TABLE} (owner_id)",
            # No foreign key (Django's test flush truncates knowledge_chunk alone): triggers keep it in step.
            f"CREATE FUNCTION {PG_TABLE}_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"DELETE FROM {PG_TABLE} WHERE chunk_id IN (SELECT id FROM gone); RETURN NULL; END $$",
            f"CREATE TRIGGER {PG_TABLE}_delete AFTER DELETE ON knowledge_chunk REFERENCING OLD TABLE AS gone "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {PG_TABLE}_delete()",
            f"CREATE FUNCTION {PG_TABLE}_truncate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"TRUNCATE {PG_TABLE}; RETURN NULL; END $$",
            f"CREATE TRIGGER {PG_TABLE}_truncate AFTER TRUNCATE ON knowledge_chunk "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {PG_TABLE}_truncate()",
        ],
        [
            f"DROP TRIGGER IF EXISTS {PG_TABLE}_truncate ON knowledge_chunk",
            f"DROP TRIGGER IF EXISTS {PG_TABLE}_delete ON knowledge_chunk",
            f"DROP FUNCTION IF EXISTS {PG_TABLE}_truncate()",
            f"DROP FUNCTION IF EXISTS {PG_TABLE}_delete()",
            f"DROP TABLE IF EXISTS {PG_TABLE}",
        ],
    ),
}


PG_STATS = "knowledge_lexicalstats"

# Migration 0005 (PostgreSQL): each owner's row count and total length, kept in the transactions that change
# them, so a query reads one row instead of counting the owner's rows (the BM25 statistics N and avgdl).
_PG_STATS_SCHEMA = (
    [
        f"CREATE TABLE {PG_STATS} (owner_id integer PRIMARY KEY, chunks bigint NOT NULL, length bigint NOT NULL)",
        f"INSERT INTO {PG_STATS} (owner_id, chunks, length) SELECT owner_id, count(*), coalesce(sum(length), 0) "
        f"FROM {PG_TABLE} GROUP BY owner_id",
        # Statement triggers on the index itself: whatever adds or removes its rows keeps the statistics.
        f"CREATE FUNCTION {PG_STATS}_add() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"INSERT INTO {PG_STATS} (owner_id, chunks, length) SELECT owner_id, count(*), coalesce(sum(length), 0) "
        f"FROM added GROUP BY owner_id ON CONFLICT (owner_id) DO UPDATE SET "
        f"chunks = {PG_STATS}.chunks + EXCLUDED.chunks, length = {PG_STATS}.length + EXCLUDED.length; "
        "RETURN NULL; END $$",
        f"CREATE TRIGGER {PG_STATS}_add AFTER INSERT ON {PG_TABLE} REFERENCING NEW TABLE AS added "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {PG_STATS}_add()",
        f"CREATE FUNCTION {PG_STATS}_remove() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"UPDATE {PG_STATS} s SET chunks = s.chunks - g.n, length = s.length - g.l FROM "
        "(SELECT owner_id, count(*) AS n, coalesce(sum(length), 0) AS l FROM gone GROUP BY owner_id) g "
        "WHERE s.owner_id = g.owner_id; RETURN NULL; END $$",
        f"CREATE TRIGGER {PG_STATS}_remove AFTER DELETE ON {PG_TABLE} REFERENCING OLD TABLE AS gone "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {PG_STATS}_remove()",
        f"CREATE FUNCTION {PG_STATS}_truncate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"TRUNCATE {PG_STATS}; RETURN NULL; END $$",
        f"CREATE TRIGGER {PG_STATS}_truncate AFTER TRUNCATE ON {PG_TABLE} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {PG_STATS}_truncate()",
    ],
    [
        f"DROP TRIGGER IF EXISTS {PG_STATS}_truncate ON {PG_TABLE}",
        f"DROP TRIGGER IF EXISTS {PG_STATS}_remove ON {PG_TABLE}",
        f"DROP TRIGGER IF EXISTS {PG_STATS}_add ON {PG_TABLE}",
        f"DROP FUNCTION IF EXISTS {PG_STATS}_truncate()",
        f"DROP FUNCTION IF EXISTS {PG_STATS}_remove()",
        f"DROP FUNCTION IF EXISTS {PG_STATS}_add()",
        f"DROP TABLE IF EXISTS {PG_STATS}",
    ],
)


PG_TERMS = "knowledge_lexicalterms"

# Migration 0006 (PostgreSQL): each owner's chunks per lexeme (the document frequency), kept by statement
# triggers on the index like the statistics above, so a query reads its words' frequencies by primary key:
# the common-word rule (COMMON_CHUNKS) and BM25's idf without touching the chunks. Rows are written in lexeme
# order so that two ingests of one owner lock them in the same order.
_PG_TERMS_SCHEMA = (
    [
        f"CREATE TABLE {PG_TERMS} (owner_id integer NOT NULL, lexeme text NOT NULL, chunks integer NOT NULL, "
        "PRIMARY KEY (owner_id, lexeme))",
        f"INSERT INTO {PG_TERMS} (owner_id, lexeme, chunks) SELECT owner_id, u.lexeme, count(*) "
        f"FROM {PG_TABLE}, unnest(terms) AS u GROUP BY owner_id, u.lexeme",
        f"CREATE FUNCTION {PG_TERMS}_add() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"INSERT INTO {PG_TERMS} (owner_id, lexeme, chunks) SELECT a.owner_id, u.lexeme, count(*) "
        "FROM added a, unnest(a.terms) AS u GROUP BY a.owner_id, u.lexeme ORDER BY a.owner_id, u.lexeme "
        f"ON CONFLICT (owner_id, lexeme) DO UPDATE SET chunks = {PG_TERMS}.chunks + EXCLUDED.chunks; "
        "RETURN NULL; END $$",
        f"CREATE TRIGGER {PG_TERMS}_add AFTER INSERT ON {PG_TABLE} REFERENCING NEW TABLE AS added "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {PG_TERMS}_add()",
        f"CREATE FUNCTION {PG_TERMS}_remove() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"UPDATE {PG_TERMS} t SET chunks = t.chunks - g.n FROM "
        "(SELECT o.owner_id, u.lexeme, count(*) AS n FROM gone o, unnest(o.terms) AS u "
        "GROUP BY o.owner_id, u.lexeme ORDER BY o.owner_id, u.lexeme) g "
        "WHERE t.owner_id = g.owner_id AND t.lexeme = g.lexeme; "
        f"DELETE FROM {PG_TERMS} t WHERE t.chunks <= 0 AND t.owner_id IN (SELECT DISTINCT owner_id FROM gone); "
        "RETURN NULL; END $$",
        f"CREATE TRIGGER {PG_TERMS}_remove AFTER DELETE ON {PG_TABLE} REFERENCING OLD TABLE AS gone "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {PG_TERMS}_remove()",
        f"CREATE FUNCTION {PG_TERMS}_truncate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"TRUNCATE {PG_TERMS}; RETURN NULL; END $$",
        f"CREATE TRIGGER {PG_TERMS}_truncate AFTER TRUNCATE ON {PG_TABLE} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {PG_TERMS}_truncate()",
    ],
    [
        f"DROP TRIGGER IF EXISTS {PG_TERMS}_truncate ON {PG_TABLE}",
        f"DROP TRIGGER IF EXISTS {PG_TERMS}_remove ON {PG_TABLE}",
        f"DROP TRIGGER IF EXISTS {PG_TERMS}_add ON {PG_TABLE}",
        f"DROP FUNCTION IF EXISTS {PG_TERMS}_truncate()",
        f"DROP FUNCTION IF EXISTS {PG_TERMS}_remove()",
        f"DROP FUNCTION IF EXISTS {PG_TERMS}_add()",
        f"DROP TABLE IF EXISTS {PG_TERMS}",
    ],
)


PG_POSTINGS = "knowledge_lexicalpostings"

# Migration 0007 (PostgreSQL): the index's postings, a row per (owner, lexeme, chunk) with the lexeme's count in
# the chunk (tf) and the chunk's length, kept by statement triggers on the index like the tables above. The
# primary key carries tf and length, so BM25 over a lexeme's chunks is one index-only range scan: no chunk's
# tsvector is read and decoded per query (4-7x faster than scoring from the tsvectors through the GIN index,
# bench/RESULTS.md), at the cost of a row per distinct lexeme of each chunk (about 4x the index's own size).
_PG_POSTINGS_SCHEMA = (
    [
        f"CREATE TABLE {PG_POSTINGS} (owner_id integer NOT NULL, lexeme text NOT NULL, chunk_id bigint NOT NULL, "
        "tf integer NOT NULL, length integer NOT NULL, PRIMARY KEY (owner_id, lexeme, chunk_id) INCLUDE (tf, length))",
        f"INSERT INTO {PG_POSTINGS} (owner_id, lexeme, chunk_id, tf, length) "
        "SELECT l.owner_id, u.lexeme, l.chunk_id, coalesce(array_length(u.positions, 1), 1), l.length "
        f"FROM {PG_TABLE} l, unnest(l.terms) AS u",
        f"CREATE FUNCTION {PG_POSTINGS}_add() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"INSERT INTO {PG_POSTINGS} (owner_id, lexeme, chunk_id, tf, length) "
        "SELECT a.owner_id, u.lexeme, a.chunk_id, coalesce(array_length(u.positions, 1), 1), a.length "
        "FROM added a, unnest(a.terms) AS u; RETURN NULL; END $$",
        f"CREATE TRIGGER {PG_POSTINGS}_add AFTER INSERT ON {PG_TABLE} REFERENCING NEW TABLE AS added "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {PG_POSTINGS}_add()",
        # By primary key: the gone rows' own lexemes name their postings.
        f"CREATE FUNCTION {PG_POSTINGS}_remove() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"DELETE FROM {PG_POSTINGS} p USING (SELECT o.owner_id, u.lexeme, o.chunk_id FROM gone o, "
        "unnest(o.terms) AS u) g WHERE p.owner_id = g.owner_id AND p.lexeme = g.lexeme AND p.chunk_id = g.chunk_id; "
        "RETURN NULL; END $$",
        f"CREATE TRIGGER {PG_POSTINGS}_remove AFTER DELETE ON {PG_TABLE} REFERENCING OLD TABLE AS gone "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {PG_POSTINGS}_remove()",
        f"CREATE FUNCTION {PG_POSTINGS}_truncate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"TRUNCATE {PG_POSTINGS}; RETURN NULL; END $$",
        f"CREATE TRIGGER {PG_POSTINGS}_truncate AFTER TRUNCATE ON {PG_TABLE} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {PG_POSTINGS}_truncate()",
    ],
    [
        f"DROP TRIGGER IF EXISTS {PG_POSTINGS}_truncate ON {PG_TABLE}",
        f"DROP TRIGGER IF EXISTS {PG_POSTINGS}_remove ON {PG_TABLE}",
        f"DROP TRIGGER IF EXISTS {PG_POSTINGS}_add ON {PG_TABLE}",
        f"DROP FUNCTION IF EXISTS {PG_POSTINGS}_truncate()",
        f"DROP FUNCTION IF EXISTS {PG_POSTINGS}_remove()",
        f"DROP FUNCTION IF EXISTS {PG_POSTINGS}_add()",
        f"DROP TABLE IF EXISTS {PG_POSTINGS}",
    ],
)


def _on_postgresql(connection: BaseDatabaseWrapper, statements: list[str]) -> None:
    """Run a PostgreSQL-only schema's statements (migrations 0005-0007); nothing on another database."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)


def postings_schema_create(connection: BaseDatabaseWrapper) -> None:
    _on_postgresql(connection, _PG_POSTINGS_SCHEMA[0])


def postings_schema_drop(connection: BaseDatabaseWrapper) -> None:
    _on_postgresql(connection, _PG_POSTINGS_SCHEMA[1])


def terms_schema_create(connection: BaseDatabaseWrapper) -> None:
    _on_postgresql(connection, _PG_TERMS_SCHEMA[0])


def terms_schema_drop(connection: BaseDatabaseWrapper) -> None:
    _on_postgresql(connection, _PG_TERMS_SCHEMA[1])


def stats_schema_create(connection: BaseDatabaseWrapper) -> None:
    _on_postgresql(connection, _PG_STATS_SCHEMA[0])


def stats_schema_drop(connection: BaseDatabaseWrapper) -> None:
    _on_postgresql(connection, _PG_STATS_SCHEMA[1])


def supported(connection: BaseDatabaseWrapper) -> bool:
    return connection.vendor in _SCHEMA


# --- writes -----------------------------------------------------------------------------------------

def index_add(*, owner_id: int, chunk_ids: Sequence[int], words: Sequence[Sequence[str]] | None = None,
              texts: Sequence[str] | None = None, connection: BaseDatabaseWrapper | None = None) -> None:
    """Index chunks of owner (chunk_ids[i] has the terms words[i], see `terms`), in the caller's transaction.

    texts: the terms already joined (`joined(words[i])`), given instead of words when the caller has them.
    """
    db = connection or connections[DEFAULT_DB_ALIAS]
    if not chunk_ids or not supported(db):
        return
    if texts is None:
        texts = [joined(chunk_words) for chunk_words in (words or [])]
    with db.cursor() as cursor:
        if db.vendor == "sqlite":
            cursor.executemany(f"INSERT INTO {FTS_TABLE} (rowid, terms) VALUES (%s, %s)",
                               [(chunk_id, _owner_terms(owner_id, text))
                                for chunk_id, text in zip(chunk_ids, texts, strict=True)])
        else:
            lengths = [text.count(" ") + 1 if text else 0 for text in texts]
            cursor.execute(
                f"INSERT INTO {PG_TABLE} (chunk_id, owner_id, length, terms) "
                "SELECT c, %s, n, to_tsvector('english', t) FROM unnest(%s::bigint[], %s::integer[], %s::text[]) "
                "AS rows(c, n, t)",
                [owner_id, list(chunk_ids), lengths, list(texts)])


# --- reads ------------------------------------------------------------------------------------------

def query_terms(query: str) -> list[str]:
    """The distinct terms of a query that are looked up: at most MAX_QUERY_TERMS, in order."""
    return list(dict.fromkeys(terms(query)))[:MAX_QUERY_TERMS]


def lexical_rank(owner_id: int, query: str, k: int) -> Ranking:
    """The owner's k best chunks for query by BM25: (chunk_id, score > 0), best first."""
    return lexical_rank_many([owner_id], query, k)


def lexical_rank_many(owner_ids: Sequence[int], query: str, k: int) -> Ranking:
    """The k best chunks of several owners (collections) for query by BM25, in one list: each chunk scored with
    its own owner's statistics, as `lexical_rank` of its owner alone scores it."""
    words = query_terms(query)
    db = connections[DEFAULT_DB_ALIAS]
    if not words or k < 1 or not owner_ids or not supported(db):
        return []
    with db.cursor() as cursor:
        if db.vendor == "sqlite":
            return _sqlite_rank(cursor, owner_ids, words, k)
        if len(owner_ids) == 1:
            return _pg_rank(cursor, owner_ids[0], words, k)
        return _pg_rank_many(cursor, owner_ids, words, k)


def _sqlite_rank(cursor, owner_ids: Sequence[int], words: list[str], k: int) -> Ranking:
    """BM25 by FTS5 over the query's terms that are in at most COMMON_CHUNKS of the searched owners' chunks.

    FTS5 scores every chunk that holds any term of the query, so one word found in nearly every chunk would
    cost a score per chunk (a second at 100,000 chunks). Such a word says little about which chunk is meant
    (its BM25 weight is near 0) and is left out, as stop words are. When every term is that common, the
    chunks that hold all of them are ranked if they are at most COMMON_CHUNKS; otherwise the lexical ranking
    has nothing to say ([]). Whether a term is common costs one probe: is there a match past COMMON_CHUNKS?
    Several owners (collections) are one MATCH, and a term is common by its chunks in all of them together
    (so 20 collections cost what one holding them all does); each term carries its owner's prefix, so its
    frequencies in the score are its owner's own.
    """
    by_owner = [[f'"{term}"' for term in _owner_terms(owner_id, joined(words)).split(" ")] for owner_id in owner_ids]
    # Each term, in every owner; probed first in one owner alone, where a word common everywhere shows cheaply
    # (an OR of every owner costs FTS5 a step of each of them per row).
    across = [" OR ".join(terms) for terms in zip(*by_owner, strict=True)]
    rare = [number for number, term in enumerate(across)
            if not (len(by_owner) > 1 and _more_than(cursor, by_owner[0][number], COMMON_CHUNKS))
            and not _more_than(cursor, term, COMMON_CHUNKS)]
    if rare:
        match = " OR ".join(terms[number] for terms in by_owner for number in rare)
    else:
        groups = [" AND ".join(terms) for terms in by_owner]
        match = groups[0] if len(groups) == 1 else " OR ".join(f"({group})" for group in groups)
        if _more_than(cursor, match, COMMON_CHUNKS):
            return []
    cursor.execute(_sqlite_sql(), [match, k])
    return [(row[0], float(row[1])) for row in cursor.fetchall()]


def _more_than(cursor, match: str, count: int) -> bool:
    cursor.execute(f"SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s LIMIT 1 OFFSET %s", [match, count])
    return cursor.fetchone() is not None


@functools.lru_cache(maxsize=1)
def _sqlite_sql() -> str:
    # bm25() is negative (better is lower): its negation is the BM25 score. `ORDER BY rank` is FTS5's fast path.
    return (f"SELECT rowid, -bm25({FTS_TABLE}) FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s "
            "ORDER BY rank LIMIT %s")


def _pg_rank(cursor, owner_id: int, words: list[str], k: int) -> Ranking:
    """BM25 over the query's lexemes that are in at most COMMON_CHUNKS of the owner's chunks (SQLite's rule).

    The document frequency of each distinct lexeme of the query is read from knowledge_lexicalterms (one
    primary-key probe per lexeme, exact). The scoring statement then reads only the kept lexemes' postings
    (knowledge_lexicalpostings: at most COMMON_CHUNKS rows per lexeme, from the primary key alone). When every
    lexeme is common, the chunks holding all of them are ranked if they are at most COMMON_CHUNKS (counted
    through the GIN index, stopping past it), their postings read by primary key; otherwise [].
    """
    cursor.execute(_PG_COUNT_SQL, {"owner": owner_id, "text": " ".join(words)})
    counted = [(lexeme, df) for lexeme, df in cursor.fetchall() if df > 0]
    if not counted:
        return []
    rare = [(lexeme, df) for lexeme, df in counted if df <= COMMON_CHUNKS]
    statement = _PG_SCORE_SQL
    if not rare:
        rare = counted
        cursor.execute(_PG_ALL_SQL, {"owner": owner_id, "lexemes": [lexeme for lexeme, _ in rare],
                                     "cap": COMMON_CHUNKS + 1})
        if cursor.fetchone()[0] > COMMON_CHUNKS:
            return []
        statement = _PG_SCORE_ALL_SQL
    cursor.execute(statement, {"owner": owner_id, "lexemes": [lexeme for lexeme, _ in rare],
                               "dfs": [float(df) for _, df in rare], "k": k})
    return [(row[0], float(row[1])) for row in cursor.fetchall()]


def _pg_rank_many(cursor, owner_ids: Sequence[int], words: list[str], k: int) -> Ranking:
    """_pg_rank over several owners (collections) in two statements: every owner's document frequencies, then
    one scoring of the kept lexemes' postings in all of them, each chunk with its owner's statistics. A lexeme
    is common by its chunks in all the owners together (SQLite's rule); when every one is, _pg_rank_all_common."""
    cursor.execute(_PG_COUNT_MANY_SQL, {"owners": list(owner_ids), "text": " ".join(words)})
    rows = [(owner_id, lexeme, df) for owner_id, lexeme, df in cursor.fetchall() if df > 0]
    if not rows:
        return []
    total: dict[str, int] = {}
    for _, lexeme, df in rows:
        total[lexeme] = total.get(lexeme, 0) + df
    kept = [(owner_id, lexeme, df) for owner_id, lexeme, df in rows if total[lexeme] <= COMMON_CHUNKS]
    if not kept:
        return _pg_rank_all_common(cursor, rows, k)
    cursor.execute(_PG_SCORE_MANY_SQL, {"owners": [row[0] for row in kept], "lexemes": [row[1] for row in kept],
                                        "dfs": [float(row[2]) for row in kept],
                                        "owner_set": sorted({row[0] for row in kept}), "k": k})
    return [(row[0], float(row[1])) for row in cursor.fetchall()]


def _pg_rank_all_common(cursor, rows: list[tuple[int, str, int]], k: int) -> Ranking:
    """Every lexeme common in the owners together: the chunks holding all of an owner's lexemes, ranked when at
    most COMMON_CHUNKS in all the owners (counted owner by owner, stopping past it); otherwise []."""
    by_owner: dict[int, list[tuple[str, int]]] = {}
    for owner_id, lexeme, df in rows:
        by_owner.setdefault(owner_id, []).append((lexeme, df))
    holding = 0
    for owner_id, found in by_owner.items():
        cursor.execute(_PG_ALL_SQL, {"owner": owner_id, "lexemes": [lexeme for lexeme, _ in found],
                                     "cap": COMMON_CHUNKS + 1 - holding})
        holding += cursor.fetchone()[0]
        if holding > COMMON_CHUNKS:
            return []
    rankings = []
    for owner_id, found in by_owner.items():
        cursor.execute(_PG_SCORE_ALL_SQL, {"owner": owner_id, "lexemes": [lexeme for lexeme, _ in found],
                                           "dfs": [float(df) for _, df in found], "k": k})
        rankings.append([(row[0], float(row[1])) for row in cursor.fetchall()])
    return merged(rankings, k)


# Each distinct lexeme of the query (as the index stores them) and each owner's chunks holding it.
_PG_COUNT_MANY_SQL = f"""
SELECT o, x, coalesce(t.chunks, 0) FROM unnest(%(owners)s::integer[]) AS o
CROSS JOIN unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS x
LEFT JOIN {PG_TERMS} t ON t.owner_id = o AND t.lexeme = x
"""

_PG_SCORE_MANY_SQL = f"""
WITH q AS (SELECT * FROM unnest(%(owners)s::integer[], %(lexemes)s::text[], %(dfs)s::float[])
           AS q(owner_id, lexeme, df)),
stats AS (SELECT owner_id, chunks::float AS n, coalesce(length::float / nullif(chunks, 0), 1)::float AS avglen
          FROM {PG_STATS} WHERE owner_id = ANY(%(owner_set)s::integer[]))
SELECT p.chunk_id,
       sum(ln(1 + (s.n - q.df + 0.5) / (q.df + 0.5)) * p.tf * {BM25_K1 + 1}
           / (p.tf + {BM25_K1} * ({1 - BM25_B} + {BM25_B} * p.length / greatest(s.avglen, 1)))) AS score
FROM q JOIN {PG_POSTINGS} p ON p.owner_id = q.owner_id AND p.lexeme = q.lexeme
JOIN stats s ON s.owner_id = q.owner_id
GROUP BY p.chunk_id ORDER BY score DESC, p.chunk_id LIMIT %(k)s
"""


# Each distinct lexeme of the query (as the index stores them) and the owner's chunks holding it.
_PG_COUNT_SQL = f"""
SELECT x, coalesce(t.chunks, 0) FROM unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS x
LEFT JOIN {PG_TERMS} t ON t.owner_id = %(owner)s AND t.lexeme = x
"""

_PG_TSQUERY = "(SELECT to_tsquery('simple', string_agg(quote_literal(x), %(op)s)) FROM unnest(%(lexemes)s::text[]) x)"

_PG_ALL_SQL = f"""
SELECT count(*) FROM (SELECT 1 FROM {PG_TABLE} l WHERE l.owner_id = %(owner)s AND l.terms @@
    {_PG_TSQUERY.replace("%(op)s", "' & '")} LIMIT %(cap)s) s
"""

def _pg_score_sql(postings: str) -> str:
    """BM25 of the chunks whose postings (knowledge_lexicalpostings, as `p`, joined to the query's lexemes `q`)
    the `postings` FROM clause gives: from the postings alone, no chunk's tsvector read."""
    return f"""
WITH q AS (SELECT * FROM unnest(%(lexemes)s::text[], %(dfs)s::float[]) AS q(lexeme, df)),
stats AS (SELECT coalesce(max(chunks), 0)::float AS n,
                 coalesce(max(length)::float / nullif(max(chunks), 0), 1)::float AS avglen
          FROM {PG_STATS} WHERE owner_id = %(owner)s)
SELECT p.chunk_id,
       sum(ln(1 + (stats.n - q.df + 0.5) / (q.df + 0.5)) * p.tf * {BM25_K1 + 1}
           / (p.tf + {BM25_K1} * ({1 - BM25_B} + {BM25_B} * p.length / greatest(stats.avglen, 1)))) AS score
FROM {postings}, stats
GROUP BY p.chunk_id ORDER BY score DESC, p.chunk_id LIMIT %(k)s
"""


# The chunks holding any of the lexemes: an index-only range scan per lexeme (each in at most COMMON_CHUNKS).
_PG_SCORE_SQL = _pg_score_sql(f"q JOIN {PG_POSTINGS} p ON p.owner_id = %(owner)s AND p.lexeme = q.lexeme")

# The chunks holding all of them (every one common, at most COMMON_CHUNKS such chunks: found through the GIN
# index), their postings read by primary key.
_PG_SCORE_ALL_SQL = _pg_score_sql(
    f"(SELECT l.chunk_id FROM {PG_TABLE} l WHERE l.owner_id = %(owner)s AND l.terms @@ "
    f"""{_PG_TSQUERY.replace("%(op)s", "' & '")}) hits CROSS JOIN q JOIN {PG_POSTINGS} p """
    "ON p.owner_id = %(owner)s AND p.lexeme = q.lexeme AND p.chunk_id = hits.chunk_id")


class LexicalRanker(Ranker):
    """BM25 over the lexical index (the contract of knowledge.ranking.Ranker)."""

    name = "lexical"
    weight = 1.0

    def rank(self, owner_id: int, query: str, k: int) -> Ranking:
        return lexical_rank(owner_id, query, k)

    def rank_many(self, owner_ids: Sequence[int], query: str, k: int) -> Ranking:
        return lexical_rank_many(owner_ids, query, k)
