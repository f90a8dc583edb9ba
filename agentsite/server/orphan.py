"""A child of `manage.py serve` never outlives serve for long, even when serve is killed outright.

serve starts each child (daphne, the django-q2 cluster) as the leader of its own process group, with SIGTERM as
its parent-death signal. That SIGTERM starts a graceful stop, which the cluster does not bound: it waits for a
busy worker to finish its task (up to `AGENTSITE_Q_TIMEOUT`, 600 s), serving nobody meanwhile. So each child's
main process also runs this guard: a thread that notices serve is gone (its parent pid changed) and, once
`AGENTSITE_ORPHAN_GRACE_S` (15 s, serve's own stop grace) have passed, kills its whole process group. The
guard sleeps on a pidfd of serve, which wakes it when serve exits; where there is none, it looks every POLL_S. The
work it cuts off is marked by the next start's recovery, like any other crash's.

Invariant: the guard runs only in a process serve itself started (serve's pid in `AGENTSITE_SERVE_PID` is its
parent, and it leads its own group), so it can never kill a group it does not own. A worker forked by the
cluster has no thread of it (fork copies none), and a worker spawned afresh has another parent.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time

SERVE_PID_ENV = "AGENTSITE_SERVE_PID"
POLL_S = 0.5

_started = False


def guard_if_child_of_serve() -> bool:
    """Start the guard when this process is a child serve started; whether it runs."""
    global _started
    serve_pid = os.environ.get(SERVE_PID_ENV, "")
    if _started or not serve_pid.isdigit() or int(serve_pid) != os.getppid() or os.getpgrp() != os.getpid():
        return _started
    from django.conf import settings

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
