"""A child of `manage.py serve` never outlives serve for long, even when serve is killed outright.

Each child leads its own process group with SIGTERM as its parent-death signal, but a graceful stop of the task
cluster may wait for a busy worker's task. So each child's main process also runs a guard thread that notices
serve is gone (on a pidfd, else every POLL_S) and, after AGENTSITE_ORPHAN_GRACE_S, kills its whole group. It runs
only in a process serve itself started (AGENTSITE_SERVE_PID), so it never kills a group it does not own.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time

from django.conf import settings

SERVE_PID_ENV = "AGENTSITE_SERVE_PID"
POLL_S = 0.5

_started = False


def guard_if_child_of_serve() -> bool:
    """Start the guard when this process is a child serve started; whether it runs."""
    global _started
    serve_pid = os.environ.get(SERVE_PID_ENV, "")
    if _started or not serve_pid.isdigit() or int(serve_pid) != os.getppid() or os.getpgrp() != os.getpid():
        return _started

    grace = settings.AGENTSITE_ORPHAN_GRACE_S
    threading.Thread(target=_watch, args=(int(serve_pid), grace), name="agentsite-orphan-guard",
                     daemon=True).start()
    _started = True
    return True


def _wait_for_exit(serve_pid: int) -> None:
    """Until serve has exited, without waking meanwhile: a pidfd (Linux 5.3+) becomes readable when its process
    exits. Returns at once where there is none; the caller's poll of the parent pid then does the waiting."""
    try:
        pidfd = os.pidfd_open(serve_pid)
    except (AttributeError, OSError):
        return
    try:
        if os.getppid() != serve_pid:
            return  # serve was gone before the pidfd was opened: it may name another process
        select.select([pidfd], [], [])
    finally:
        os.close(pidfd)


def _watch(serve_pid: int, grace: float) -> None:
    _wait_for_exit(serve_pid)
    while os.getppid() == serve_pid:
        time.sleep(POLL_S)
    # serve is gone; the kernel has sent this process SIGTERM, and a graceful stop gets `grace` seconds.
    time.sleep(grace)
    os.killpg(os.getpgrp(), signal.SIGKILL)
