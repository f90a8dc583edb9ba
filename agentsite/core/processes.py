"""Which processes of the service are alive, so that work a dead one left `running` is marked, and only that.

A process that owns work calls `current_process_id()`: the first call records it (`ServiceProcess`) and starts
a heartbeat thread, and rows of running work carry that id. A process is dead when it ran on this host and its
pid is gone (or reused), or when its heartbeat is older than AGENTSITE_PROCESS_STALE_S, wherever it ran.
`sweep_dead()` hands the dead ids to every facet's sweeper (`on_process_death`) at start, when `serve` sees a
child die, and periodically from each heartbeat thread. A live process's work is never marked.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import Q
from django.utils import timezone

if TYPE_CHECKING:
    from django.db.models import Q

logger = logging.getLogger(__name__)

Sweeper = Callable[[list[str], bool], int]  # (dead process ids, include work with no owner) -> rows marked

_sweepers: dict[str, Sweeper] = {}
_lock = threading.Lock()
_current: tuple[int, str] | None = None  # (pid, id) of this process once recorded
heartbeat_thread: threading.Thread | None = None


def owned_by(dead: list[str], include_unowned: bool = False) -> Q:
    """The filter a sweeper applies to its rows' `process` field: owned by one of the dead (or by none)."""
    return Q(process__in=dead) | Q(process="") if include_unowned else Q(process__in=dead)


def on_process_death(name: str, sweeper: Sweeper) -> None:
    """Register a facet's sweeper under a name (replacing an earlier one of that name)."""
    _sweepers[name] = sweeper


def host_identity() -> str:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        boot = "noboot"
    return f"{socket.gethostname()}/{boot}"


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (None: no such process, or not Linux)."""
    try:
        fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19] if fields[0] != "Z" else None  # field 22 of stat; a zombie has finished


def _process_id(pid: int) -> str:
    return f"{host_identity()}:{pid}:{_start_ticks(pid) or 0}"


def pid_alive(pid: int, process_id: str) -> bool:
    """Whether the process with this id still runs on this host (the same pid, started at the same time)."""
    ticks = _start_ticks(pid)
    return ticks is not None and process_id.endswith(f":{pid}:{ticks}")


def current_process_id() -> str:
    """This process's id, recorded (and its heartbeat started) on the first call in each process. Sync."""
    current = _current
    if current is not None and current[0] == os.getpid():
        return current[1]
    return _record()


def recorded_process_id() -> str | None:
    """This process's id when it is recorded already, else None: no database, so async code asks it first and
    crosses to a database thread for current_process_id() only on the first call."""
    current = _current
    return current[1] if current is not None and current[0] == os.getpid() else None


def _record() -> str:
    global _current, heartbeat_thread
    # Django's app registry: the kernel is imported before the models are ready.
    from agentsite.models import ServiceProcess

    with _lock:
        pid = os.getpid()
        if _current is not None and _current[0] == pid:
            return _current[1]
        process_id = _process_id(pid)
        now = timezone.now()
        command = " ".join(os.path.basename(part) for part in sys.argv[:2])[:200]
        ServiceProcess.objects.update_or_create(pk=process_id, defaults={
            "host": host_identity(), "pid": pid, "command": command, "started_at": now, "seen_at": now})
        _current = (pid, process_id)
        heartbeat_thread = threading.Thread(target=_heartbeat, args=(process_id,), name="process-heartbeat",
                                            daemon=True)
        heartbeat_thread.start()
    return process_id


def _heartbeat(process_id: str) -> None:
    # Django's app registry: the kernel is imported before the models are ready.
    from agentsite.models import ServiceProcess

    beat, sweep_every = settings.AGENTSITE_PROCESS_HEARTBEAT_S, settings.AGENTSITE_PROCESS_SWEEP_S
    since_sweep = 0.0
    stop = threading.Event()
    while not stop.wait(beat):
        if _current is None or _current[1] != process_id:
            return  # forgotten (tests) or this thread survived a fork it should not have
        try:
            close_old_connections()
            now = timezone.now()
            if not ServiceProcess.objects.filter(pk=process_id).update(seen_at=now):
                # Swept as dead by a process that did not hear from this one in time: record it again, so its
                # later work is owned; what was already marked stays marked.
                logger.error("This process (%s) was taken for dead; recording it again", process_id)
                ServiceProcess.objects.update_or_create(pk=process_id, defaults={
                    "host": host_identity(), "pid": os.getpid(), "started_at": now, "seen_at": now})
            since_sweep += beat
            if since_sweep >= sweep_every:
                since_sweep = 0.0
                sweep_dead()
        except Exception:  # a boundary: the database may be away for a while; the next beat tries again
            logger.exception("The process heartbeat failed")
        finally:
            connection.close()


def dead_process_ids() -> list[str]:
    # Django's app registry: the kernel is imported before the models are ready.
    from agentsite.models import ServiceProcess

    stale_before = timezone.now() - timedelta(seconds=settings.AGENTSITE_PROCESS_STALE_S)
    me = _current[1] if _current is not None and _current[0] == os.getpid() else None
    host = host_identity()
    dead = []
    for process_id, process_host, pid, seen_at in ServiceProcess.objects.values_list("id", "host", "pid", "seen_at"):
        if process_id == me:
            continue
        if process_host == host:
            if not pid_alive(pid, process_id):
                dead.append(process_id)
        elif seen_at < stale_before:
            dead.append(process_id)
    return dead


def sweep_dead(*, include_unowned: bool = False) -> dict[str, int]:
    """Mark the work of dead processes through every sweeper, then forget those processes. Returns the rows
    each sweeper marked. `include_unowned`: also work that names no process (only when the service starts)."""
    # Django's app registry: the kernel is imported before the models are ready.
    from agentsite.models import ServiceProcess

    dead = dead_process_ids()
    marked: dict[str, int] = {}
    if not dead and not include_unowned:
        return marked
    for name, sweeper in list(_sweepers.items()):
        try:
            marked[name] = sweeper(dead, include_unowned)
        except Exception:  # a boundary: one facet's failure must not keep the others' work unmarked
            logger.exception("The sweeper %r failed", name)
    ServiceProcess.objects.filter(pk__in=dead).delete()
    if any(marked.values()):
        logger.warning("Work left running by %d stopped process(es) marked: %s", len(dead), marked)
    return marked
