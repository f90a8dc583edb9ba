"""How fast `GET /api/sessions?q=` answers over 100,000 chat messages (issue 47, item 5: goal ≤ 50 ms p50).

    python bench/chat_search.py [--messages 100000] [--users 8] [--per-session 40] [--repeat 50]
    AGENTSITE_DATA_DIR=/tmp/x python bench/chat_search.py   # a second run with the same directory: no refill

Fills a fresh database (SQLite in a temporary data directory, or DATABASE_URL's PostgreSQL) with `--users`
users' chats through the ORM (the search index is kept by the database, as on every write), then times the
whole view through Django's test client (authentication, the search, the count, a page of 50 sessions with
their matches and snippets, serialization; no network) and the selector alone (sessions_app.search: the
search, the count, the page and its matches) for one user, against the same view without `q` (the plain
list: the floor), for:

- a rare word (in 5 of that user's messages),
- a common word (`the`: in nearly every message, so every one of the user's sessions matches),
- a topical word (in roughly one message in ten),
- a prefix (`conf`: config, configure, conference, confident...),
- two words that must be in one message.

The text is English-like: sentences drawn from a few hundred everyday and technical words, Zipf-weighted, with a
long tail of made-up rare words, user questions of 8-40 words and replies of 40-250 (seeded, so every run
writes the same text).
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COMMON = """the the the of and to a in is it you that for on with as this be are or can not your but if use
have by from at an we will do so there when which what how all one more also they need then some each here
just like only other would about into should because first make may their new like get out up time way""".split()
TOPICAL = """server database query index table config configure configuration conference confident confirm python
function error request response token model deploy cluster kubernetes docker container image network cache
memory disk file folder user password account login session message chat search result page list value
string number date report budget invoice customer order meeting schedule travel hotel flight recipe garden
weather music movie book chapter draft email letter summary plan project team review test build release
version branch commit merge issue bug feature design layout color font style screen mobile browser""".split()
SYLLABLES = "ka lo mi ne ru ta pe so vi du ga re no shi te ma ko zu ba li fo ra nu xe".split()
RARE = "oceanarium"


def setup() -> None:
    os.environ.setdefault("AGENTSITE_DATA_DIR", tempfile.mkdtemp(prefix="agentsite-bench-chat-search-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


class Writer:
    """English-like text: Zipf-weighted common and topical words and a long tail of made-up ones."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        tail = sorted({"".join(self.rng.choices(SYLLABLES, k=self.rng.randint(2, 4))) for _ in range(30_000)})
        words = COMMON + TOPICAL + tail
        self.words = words
        self.cumulative = list(itertools.accumulate(1 / (rank + 1) ** 0.9 for rank in range(len(words))))

    def sentence(self) -> str:
        chosen = self.rng.choices(self.words, cum_weights=self.cumulative, k=self.rng.randint(5, 18))
        return " ".join(chosen).capitalize() + self.rng.choice([".", ".", ".", "?", "!"])

    def text(self, low: int, high: int) -> str:
        target, parts, words = self.rng.randint(low, high), [], 0
        while words < target:
            parts.append(self.sentence())
            words += parts[-1].count(" ") + 1
        return " ".join(parts)


def fill(messages: int, users: list, per_session: int, seed: int) -> None:
    from sessions_app.models import ChatMessage, ChatSession

    writer = Writer(seed)
    sessions_each = max(1, messages // len(users) // per_session)
    for number, user in enumerate(users):
        sessions = ChatSession.objects.bulk_create(
            [ChatSession(owner=user, name=writer.sentence()[:60]) for _ in range(sessions_each)])
        rows = []
        for session in sessions:
            for seq in range(1, per_session + 1):
                role = "user" if seq % 2 else "assistant"
                rows.append(ChatMessage(session=session, seq=seq, role=role,
                                        content=writer.text(8, 40) if role == "user" else writer.text(40, 250)))
        if number == 0:  # the rare word, in five of the first user's messages, old ones among them
            for row in writer.rng.sample(rows, 5):
                row.content += f" We saw the {RARE} last week."
        ChatMessage.objects.bulk_create(rows, batch_size=2000)


def percentiles(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[max(0, round(len(times) * 0.95) - 1)]


def time_view(client, q: str | None, repeat: int) -> tuple[float, float, int]:
    """The view over Django's test client: p50, p95 (ms) and the count of matching sessions."""
    times, count = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get("/api/sessions", {} if q is None else {"q": q})
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.content[:300]
        count = response.json()["count"]
    return (*percentiles(times), count)


def time_selector(user, q: str, repeat: int) -> tuple[float, float]:
    """The selector alone, as the view uses it: the search, the count, a page of 50, its matches."""
    from sessions_app.search import session_search

    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        found = session_search(owner=user, text=q)
        found.sessions.count()
        found.matches_attach(list(found.sessions[:50]))
        times.append((time.perf_counter() - started) * 1000)
    return percentiles(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--per-session", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from rest_framework.test import APIClient

    from accounts.tokens import token_pair_for
    from sessions_app.models import ChatMessage

    user_model = get_user_model()
    users = list(user_model.objects.filter(username__startswith="bench").order_by("pk"))
    filled = "reused"
    if not users:  # a given AGENTSITE_DATA_DIR (or DATABASE_URL) that holds a run's data is searched again
        users = [user_model.objects.create_user(username=f"bench{n}", password=None) for n in range(args.users)]
        started = time.perf_counter()
        fill(args.messages, users, args.per_session, seed=47)
        spent = time.perf_counter() - started
        filled = f"written with the index in {spent:.1f} s, {spent / args.messages * 1e6:.0f} µs a message"
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")  # as autovacuum would soon: the planner's statistics
    total = ChatMessage.objects.count()
    print(f"database: {connection.vendor}; {total:,} messages of {len(users)} users, {args.per_session} a "
          f"session ({filled})")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_pair_for(users[0])['token']}", HTTP_HOST="127.0.0.1")
    print("  GET /api/sessions?q= (the view, a page of 50: p50 / p95), then the selector alone (p50 / p95)")
    for label, q in (("rare word", RARE), ("common word", "the"), ("topical word", "kubernetes"),
                     ("prefix", "conf"), ("two words", "docker cluster"), ("the list, no q", None)):
        client.get("/api/sessions", {} if q is None else {"q": q})  # warm
        p50, p95, count = time_view(client, q, args.repeat)
        line = f"  {label:15s} {str(q):15s} {count:4d} sessions   view {p50:6.2f} / {p95:6.2f} ms"
        if q is not None:
            line += "   selector {:6.2f} / {:6.2f} ms".format(*time_selector(users[0], q, args.repeat))
        print(line)


if __name__ == "__main__":
    main()
