"""`manage.py clock` (a deployment that starts the pieces itself): runs the scheduler's timer until SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.e2e import poll
from tests.server import ROOT, LiveServer

pytestmark = pytest.mark.e2e


def test_clock_runs_the_timer_and_stops_on_sigterm():
    server = LiveServer()  # only its migrated data directory and environment: nothing is served
    log = server.data_dir / "clock.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "manage.py", "clock"], cwd=ROOT, env=server.env(), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        poll(lambda: "Scheduler timer started" in log.read_text(), "the timer started", timeout=60, every=0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, log.read_text()
        text = log.read_text()
        assert "Scheduler timer stopped" in text and "clock stopped." in text, text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.stop()
