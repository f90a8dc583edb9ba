"""Search of a user's chat sessions, their names and their messages' text, through a full-text index.

The matching rules are docs/api.md's (Search): a query is its words (runs of letters and digits, so no
character of it is ever index syntax); a name or message matches when it holds every word, each as a word's
start (one character: a whole word), case and Latin accents ignored. SQLite: FTS5 whose rowid is
`session key << SEQ_BITS | seq` (the name at seq 0), a session's key starting with its owner's id, so one owner's
entries are one rowid range and another user's text is never read. PostgreSQL: a GIN-indexed table of terms
prefixed with the owner's id.
The invariant: the database keeps the index (triggers) whatever writes the rows (the
ORM, a turn's raw SQL, a cascade), so no Python code writes it; `index_ensure` restores the SQLite triggers
after a migration that rebuilt a table (Django's SQLite ALTER drops a table's triggers with it).
"""

from __future__ import annotations

import json
import re
import unicodedata
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Count, QuerySet
from django.db.models.expressions import RawSQL

from agentsite.core.errors import AppError
from sessions_app.models import ChatMessage, ChatSession

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

MAX_QUERY_CHARS = 200
MAX_QUERY_WORDS = 16  # the first distinct words of a query that are looked up
INDEXED_CHARS = 100_000  # of each message (PostgreSQL's tsvector holds at most 1 MB)
SNIPPET_CHARS = 160
SNIPPET_BEFORE = 50  # of the snippet's characters, those before the first hit
INDEXED_ROLES = ("user", "assistant")

_WORD = re.compile(r"[^\W_]+")  # letters and digits: what both indexes take as a word's characters


def _folding_table() -> dict[int, str]:
    """Latin letters with accents -> their base letter; ASCII and common typographic punctuation -> a space.

    PostgreSQL's `simple` parser reads `example.com`, `a-b` or `x@y.z` as one token where FTS5 reads words;
    giving it the text with that punctuation as spaces makes both read the same words."""
    table: dict[int, str] = {}
    for code in range(0xC0, 0x250):
        base = "".join(c for c in unicodedata.normalize("NFKD", chr(code)) if not unicodedata.combining(c))
        if len(base) == 1 and base.isascii() and base.isalpha():
            table[code] = base
    for char in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\u2018\u2019\u201c\u201d\u00ab\u00bb\u2013\u2014\u2026\u00b7\u2022":
        table[ord(char)] = " "
    return table


FOLDING = _folding_table()


def query_words(text: str) -> list[str]:
    """The distinct words of a query, in order (at most MAX_QUERY_WORDS): runs of letters and digits."""
    words: list[str] = []
    for word in _WORD.findall(text):
        if fold(word) not in map(fold, words):
            words.append(word)
    return words[:MAX_QUERY_WORDS]


def fold(text: str) -> str:
    """Text as matching compares it: case-folded, without accents (combining marks dropped after NFKD)."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).casefold()


def _matches(token: str, words: list[str]) -> bool:
    folded = token.lower() if token.isascii() else fold(token)
    return any(folded.startswith(word) if len(word) > 1 else folded == word for word in words)


@dataclass(frozen=True)
class Match:
    """Where a session matched: its newest matching message (None: its name only) and an excerpt of that text
    with the hits as (start, end) offsets in code points."""

    message: uuid.UUID | None
    snippet: str
    highlights: list[tuple[int, int]]


def snippet_of(text: str, words: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """A short plain-text excerpt of text around its first word that matches, whitespace runs as one space,
    "…" where it was cut, and the matching words' offsets in it."""
    flat = " ".join(text[:INDEXED_CHARS].split())
    folded = [fold(word) for word in words]
    first = _first_hit(flat, folded)
    start = 0
    if len(flat) > SNIPPET_CHARS:
        start = max(0, min(first - SNIPPET_BEFORE, len(flat) - SNIPPET_CHARS))
        while 0 < start < first and flat[start - 1] != " ":  # begin at a word
            start += 1
    end = min(len(flat), start + SNIPPET_CHARS)
    if end < len(flat):
        cut = flat.rfind(" ", start + SNIPPET_CHARS // 2, end + 1)  # end at a word
        end = cut if cut > 0 else end
    lead, tail = ("\u2026" if start > 0 else ""), ("\u2026" if end < len(flat) else "")
    excerpt = flat[start:end]
    hits = [found.span() for found in _WORD.finditer(excerpt) if _matches(found.group(), folded)]
    if start > 0 and excerpt[:1] != " " and hits and hits[0][0] == 0 and flat[start - 1] != " ":
        hits = hits[1:]  # a word cut at the start is not a hit
    return lead + excerpt + tail, [(a + len(lead), b + len(lead)) for a, b in hits]


def _first_hit(flat: str, folded: list[str]) -> int:
    """Where the first matching word of flat starts (0 when none does). A case-insensitive regular expression
    finds the plain-letter hits at C speed; words are then checked one by one only when it finds none."""
    pattern = re.compile(r"(?<![^\W_])(?:" + "|".join(re.escape(word) for word in folded) + r")", re.IGNORECASE)
    for candidate in pattern.finditer(flat):
        found = _WORD.match(flat, candidate.start())
        if found is not None and _matches(found.group(), folded):
            return candidate.start()
    for found in _WORD.finditer(flat):
        if _matches(found.group(), folded):
            return found.start()
    return 0


# --- the indexes, one per database vendor -------------------------------------------------------------

class Found:
    """One search's answer: `sessions_sql`, a subquery of the ids of the owner's matching sessions (for `pk__in`),
    and `newest`, each listed session's newest matching message id (None: only its name matched)."""

    def sessions_sql(self) -> tuple[str, list[Any]]:
        raise NotImplementedError

    def newest(self, session_ids: list[uuid.UUID]) -> dict[uuid.UUID, uuid.UUID | None]:
        raise NotImplementedError


class SearchIndex:
    """One vendor's index. `schema_create`/`schema_drop` make and remove it (migration 0007, filling it from the
    rows there are); `find` searches one owner's entries for every word."""

    def schema_create(self, connection: BaseDatabaseWrapper) -> None:
        raise NotImplementedError

    def schema_drop(self, connection: BaseDatabaseWrapper) -> None:
        raise NotImplementedError

    def find(self, connection: BaseDatabaseWrapper, owner_id: int, words: list[str]) -> Found:
        raise NotImplementedError


MESSAGES, SESSIONS = ChatMessage._meta.db_table, ChatSession._meta.db_table
FTS_TABLE, KEY_TABLE = "sessions_app_search_fts", "sessions_app_search_key"
SEQ_BITS, SESSION_BITS = 20, 21  # a session's first 1,048,575 messages; an owner's first 2,097,151 sessions
OWNER_LIMIT = 1 << (63 - SEQ_BITS - SESSION_BITS)  # owners with a smaller id are indexed (4,194,304)
_SEQ_MAX, _SESSION_MAX = (1 << SEQ_BITS) - 1, (1 << SESSION_BITS) - 1
_ROLES_SQL = ", ".join(f"'{role}'" for role in INDEXED_ROLES)


def _sqlite_message_row(row: str) -> str:
    """An INSERT of a message row's (`new` or `old`) index entry: nothing for one the index leaves out."""
    return (f"INSERT INTO {FTS_TABLE} (rowid, body) SELECT (key << {SEQ_BITS}) + {row}.seq, "
            f"substr({row}.content, 1, {INDEXED_CHARS}) FROM {KEY_TABLE} WHERE session_id = {row}.session_id "
            f"AND {row}.seq BETWEEN 1 AND {_SEQ_MAX} AND {row}.role IN ({_ROLES_SQL});")


def _sqlite_message_delete(row: str) -> str:
    return (f"DELETE FROM {FTS_TABLE} WHERE {row}.seq BETWEEN 1 AND {_SEQ_MAX} AND rowid = "
            f"(SELECT (key << {SEQ_BITS}) + {row}.seq FROM {KEY_TABLE} WHERE session_id = {row}.session_id);")


_OWNER_LOW = f"(new.owner_id << {SESSION_BITS})"
SQLITE_TRIGGERS = {
    f"{FTS_TABLE}_session_insert": (
        f"AFTER INSERT ON {SESSIONS} WHEN new.owner_id BETWEEN 0 AND {OWNER_LIMIT - 1} BEGIN "
        f"INSERT INTO {KEY_TABLE} (key, session_id) SELECT next, new.id FROM (SELECT coalesce(max(key), "
        f"{_OWNER_LOW}) + 1 AS next FROM {KEY_TABLE} WHERE key BETWEEN {_OWNER_LOW} AND {_OWNER_LOW} + "
        f"{_SESSION_MAX}) WHERE next <= {_OWNER_LOW} + {_SESSION_MAX}; "
        f"INSERT INTO {FTS_TABLE} (rowid, body) SELECT key << {SEQ_BITS}, new.name FROM {KEY_TABLE} "
        "WHERE session_id = new.id; END"),
    f"{FTS_TABLE}_session_rename": (
        f"AFTER UPDATE OF name ON {SESSIONS} WHEN old.name IS NOT new.name BEGIN "
        f"UPDATE {FTS_TABLE} SET body = new.name WHERE rowid = (SELECT key << {SEQ_BITS} FROM {KEY_TABLE} "
        "WHERE session_id = new.id); END"),
    f"{FTS_TABLE}_session_delete": (
        f"AFTER DELETE ON {SESSIONS} BEGIN "
        f"DELETE FROM {FTS_TABLE} WHERE rowid BETWEEN (SELECT key << {SEQ_BITS} FROM {KEY_TABLE} WHERE "
        f"session_id = old.id) AND (SELECT (key << {SEQ_BITS}) + {_SEQ_MAX} FROM {KEY_TABLE} WHERE "
        f"session_id = old.id); DELETE FROM {KEY_TABLE} WHERE session_id = old.id; END"),
    f"{FTS_TABLE}_message_insert": f"AFTER INSERT ON {MESSAGES} BEGIN {_sqlite_message_row('new')} END",
    f"{FTS_TABLE}_message_update": (
        f"AFTER UPDATE OF content, seq, session_id, role ON {MESSAGES} WHEN old.content IS NOT new.content OR "
        "old.seq IS NOT new.seq OR old.session_id IS NOT new.session_id OR old.role IS NOT new.role BEGIN "
        f"{_sqlite_message_delete('old')} {_sqlite_message_row('new')} END"),
    f"{FTS_TABLE}_message_delete": f"AFTER DELETE ON {MESSAGES} BEGIN {_sqlite_message_delete('old')} END",
}


class SqliteIndex(SearchIndex):
    """FTS5, its rowids in per-owner ranges (module docstring); prefix indexes of 2 to 4 characters, so a short
    prefix reads one list instead of merging, over every owner, the lists of all the words it starts."""

    def schema_create(self, connection: BaseDatabaseWrapper) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE TABLE {KEY_TABLE} (key INTEGER PRIMARY KEY, session_id char(32) NOT NULL "
                           "UNIQUE)")
            cursor.execute(f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(body, detail = none, prefix = '2 3 4', "
                           "tokenize = 'unicode61 remove_diacritics 2')")
        self.rebuild(connection)

    def schema_drop(self, connection: BaseDatabaseWrapper) -> None:
        with connection.cursor() as cursor:
            for name in SQLITE_TRIGGERS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
            cursor.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")
            cursor.execute(f"DROP TABLE IF EXISTS {KEY_TABLE}")

    def rebuild(self, connection: BaseDatabaseWrapper) -> None:
        """The index filled anew from the rows, its triggers (re)made: in one transaction."""
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            for name in SQLITE_TRIGGERS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
            cursor.execute(f"DELETE FROM {FTS_TABLE}")
            cursor.execute(f"DELETE FROM {KEY_TABLE}")
            cursor.execute(
                f"INSERT INTO {KEY_TABLE} (key, session_id) SELECT (owner_id << {SESSION_BITS}) + number, id FROM "
                "(SELECT owner_id, id, row_number() OVER (PARTITION BY owner_id ORDER BY created_at, id) AS number "
                f"FROM {SESSIONS} WHERE owner_id BETWEEN 0 AND {OWNER_LIMIT - 1}) WHERE number <= {_SESSION_MAX}")
            cursor.execute(f"INSERT INTO {FTS_TABLE} (rowid, body) SELECT k.key << {SEQ_BITS}, s.name FROM "
                           f"{KEY_TABLE} k JOIN {SESSIONS} s ON s.id = k.session_id")
            cursor.execute(
                f"INSERT INTO {FTS_TABLE} (rowid, body) SELECT (k.key << {SEQ_BITS}) + m.seq, "
                f"substr(m.content, 1, {INDEXED_CHARS}) FROM {MESSAGES} m JOIN {KEY_TABLE} k ON k.session_id = "
                f"m.session_id WHERE m.seq BETWEEN 1 AND {_SEQ_MAX} AND m.role IN ({_ROLES_SQL})")
            for name, body in SQLITE_TRIGGERS.items():
                cursor.execute(f"CREATE TRIGGER {name} {body}")

    def find(self, connection: BaseDatabaseWrapper, owner_id: int, words: list[str]) -> Found:
        """One read of the index over the owner's range: the newest (highest seq) matching entry per session.
        FTS5 merges a long prefix's words over the whole index whatever the range: once per search, then. An
        owner past OWNER_LIMIT has no range (nothing of theirs is indexed): nothing is found."""
        if not 0 <= owner_id < OWNER_LIMIT:  # their range's bounds would not fit SQLite's 64-bit integers
            return _SqliteFound(connection, {})
        low = owner_id << (SESSION_BITS + SEQ_BITS)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT rowid >> {SEQ_BITS}, max(rowid & {_SEQ_MAX}) FROM {FTS_TABLE} WHERE "
                           f"{FTS_TABLE} MATCH %s AND rowid BETWEEN %s AND %s GROUP BY 1",
                           [self.match_expression(words), low, low + (1 << (SESSION_BITS + SEQ_BITS)) - 1])
            newest = dict(cursor.fetchall())
        return _SqliteFound(connection, newest)

    @staticmethod
    def match_expression(words: list[str]) -> str:
        """FTS5 syntax for "every word": each one a quoted string (so its text is never syntax), a prefix query
        when it has two characters or more."""
        return " ".join('"' + word.replace('"', '""') + '"' + ("*" if len(word) > 1 else "") for word in words)


class _SqliteFound(Found):
    def __init__(self, connection: BaseDatabaseWrapper, newest: dict[int, int]) -> None:
        self.connection, self.newest_seq = connection, newest

    def sessions_sql(self) -> tuple[str, list[Any]]:
        # The keys as one JSON parameter: any number of them, where SQLite takes at most 32,766 parameters.
        return (f"SELECT session_id FROM {KEY_TABLE} WHERE key IN (SELECT value FROM json_each(%s))",
                [json.dumps(sorted(self.newest_seq))])

    def newest(self, session_ids: list[uuid.UUID]) -> dict[uuid.UUID, uuid.UUID | None]:
        prepared = {ChatSession._meta.pk.get_db_prep_value(pk, self.connection): pk for pk in session_ids}
        with self.connection.cursor() as cursor:
            cursor.execute(f"SELECT key, session_id FROM {KEY_TABLE} WHERE session_id IN "
                           f"({', '.join(['%s'] * len(prepared))})", list(prepared))
            seqs = {prepared[session_id]: self.newest_seq.get(key, 0) for key, session_id in cursor.fetchall()}
        pairs = [(session_id, seq) for session_id, seq in seqs.items() if seq]
        ids: dict[uuid.UUID, uuid.UUID] = {}
        if pairs:  # by the unique (session, seq) index; plain SQL: the ORM takes longer to build the OR than it runs
            pk = ChatMessage._meta.pk
            with self.connection.cursor() as cursor:
                cursor.execute(f"SELECT session_id, id FROM {MESSAGES} WHERE " + " OR ".join(
                    ["(session_id = %s AND seq = %s)"] * len(pairs)), [value for session_id, seq in pairs for value in (
                        pk.get_db_prep_value(session_id, self.connection), seq)])
                ids = {pk.to_python(session): pk.to_python(message) for session, message in cursor.fetchall()}
        return {session_id: ids.get(session_id) for session_id in session_ids}


PG_TABLE, PG_TERMS = "sessions_app_search_terms", "sessions_app_search_terms_of"
PG_TERM_BYTES = 2047  # the longest word a tsvector holds


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _pg_function(name: str, body: str) -> str:
    return f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $body$ BEGIN {body} RETURN NULL; END $body$"


_PG_MESSAGE_ROW = (f"INSERT INTO {PG_TABLE} (id, session_id, seq, terms) SELECT new.id, new.session_id, new.seq, "
                   f"{PG_TERMS}(s.owner_id, new.content) FROM {SESSIONS} s WHERE s.id = new.session_id AND "
                   f"new.role IN ({_ROLES_SQL});")
# name -> (table, event, body): row triggers, and one per table for TRUNCATE (a test flush may truncate).
PG_TRIGGERS = {
    f"{PG_TABLE}_message_insert": (MESSAGES, "AFTER INSERT", _PG_MESSAGE_ROW),
    f"{PG_TABLE}_message_update": (MESSAGES, "AFTER UPDATE OF content, role, seq, session_id",
                                   f"DELETE FROM {PG_TABLE} WHERE id = old.id; {_PG_MESSAGE_ROW}"),
    f"{PG_TABLE}_message_delete": (MESSAGES, "AFTER DELETE", f"DELETE FROM {PG_TABLE} WHERE id = old.id;"),
    f"{PG_TABLE}_session_insert": (SESSIONS, "AFTER INSERT", f"INSERT INTO {PG_TABLE} (id, session_id, seq, terms) "
                                   f"VALUES (new.id, new.id, 0, {PG_TERMS}(new.owner_id, new.name));"),
    f"{PG_TABLE}_session_update": (SESSIONS, "AFTER UPDATE OF name, owner_id",
                                   f"UPDATE {PG_TABLE} SET terms = {PG_TERMS}(new.owner_id, new.name) WHERE id = "
                                   f"new.id; IF old.owner_id IS DISTINCT FROM new.owner_id THEN UPDATE {PG_TABLE} t "
                                   f"SET terms = {PG_TERMS}(new.owner_id, m.content) FROM {MESSAGES} m WHERE "
                                   "m.id = t.id AND t.session_id = new.id; END IF;"),
    f"{PG_TABLE}_session_delete": (SESSIONS, "AFTER DELETE", f"DELETE FROM {PG_TABLE} WHERE session_id = old.id;"),
}

# A checkpoint or final store that leaves the text as it was does not tokenize it again.
_PG_WHEN = {
    f"{PG_TABLE}_message_update": "WHEN (old.content IS DISTINCT FROM new.content OR old.role IS DISTINCT FROM "
                                  "new.role OR old.seq IS DISTINCT FROM new.seq OR old.session_id IS DISTINCT FROM "
                                  "new.session_id)",
    f"{PG_TABLE}_session_update": "WHEN (old.name IS DISTINCT FROM new.name OR old.owner_id IS DISTINCT FROM "
                                  "new.owner_id)",
}


class PostgresIndex(SearchIndex):
    """A table of each user or assistant message's and each session name's terms (`PG_TABLE`) with a GIN index,
    kept by triggers. A term is `<owner id>x<word>` (the folded text's `simple` tsvector: no stemming, no stop
    words, the same words as SQLite's), so a word's GIN list is one owner's and a common word of another user's
    costs nothing."""

    @staticmethod
    def terms_function(*, replace: bool = False) -> str:
        """The SQL that makes PG_TERMS(owner id, text): the text's words as the owner's terms. A term longer than a
        tsvector takes (2,047 bytes: a word near that long, with the owner's prefix) is left out, or the whole
        text would be refused, and the write of its row with it."""
        source, target = "".join(chr(code) for code in FOLDING), "".join(FOLDING.values())
        return (f"CREATE {'OR REPLACE ' if replace else ''}FUNCTION {PG_TERMS}(integer, text) RETURNS tsvector "
                f"LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $terms$ SELECT array_to_tsvector(coalesce(array("
                f"SELECT term FROM (SELECT $1 || 'x' || lexeme AS term FROM unnest(to_tsvector('simple'::regconfig, "
                f"translate(left($2, {INDEXED_CHARS}), {_sql_text(source)}, {_sql_text(target)})))) AS terms "
                f"WHERE octet_length(term) <= {PG_TERM_BYTES}), '{{}}')) $terms$")

    def schema_create(self, connection: BaseDatabaseWrapper) -> None:
        with connection.cursor() as cursor:
            cursor.execute(self.terms_function())
            cursor.execute(f"CREATE TABLE {PG_TABLE} (id uuid PRIMARY KEY, session_id uuid NOT NULL, seq integer "
                           "NOT NULL, terms tsvector NOT NULL)")
            cursor.execute(f"INSERT INTO {PG_TABLE} SELECT id, id, 0, {PG_TERMS}(owner_id, name) FROM {SESSIONS}")
            cursor.execute(f"INSERT INTO {PG_TABLE} SELECT m.id, m.session_id, m.seq, {PG_TERMS}(s.owner_id, "
                           f"m.content) FROM {MESSAGES} m JOIN {SESSIONS} s ON s.id = m.session_id WHERE m.role IN "
                           f"({_ROLES_SQL})")
            cursor.execute(f"CREATE INDEX {PG_TABLE}_terms ON {PG_TABLE} USING gin (terms)")
            cursor.execute(f"CREATE INDEX {PG_TABLE}_session ON {PG_TABLE} (session_id, seq)")
            for name, (table, event, body) in PG_TRIGGERS.items():
                cursor.execute(_pg_function(name, body))
                when = _PG_WHEN.get(name, "")
                cursor.execute(f"CREATE TRIGGER {name} {event} ON {table} FOR EACH ROW {when} EXECUTE FUNCTION "
                               f"{name}()")
            cursor.execute(_pg_function(f"{PG_TABLE}_truncate", f"TRUNCATE {PG_TABLE};"))
            for table in (MESSAGES, SESSIONS):
                cursor.execute(f"CREATE TRIGGER {PG_TABLE}_truncate AFTER TRUNCATE ON {table} FOR EACH STATEMENT "
                               f"EXECUTE FUNCTION {PG_TABLE}_truncate()")

    def schema_drop(self, connection: BaseDatabaseWrapper) -> None:
        with connection.cursor() as cursor:
            for table in (MESSAGES, SESSIONS):
                cursor.execute(f"DROP TRIGGER IF EXISTS {PG_TABLE}_truncate ON {table}")
            for name, (table, _, _) in PG_TRIGGERS.items():
                cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
                cursor.execute(f"DROP FUNCTION IF EXISTS {name}()")
            cursor.execute(f"DROP FUNCTION IF EXISTS {PG_TABLE}_truncate()")
            cursor.execute(f"DROP TABLE IF EXISTS {PG_TABLE}")
            cursor.execute(f"DROP FUNCTION IF EXISTS {PG_TERMS}(integer, text)")

    def find(self, connection: BaseDatabaseWrapper, owner_id: int, words: list[str]) -> Found:
        """The owner's matching sessions, read now through the GIN index. The planner prices a prefix query's
        GIN read above a scan of the whole table, every user's rows (`the` over 100,000 messages: a 118 ms scan
        where the index takes ~10 ms), so scans are off for this one statement."""
        query = self.tsquery(owner_id, words)
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"SELECT DISTINCT session_id FROM {PG_TABLE} WHERE terms @@ %s::tsquery", [query])
            sessions = [row[0] for row in cursor.fetchall()]
            cursor.execute("SET LOCAL enable_seqscan TO DEFAULT")  # the rest of an outer transaction plans as usual
        return _PostgresFound(connection, query, sessions)

    @staticmethod
    def tsquery(owner_id: int, words: list[str]) -> str:
        """tsquery syntax for "every word" among the owner's terms: each one folded, quoted and prefixed with the
        owner's id, a prefix query (`:*`) when it has two characters or more. The words hold only letters and
        digits, so the quotes are all the escaping. Folded and lower-cased here: a tsquery cast is not normalised
        (to_tsquery would parse `1xword` again)."""
        return " & ".join(_sql_text(f"{owner_id}x{word.translate(FOLDING).lower()}") + (":*" if len(word) > 1 else "")
                          for word in words)


class _PostgresFound(Found):
    def __init__(self, connection: BaseDatabaseWrapper, query: str, sessions: list[uuid.UUID]) -> None:
        self.connection, self.query, self.sessions = connection, query, sessions

    def sessions_sql(self) -> tuple[str, list[Any]]:
        return "SELECT unnest(%s::uuid[])", [self.sessions]

    def newest(self, session_ids: list[uuid.UUID]) -> dict[uuid.UUID, uuid.UUID | None]:
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT DISTINCT ON (session_id) session_id, id, seq FROM {PG_TABLE} WHERE session_id = ANY(%s) "
                "AND terms @@ %s::tsquery ORDER BY session_id, seq DESC", [session_ids, self.query])
            found = {session: (message if seq else None) for session, message, seq in cursor.fetchall()}
        return {session_id: found.get(session_id) for session_id in session_ids}


INDEXES: dict[str, SearchIndex] = {"sqlite": SqliteIndex(), "postgresql": PostgresIndex()}


def index_for(connection: BaseDatabaseWrapper) -> SearchIndex:
    """The search index of the connection's database (SQLite or PostgreSQL: the only databases the settings
    take); AppError 503 `unavailable` on another."""
    index = INDEXES.get(connection.vendor)
    if index is None:
        raise AppError("unavailable", f"Search is not available on {connection.vendor}.", 503)
    return index


# --- the selector -------------------------------------------------------------------------------------

@dataclass
class SessionSearch:
    """A search of one owner's sessions: `sessions`, those that match in the list's order (a queryset to
    paginate), and `matches_attach` for a page of them."""

    sessions: QuerySet[ChatSession]
    words: list[str]
    found: Found | None

    def matches_attach(self, sessions: list[ChatSession]) -> list[ChatSession]:
        """The sessions (a page of `sessions`), each given its `message_count` and `match`: a Match of its newest
        matching message, else of its name."""
        if not sessions or self.found is None:
            return sessions
        ids = [session.pk for session in sessions]
        counts = dict(ChatMessage.objects.filter(session_id__in=ids).values_list("session_id").annotate(
            count=Count("pk")).values_list("session_id", "count"))
        newest = self.found.newest(ids)
        contents = dict(ChatMessage.objects.filter(pk__in=[pk for pk in newest.values() if pk is not None])
                        .values_list("pk", "content"))
        for session in sessions:
            message = newest.get(session.pk)
            snippet, highlights = snippet_of(contents.get(message, "") if message else session.name, self.words)
            session.match = Match(message=message, snippet=snippet, highlights=highlights)
            session.message_count = counts.get(session.pk, 0)
        return sessions


def session_search(*, owner: AbstractBaseUser, text: str, archived: bool | None = None) -> SessionSearch:
    """The owner's sessions whose name or a message of which matches text (the module's rules), in the list's
    order (pinned first, then the most recently updated); archived ones too unless `archived` says which.
    None match a text without a word."""
    words = query_words(text)
    # Not session_list_for: its message_count joins every message of every matching session before the page is
    # cut; matches_attach counts the page's.
    sessions = ChatSession.objects.filter(owner=owner).select_related("agent")
    if not words:
        return SessionSearch(sessions=sessions.none(), words=words, found=None)
    connection = connections[DEFAULT_DB_ALIAS]
    found = index_for(connection).find(connection, owner.pk, words)
    sql, params = found.sessions_sql()
    sessions = sessions.filter(pk__in=RawSQL(sql, params))  # noqa: S611 - params are bound, sql is ours
    if archived is not None:
        sessions = sessions.filter(archived=archived)
    return SessionSearch(sessions=sessions.order_by("-pinned", "-updated_at"), words=words, found=found)


def index_ensure(connection: BaseDatabaseWrapper) -> bool:
    """After a migration: on SQLite, when the index exists but a trigger is missing (Django's SQLite ALTER
    rebuilds a table without its triggers), the index is rebuilt with them. True when it was."""
    if connection.vendor != "sqlite":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT type, name FROM sqlite_master WHERE name = %s OR type = 'trigger'", [FTS_TABLE])
        found = cursor.fetchall()
    if ("table", FTS_TABLE) not in found or {("trigger", name) for name in SQLITE_TRIGGERS} <= set(found):
        return False
    SqliteIndex().rebuild(connection)
    return True
