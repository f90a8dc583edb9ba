"""The cost of one scheduler tick: N enabled tasks of which 100 are due (issue 11 target: <= 50 ms at 10,000);
and, with --lag, how late scheduled runs start under a real `manage.py serve` (issue 30: within 1 s).

    python bench/scheduler.py                   # 10,000 and 100,000 tasks, SQLite in a temporary data dir
    DATABASE_URL=postgres://... python bench/scheduler.py   # the same on PostgreSQL (a scratch database!)
    python bench/scheduler.py --lag [--source DIR]   # serve from this tree (or DIR: another release's tree)

--lag (SQLite, the embedded default, as a user starts it): serve runs from the source tree with the test
runner (tests/scheduler/runners.py: records and returns at once, so what is measured is the scheduling, not
an LLM); 10,000 tasks are due next year, 60 tasks fire at the next three minute boundaries (20 each), then
100 more at the fourth, all in the same second. Each run's lag is its `started_at` (claimed by a task
worker) minus its `scheduled_for`; printed as p50/p99/max for the 60 and for the 100.

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


LAG_SPREAD, LAG_BURST, LAG_IDLE = 60, 100, 10_000


def lag(source: Path) -> None:
    """See the module docstring (--lag)."""
    import re
    import signal
    import sqlite3
    import subprocess

    data_dir = Path(tempfile.mkdtemp(prefix="agentsite-bench-lag-"))
    env = {**{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
           "AGENTSITE_DATA_DIR": str(data_dir), "DJANGO_SETTINGS_MODULE": "agentsite.settings",
           "AGENTSITE_SCHEDULER_RUNNER": "tests.scheduler.runners.recording_runner", "PYTHONUNBUFFERED": "1"}
    env.pop("AGENTSITE_Q_SYNC", None)
    serve_text = "".join(path.read_text() for path in (source / "agentsite").glob("**/serve.py"))
    workers = ["--workers", "1"] if "--workers" in serve_text else []
    import socket

    with socket.socket() as probe:  # a free port (older releases have no --port 0)
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    server = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", port, *workers], cwd=source, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        for line in server.stdout:
            if re.search(r"serving on http://", line):
                break
        else:
            raise SystemExit("serve did not start")
        import threading

        threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()  # drain its log
        now = datetime.now(UTC)
        first = (now + timedelta(seconds=75)).replace(second=0, microsecond=0)  # >= 15 s to populate
        instants = [first + timedelta(minutes=index) for index in range(4)]
        script = f"""
import django; django.setup()
from datetime import datetime, timedelta
from django.contrib.auth import get_user_model
from scheduler.models import ScheduledTask
owner = get_user_model().objects.get(username="admin")
instants = [datetime.fromisoformat(text) for text in {[instant.isoformat() for instant in instants]!r}]
tasks = [ScheduledTask(owner=owner, name=f"idle{{i}}", cron="0 0 1 1 *", prompt="p",
                       next_run_at=instants[0] + timedelta(days=400)) for i in range({LAG_IDLE})]
for index in range({LAG_SPREAD}):
    at = instants[index % 3]
    tasks.append(ScheduledTask(owner=owner, name=f"spread{{index}}", cron=f"{{at.minute}} {{at.hour}} * * *",
                               prompt="p", next_run_at=at))
at = instants[3]
tasks += [ScheduledTask(owner=owner, name=f"burst{{i}}", cron=f"{{at.minute}} {{at.hour}} * * *", prompt="p",
                        next_run_at=at) for i in range({LAG_BURST})]
ScheduledTask.objects.bulk_create(tasks, batch_size=2000)
"""
        subprocess.run([sys.executable, "-c", script], cwd=source, env=env, check=True)
        print(f"tasks made at {datetime.now(UTC):%H:%M:%S}; firing at "
              f"{', '.join(f'{instant:%H:%M:%S}' for instant in instants)}", flush=True)
        database = sqlite3.connect(data_dir / "db.sqlite3", timeout=30)
        deadline = time.monotonic() + (instants[3] - datetime.now(UTC)).total_seconds() + 180
        query = ("SELECT t.name, r.scheduled_for, r.started_at FROM scheduler_taskrun r "
                 "JOIN scheduler_scheduledtask t ON t.id = r.task_id WHERE r.started_at IS NOT NULL")
        rows: list = []
        while time.monotonic() < deadline:
            rows = database.execute(query).fetchall()
            if len(rows) >= LAG_SPREAD + LAG_BURST:
                break
            time.sleep(1)
        lags: dict[str, list[float]] = {"spread": [], "burst": []}
        for name, scheduled, started in rows:
            kind = "spread" if name.startswith("spread") else "burst"
            lags[kind].append((datetime.fromisoformat(started) - datetime.fromisoformat(scheduled)).total_seconds())
        print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, sqlite; {time.strftime('%Y-%m-%d')}; "
              f"serve from {source}")
        for kind, wanted, what in (("spread", LAG_SPREAD, "60 tasks over 3 minutes"),
                                   ("burst", LAG_BURST, f"100 tasks due in one second among {LAG_IDLE:,}")):
            values = lags[kind]
            if not values:
                print(f"{what}: no run started")
                continue
            print(f"{what}: {len(values)}/{wanted} started; lag p50 {percentile(values, 50):.3f} s, "
                  f"p99 {percentile(values, 99):.3f} s, max {max(values):.3f} s")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


if __name__ == "__main__":
    if "--lag" in sys.argv:
        source = Path(sys.argv[sys.argv.index("--source") + 1]) if "--source" in sys.argv else ROOT
        lag(source.resolve())
    else:
        main()
