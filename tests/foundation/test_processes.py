"""Which processes are alive (agentsite/core/processes.py): dead on this host by pid, elsewhere by a stale heartbeat;
sweepers get only the dead's ids; the heartbeat keeps a process alive and sweeps the others."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from agentsite.core import processes
from agentsite.core.processes import current_process_id, dead_process_ids, host_identity, pid_alive, sweep_dead
from agentsite.models import ServiceProcess

pytestmark = pytest.mark.django_db


def dead_process() -> str:
    """The id of a process of this host that is not running, recorded as if it had owned work: a pid above the
    kernel's pid_max, which no process can have (no process is started for it, so unit tests stay in the fast
    tier)."""
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    process_id = f"{host_identity()}:{pid}:1"
    now = timezone.now()
    ServiceProcess.objects.update_or_create(pk=process_id, defaults={
        "host": host_identity(), "pid": pid, "started_at": now, "seen_at": now})
    return process_id


def elsewhere(name: str, seen_seconds_ago: float) -> str:
    process_id = f"other-host/abc:{name}:1"
    seen = timezone.now() - timedelta(seconds=seen_seconds_ago)
    ServiceProcess.objects.create(pk=process_id, host="other-host/abc", pid=1, started_at=seen, seen_at=seen)
    return process_id


@pytest.fixture
def recorded_sweeps():
    calls = []

    def sweeper(dead, include_unowned):
        calls.append((sorted(dead), include_unowned))
        return len(dead)

    processes.on_process_death("test sweeper", sweeper)
    yield calls
    processes._sweepers.pop("test sweeper", None)


def test_this_process_is_recorded_once_and_is_alive(monkeypatch):
    # An earlier test of this process may have recorded it inside a transaction that was rolled back since.
    monkeypatch.setattr(processes, "_current", None)
    first = current_process_id()
    assert current_process_id() == first
    assert first.startswith(f"{host_identity()}:{os.getpid()}:")
    assert pid_alive(os.getpid(), first)
    row = ServiceProcess.objects.get(pk=first)
    assert row.pid == os.getpid() and row.host == host_identity()
    assert first not in dead_process_ids()


def test_dead_here_by_pid_and_elsewhere_by_a_stale_heartbeat_but_not_a_fresh_one(settings):
    settings.AGENTSITE_PROCESS_STALE_S = 45
    gone = dead_process()
    stale = elsewhere("stale", 60)
    fresh = elsewhere("fresh", 5)
    reused = f"{host_identity()}:{os.getpid()}:1"  # this pid, but a start time that is not this process's
    ServiceProcess.objects.create(pk=reused, host=host_identity(), pid=os.getpid(), started_at=timezone.now(),
                                  seen_at=timezone.now())
    assert sorted(dead_process_ids()) == sorted([gone, stale, reused])
    assert fresh not in dead_process_ids() and current_process_id() not in dead_process_ids()


def test_a_sweep_hands_only_the_dead_to_the_sweepers_and_forgets_them(recorded_sweeps):
    gone = dead_process()
    fresh = elsewhere("fresh", 1)
    marked = sweep_dead()
    assert recorded_sweeps == [([gone], False)] and marked["test sweeper"] == 1
    assert not ServiceProcess.objects.filter(pk=gone).exists() and ServiceProcess.objects.filter(pk=fresh).exists()
    assert sweep_dead() == {}  # nothing dead left: the sweepers are not even asked
    assert sweep_dead(include_unowned=True)["test sweeper"] == 0
    assert recorded_sweeps[-1] == ([], True)


def test_one_failing_sweeper_does_not_keep_the_others_from_marking(recorded_sweeps):
    def broken(dead, include_unowned):
        raise RuntimeError("sweeper bug")

    processes.on_process_death("a broken sweeper", broken)
    try:
        dead_process()
        marked = sweep_dead()
    finally:
        processes._sweepers.pop("a broken sweeper", None)
    assert marked["test sweeper"] == 1 and "a broken sweeper" not in marked
