"""The tick with a controlled clock: due tasks, exactly once, missed occurrences, overlap, the runner."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, transaction

from scheduler import services
from scheduler.models import ScheduledTask, TaskRun
from tests.scheduler.runners import CALLS

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def recording(settings):
    settings.AGENTSITE_SCHEDULER_RUNNER = "tests.scheduler.runners.recording_runner"
    settings.AGENTSITE_SCHEDULER_TICK_S = 60
    CALLS.clear()


def make(owner, cron="*/5 * * * *", next_run_at=T0, **fields) -> ScheduledTask:
    task = services.task_create(owner=owner, name=fields.pop("name", "t"), cron=cron, prompt="do it", **fields)
    ScheduledTask.objects.filter(pk=task.pk).update(next_run_at=next_run_at)
    task.refresh_from_db()
    return task


def runs(task) -> list[TaskRun]:
    return list(TaskRun.objects.filter(task=task).order_by("created_at"))


def test_a_task_that_is_not_due_yet_does_not_run(owner):
    task = make(owner)
    assert services.tick(now=T0 - timedelta(seconds=1)) == []
    assert runs(task) == []


def test_a_due_task_runs_once_for_its_occurrence_and_moves_on(owner):
    task = make(owner)
    [run] = services.tick(now=T0 + timedelta(seconds=20))
    assert (run.trigger, run.scheduled_for) == ("schedule", T0)
    task.refresh_from_db()
    assert task.next_run_at == T0 + timedelta(minutes=5) and task.last_run_at == T0
    assert services.tick(now=T0 + timedelta(seconds=40)) == []
    stored = runs(task)
    assert [(item.status, item.output) for item in stored] == [("success", f"ran t for {T0.isoformat()}")]
    assert CALLS == [(str(task.pk), T0.isoformat())]


def test_the_run_gets_the_occurrence_as_scheduled_for_an_idempotency_key(owner):
    task = make(owner, cron="0 9 * * *", timezone_name="Asia/Tokyo", next_run_at=datetime(2026, 6, 2, 0, tzinfo=UTC))
    [run] = services.tick(now=datetime(2026, 6, 2, 0, 0, 30, tzinfo=UTC))
    assert run.scheduled_for == datetime(2026, 6, 2, 0, tzinfo=UTC)
    task.refresh_from_db()
    assert task.next_run_at == datetime(2026, 6, 3, 0, tzinfo=UTC)


def test_the_database_refuses_a_second_run_for_one_occurrence_but_not_a_second_manual_run(owner):
    task = make(owner)
    TaskRun.objects.create(task=task, trigger="schedule", scheduled_for=T0)
    with pytest.raises(IntegrityError), transaction.atomic():
        TaskRun.objects.create(task=task, trigger="catch_up", scheduled_for=T0)
    TaskRun.objects.create(task=task, trigger="manual", scheduled_for=T0)
    TaskRun.objects.create(task=task, trigger="manual", scheduled_for=T0)
    assert TaskRun.objects.filter(task=task).count() == 3


def test_two_ticks_at_once_record_each_occurrence_exactly_once(owner, settings):
    settings.AGENTSITE_SCHEDULER_RUNNER = "tests.scheduler.runners.recording_runner"
    tasks = [make(owner, name=f"t{index}") for index in range(20)]
    barrier = threading.Barrier(2)
    results: list[list[TaskRun]] = []

    def ticker():
        barrier.wait()
        try:
            results.append(services.tick(now=T0 + timedelta(seconds=5)))
        finally:
            from django.db import connection

            connection.close()

    threads = [threading.Thread(target=ticker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sum(len(found) for found in results) == 20
    assert [TaskRun.objects.filter(task=task).count() for task in tasks] == [1] * 20
    assert sorted(CALLS) == sorted((str(task.pk), T0.isoformat()) for task in tasks)


def test_a_tick_that_loses_the_race_for_an_occurrence_inserts_nothing_and_runs_nothing(owner, monkeypatch):
    # Two ticks that both read the task as due: the database serialises real ticks (SQLite's one writer,
    # PostgreSQL's skip_locked), so the second tick runs whole inside the first, after its read and before its
    # insert, on the same connection (its lock is the first tick's own, so skip_locked does not skip the task).
    task = make(owner)
    insert = services._insert_runs
    inner: list[list[TaskRun]] = []

    def insert_after_another_tick(runs):
        if not inner:
            inner.append([])
            inner[0] = services.tick(now=T0 + timedelta(seconds=6))
        insert(runs)

    monkeypatch.setattr(services, "_insert_runs", insert_after_another_tick)
    assert services.tick(now=T0 + timedelta(seconds=5)) == []  # the loser: nothing recorded, nothing queued
    assert [(run.trigger, run.scheduled_for) for run in inner[0]] == [("schedule", T0)]
    assert [(run.pk, run.status) for run in runs(task)] == [(inner[0][0].pk, "success")]
    assert CALLS == [(str(task.pk), T0.isoformat())]  # the winner's run, once
    task.refresh_from_db()
    assert task.next_run_at == T0 + timedelta(minutes=5)


def test_an_occurrence_already_recorded_is_not_recorded_or_run_again_and_the_task_moves_on(owner):
    task = make(owner)
    earlier = TaskRun.objects.create(task=task, trigger="schedule", scheduled_for=T0, status="success")
    assert services.tick(now=T0 + timedelta(seconds=5)) == []
    assert [run.pk for run in runs(task)] == [earlier.pk] and CALLS == []
    task.refresh_from_db()
    assert task.next_run_at == T0 + timedelta(minutes=5) and task.last_run_at is None  # this tick ran nothing
    assert services.tick(now=T0 + timedelta(seconds=10)) == []  # not due again: it moved on


def test_after_downtime_run_once_fires_one_catch_up_run(owner):
    task = make(owner, cron="0 * * * *", next_run_at=T0 - timedelta(days=3))
    [run] = services.tick(now=T0 + timedelta(minutes=30))
    assert (run.trigger, run.scheduled_for, run.status) == ("catch_up", T0, "queued")
    task.refresh_from_db()
    assert task.next_run_at == T0 + timedelta(hours=1)
    assert [item.status for item in runs(task)] == ["success"]
    assert services.tick(now=T0 + timedelta(minutes=31)) == []


def test_after_downtime_skip_records_one_skipped_run_saying_what_was_missed(owner):
    make(owner, cron="0 * * * *", next_run_at=T0 - timedelta(days=3), missed="skip")
    [run] = services.tick(now=T0 + timedelta(minutes=30))
    assert (run.trigger, run.status, run.scheduled_for) == ("catch_up", "skipped", T0)
    assert "73 occurrence(s)" in run.error and "skip" in run.error
    assert CALLS == []


def test_one_occurrence_found_later_than_two_ticks_counts_as_missed(owner):
    make(owner, cron="0 9 * * *", next_run_at=T0, missed="skip")
    [run] = services.tick(now=T0 + timedelta(minutes=3))
    assert (run.trigger, run.status) == ("catch_up", "skipped")


def test_an_occurrence_while_the_previous_run_is_still_running_is_skipped(owner):
    task = make(owner)
    TaskRun.objects.create(task=task, trigger="schedule", scheduled_for=T0 - timedelta(minutes=5), status="running")
    [run] = services.tick(now=T0)
    assert run.status == "skipped" and "still running" in run.error
    task.refresh_from_db()
    assert task.next_run_at == T0 + timedelta(minutes=5)


def test_a_disabled_task_never_fires_and_catches_nothing_up_when_enabled_again(owner):
    task = make(owner)
    services.task_update(task=task, changes={"enabled": False})
    task.refresh_from_db()
    assert task.next_run_at is None
    assert services.tick(now=T0 + timedelta(days=1)) == []
    services.task_update(task=task, changes={"enabled": True})
    task.refresh_from_db()
    assert task.next_run_at > datetime.now(UTC) - timedelta(seconds=1)
    assert runs(task) == []


def test_an_inactive_owners_task_is_recorded_skipped(owner):
    make(owner)
    owner.is_active = False
    owner.save()
    [run] = services.tick(now=T0)
    assert run.status == "skipped" and "inactive" in run.error
    assert CALLS == []


def test_history_keeps_the_last_100_runs(owner):
    task = make(owner)
    TaskRun.objects.bulk_create([TaskRun(task=task, trigger="manual", scheduled_for=T0 - timedelta(hours=index),
                                         status="success") for index in range(100)])
    oldest = TaskRun.objects.filter(task=task).order_by("created_at").first()
    services.tick(now=T0)
    assert TaskRun.objects.filter(task=task).count() == 100
    assert not TaskRun.objects.filter(pk=oldest.pk).exists()


def test_a_failing_runner_ends_its_run_as_error_and_other_tasks_still_run(owner, settings):
    settings.AGENTSITE_SCHEDULER_RUNNER = "tests.scheduler.runners.failing_runner"
    first, second = make(owner, name="a"), make(owner, name="b")
    assert len(services.tick(now=T0)) == 2
    assert [(run.status, run.error) for run in runs(first) + runs(second)] == [
        ("error", "RuntimeError: the runner broke")] * 2


def test_a_ticks_runs_are_queued_in_chunks_whose_runs_run_side_by_side(owner, settings):
    from tests.scheduler.runners import IN_FLIGHT

    settings.AGENTSITE_SCHEDULER_RUNNER = "tests.scheduler.runners.overlapping_runner"
    settings.AGENTSITE_SCHEDULER_RUN_CONCURRENCY = 3
    IN_FLIGHT.update(now=0, most=0)
    tasks = [make(owner, name=f"t{index}") for index in range(7)]
    assert len(services.tick(now=T0)) == 7
    # Spread over the cluster's 2 workers: chunks of 4 and 3 (more than the 3 a chunk at least), each run side
    # by side (the cluster is synchronous here, so the chunks run one after the other).
    assert IN_FLIGHT["most"] == 4
    assert [run.status for task in tasks for run in runs(task)] == ["success"] * 7


def test_a_chunk_of_one_is_at_least_the_concurrency_and_its_runs_start_together(owner, settings):
    from tests.scheduler.runners import IN_FLIGHT

    settings.AGENTSITE_SCHEDULER_RUNNER = "tests.scheduler.runners.overlapping_runner"
    settings.AGENTSITE_SCHEDULER_RUN_CONCURRENCY = 8
    IN_FLIGHT.update(now=0, most=0)
    tasks = [make(owner, name=f"t{index}") for index in range(5)]
    assert len(services.tick(now=T0)) == 5
    assert IN_FLIGHT["most"] == 5  # fewer runs than the concurrency: one chunk, not 3 and 2
    started = {run.started_at for task in tasks for run in runs(task)}
    assert len(started) == 1  # claimed by one statement


def test_a_run_past_its_time_limit_ends_as_error(owner, settings):
    settings.AGENTSITE_SCHEDULER_RUNNER = "tests.scheduler.runners.slow_runner"
    settings.AGENTSITE_SCHEDULER_RUN_TIMEOUT_S = 0.2
    task = make(owner)
    services.tick(now=T0)
    [run] = runs(task)
    assert run.status == "error" and "0.2 s" in run.error


def test_a_manual_run_is_queued_at_once_and_runs(owner):
    task = make(owner)
    run = services.task_run_now(task=task)
    assert run.trigger == "manual"
    run.refresh_from_db()
    assert run.status == "success" and CALLS == [(str(task.pk), run.scheduled_for.isoformat())]


def test_runs_left_running_by_a_dead_process_or_none_are_marked_error_at_start_not_a_live_ones(owner):
    from agentsite.core.processes import current_process_id
    from agentsite.core.startup import run_start_hooks
    from tests.foundation.test_processes import dead_process

    task = make(owner)
    dead = TaskRun.objects.create(task=task, trigger="schedule", scheduled_for=T0, status="running",
                                  process=dead_process())
    unowned = TaskRun.objects.create(task=task, trigger="schedule", scheduled_for=T0 + timedelta(minutes=1),
                                     status="running")
    live = TaskRun.objects.create(task=task, trigger="schedule", scheduled_for=T0 + timedelta(minutes=2),
                                  status="running", process=current_process_id())
    assert run_start_hooks()["work left running by stopped processes"]["scheduled runs"] == 2
    statuses = {run.pk: (run.status, run.error) for run in runs(task)}
    assert statuses[dead.pk][0] == statuses[unowned.pk][0] == "error" and "stopped" in statuses[dead.pk][1]
    assert statuses[live.pk][0] == "running"


def test_the_tick_schedule_is_created_at_start_and_not_duplicated(settings):
    from django_q.models import Schedule

    from agentsite.core.startup import run_start_hooks

    run_start_hooks()
    run_start_hooks()
    [schedule] = Schedule.objects.filter(name=services.TICK_SCHEDULE_NAME)
    assert (schedule.func, schedule.schedule_type, schedule.minutes, schedule.repeats) == (
        "scheduler.tasks.tick", Schedule.MINUTES, 1, -1)
    settings.AGENTSITE_SCHEDULER_TICK_S = 300
    run_start_hooks()
    [schedule] = Schedule.objects.filter(name=services.TICK_SCHEDULE_NAME)
    assert (schedule.schedule_type, schedule.minutes, schedule.cron) == (Schedule.MINUTES, 5, None)


@pytest.mark.parametrize("raw", ["5", "59", "90", "0", "-60", "sixty"])
def test_a_tick_interval_that_is_not_whole_minutes_stops_the_settings_naming_the_variable(monkeypatch, raw):
    """The tick has one path, django-q2's minutes schedule, which production runs: no seconds branch."""
    from django.core.exceptions import ImproperlyConfigured

    from agentsite.core.env import env_whole_minutes_s

    monkeypatch.setenv("AGENTSITE_SCHEDULER_TICK_S", raw)
    with pytest.raises(ImproperlyConfigured, match="AGENTSITE_SCHEDULER_TICK_S"):
        env_whole_minutes_s("AGENTSITE_SCHEDULER_TICK_S", 60)


@pytest.mark.parametrize(("raw", "seconds"), [(None, 60), ("", 60), ("60", 60), ("120", 120), ("3600", 3600)])
def test_a_tick_interval_in_whole_minutes_is_taken(monkeypatch, raw, seconds):
    from agentsite.core.env import env_whole_minutes_s

    if raw is None:
        monkeypatch.delenv("AGENTSITE_SCHEDULER_TICK_S", raising=False)
    else:
        monkeypatch.setenv("AGENTSITE_SCHEDULER_TICK_S", raw)
    assert env_whole_minutes_s("AGENTSITE_SCHEDULER_TICK_S", 60) == seconds
