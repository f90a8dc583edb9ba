"""How /api/usage's queries scale with the number of recorded calls (issue 27, item 7), and what recording costs.

    python bench/usage.py [--calls 1000000 10000000] [--users 200] [--days 90]

For each size it records that many calls through the real path (`usage.buffer.add`, as the metering does on
every LLM call: the in-process aggregation), flushes them into a fresh database (SQLite in a temporary data
directory, or DATABASE_URL's PostgreSQL), and times the /api/usage view over HTTP-less Django test requests (the
view, its query and serialization; no network) for the questions the dashboard asks:

- one user, 30 days, `group_by=day,model` (the Usage page's chart),
- one user, 30 days, `group_by=key` and `facet` (its tables),
- an admin, everyone, 90 days, `group_by=user` (the admin's per-user table).

With `--agents N` each call is also made for one of N named agents or none (Caller.agent; one in N+1 for none),
which multiplies the aggregate rows by up to N+1, and three questions by agent are timed too: a user's
`group_by=agent`, the admin's `group_by=agent` over everyone and the admin's one agent by day (`?agent=`).

The calls are spread over `--users` users × 3 keys × 4 models × 3 facets × `--days` days (random, seeded), as
a team's server would see them; the aggregate rows are what the query reads, so the figures depend on that
spread, not on the number of calls: that is the point (a spend log with a row per call slows down as it grows).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def setup() -> None:
    os.environ.setdefault("AGENTSITE_DATA_DIR", tempfile.mkdtemp(prefix="agentsite-bench-usage-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    os.environ["AGENTSITE_USAGE_FLUSH_S"] = "0"  # this script flushes
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def record(calls: int, users: list[int], days: int, seed: int, agents: int = 0) -> float:
    """Record `calls` calls through usage.buffer.add, flushing every 200,000; returns µs per add."""
    from agentsite.agent.usage import Caller, CallRecord
    from usage import buffer

    rng = random.Random(seed)
    today = datetime.now(UTC).date()
    day_names = [(today - timedelta(days=n)).isoformat() for n in range(days)]
    models, facets = ["gpt-4o", "claude-sonnet", "llama3", "agent"], ["v1", "chat", "workflow"]
    slugs = ["", *(f"agent{n}" for n in range(agents))]
    callers = {(user, key, facet, slug): Caller(user, f"{user}{key}", facet, agent=slug) for user in users
               for key in range(3) for facet in facets for slug in slugs}
    caller_keys = list(callers)
    spent = 0.0
    batch = 200_000
    done = 0
    while done < calls:
        count = min(batch, calls - done)
        picks = [(callers[rng.choice(caller_keys)], rng.choice(models), rng.choice(day_names),
                  rng.randint(10, 2000), rng.randint(5, 800)) for _ in range(count)]
        started = time.perf_counter()
        for caller, model, day, prompt, completion in picks:
            buffer.add(CallRecord(caller, model, model, prompt, completion, 120.0, "ok", True), 0.0001, day=day)
        spent += time.perf_counter() - started
        buffer.flush()
        done += count
    return spent / calls * 1e6


def time_query(client, path: str, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.content[:300]
    return statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--agents", type=int, default=0, help="named agents the calls are made for (0: none)")
    args = parser.parse_args()
    setup()
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    from accounts.tokens import token_pair_for
    from usage.models import UsageDaily

    user_model = get_user_model()
    users = [user_model.objects.create_user(username=f"bench{n}", password=None).pk for n in range(args.users)]
    admin = user_model.objects.create_superuser(username="bench-admin", password=None, email="")
    one = user_model.objects.get(pk=users[0])

    def client_for(user) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_pair_for(user)['token']}", HTTP_HOST="127.0.0.1")
        return client

    user_client, admin_client = client_for(one), client_for(admin)
    today = datetime.now(UTC).date()
    month_ago, quarter_ago = (today - timedelta(days=29)).isoformat(), (today - timedelta(days=89)).isoformat()
    database = "PostgreSQL" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "SQLite"
    spread = f" x {args.agents + 1} agents (none included)" if args.agents else ""
    print(f"database: {database}; {args.users} users x 3 keys x 4 models x 3 facets x {args.days} days{spread}")
    recorded = 0
    for target in sorted(args.calls):
        per_add = record(target - recorded, users, args.days, seed=target, agents=args.agents)
        recorded = target
        rows = UsageDaily.objects.count()
        print(f"\n{recorded:,} calls recorded -> {rows:,} aggregate rows (buffer.add: {per_add:.2f} µs per call)")
        by_agent = (
            ("user, 30 days, group_by=agent", user_client, f"/api/usage?from={month_ago}&group_by=agent"),
            ("admin, all users, 90 days, group_by=agent", admin_client,
             f"/api/usage?from={quarter_ago}&group_by=agent"),
            ("admin, 90 days, agent=agent0, group_by=day", admin_client,
             f"/api/usage?from={quarter_ago}&agent=agent0&group_by=day"),
        ) if args.agents else ()
        for label, client, path in (
            *by_agent,
            ("user, 30 days, group_by=day,model", user_client, f"/api/usage?from={month_ago}&group_by=day,model"),
            ("user, 30 days, group_by=key", user_client, f"/api/usage?from={month_ago}&group_by=key"),
            ("user, 30 days, group_by=facet", user_client, f"/api/usage?from={month_ago}&group_by=facet"),
            ("admin, all users, 90 days, group_by=user", admin_client, f"/api/usage?from={quarter_ago}&group_by=user"),
            ("admin, all users, 90 days, group_by=day", admin_client, f"/api/usage?from={quarter_ago}&group_by=day"),
        ):
            p50, worst = time_query(client, path, args.repeat)
            print(f"  {label:45s} p50 {p50:8.2f} ms   max {worst:8.2f} ms")


if __name__ == "__main__":
    main()
