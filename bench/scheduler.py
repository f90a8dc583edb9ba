"""The cost of one scheduler tick: N enabled tasks of which 100 are due (issue 11 target: <= 50 ms at 10,000).

    python bench/scheduler.py                   # 10,000 and 100,000 tasks, SQLite in a temporary data dir
    DATABASE_URL=postgres://... python bench/scheduler.py   # the same on PostgreSQL (a scratch database!)

Each round puts the 100 due tasks' next_run_at back in the past and deletes their runs, then times
`scheduler.services.tick()`: selecting due tasks by the indexed next_run_at, locking and walking each,
inserting its run under the unique constraint, advancing it, trimming its history and queueing the runs
(in chunks of AGENTSITE_SCHEDULER_RUN_CONCURRENCY, one multi-row insert into django-q2's ORM broker on
SQLite). The runs themselves are not executed. The due tasks share one schedule, then have 100 different
ones (nothing shared between them: the worst case).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AGENTSITE_DATA_DIR", tempfile.mkdtemp(prefix="agentsite-bench-scheduler-"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
os.environ["AGENTSITE_Q_SYNC"] = "0"  # enqueue only: the tick is what is measured
DUE = 100
ROUNDS = 11


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))]


ZONES = ("Europe/Paris", "Asia/Tokyo", "America/New_York", "UTC")


def schedule(index: int, distinct: bool) -> tuple[str, str]:
    """The due tasks' schedules: one shared by all (many users' daily 09:00), or 100 different (cron, zone)
    pairs, each firing at minute 0 of the due hour, so nothing can be shared between them."""
    if not distinct or index >= DUE:
        return "*/5 * * * *", "Europe/Paris"
    return f"0,{5 + index % 50} * * * *", ZONES[index % len(ZONES)]


def populate(owner, total: int, now: datetime, distinct: bool = False) -> list:
    from scheduler.models import ScheduledTask, TaskRun

    TaskRun.objects.all().delete()
    ScheduledTask.objects.all().delete()
    later = now + timedelta(days=1)
    batch = [ScheduledTask(owner=owner, name=f"t{index}", cron=schedule(index, distinct)[0],
                           timezone=schedule(index, distinct)[1], prompt="p",
                           next_run_at=now - timedelta(seconds=5) if index < DUE else later)
             for index in range(total)]
    ScheduledTask.objects.bulk_create(batch, batch_size=2000)
    return list(ScheduledTask.objects.filter(next_run_at__lte=now).values_list("pk", flat=True))


def measure(total: int, distinct: bool = False) -> tuple[float, float, float]:
    from django.contrib.auth import get_user_model
    from django_q.models import OrmQ

    from scheduler.models import ScheduledTask, TaskRun
    from scheduler.services import tick

    owner, _ = get_user_model().objects.get_or_create(username="bench")
    now = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
    due = populate(owner, total, now.replace(second=0), distinct)
    timings, cpu_times = [], []
    for _ in range(ROUNDS):
        ScheduledTask.objects.filter(pk__in=due).update(next_run_at=now.replace(second=0))
        TaskRun.objects.filter(task_id__in=due).delete()
        OrmQ.objects.all().delete()
        started, cpu = time.perf_counter(), time.process_time()
        runs = tick(now=now)
        timings.append((time.perf_counter() - started) * 1000)
        cpu_times.append((time.process_time() - cpu) * 1000)
        assert len(runs) == DUE, len(runs)
    return percentile(timings[1:], 50), max(timings[1:]), percentile(cpu_times[1:], 50)


def main() -> None:
    import django
    from django.core.management import call_command

    from agentsite.core.datadir import data_dir_ensure

    data_dir_ensure()
    django.setup()
    call_command("migrate", verbosity=0)
    from django.db import connection

    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, {connection.vendor}; "
          f"{time.strftime('%Y-%m-%d')}")
    for total, distinct in ((10_000, False), (10_000, True), (100_000, False), (100_000, True)):
        p50, worst, cpu = measure(total, distinct)
        kind = "100 different schedules" if distinct else "one schedule"
        print(f"tick with {total:,} enabled tasks, {DUE} due on {kind}: {p50:.1f} ms p50, {worst:.1f} ms worst, "
              f"{cpu:.1f} ms CPU p50 ({p50 / DUE:.2f} ms per due task)")


if __name__ == "__main__":
    main()
