"""bench/faults.py in a tiny configuration, so that the load-with-faults benchmark never rots: a real server,
streaming chats and workflow runs with hang-ups, scheduled runs, and its own verdict."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.server import ROOT

pytestmark = pytest.mark.e2e  # every test here starts a process


def test_the_faults_benchmark_runs_and_finds_nothing_wrong_in_a_small_round():
    done = subprocess.run([sys.executable, "bench/faults.py", "--rounds", "1", "--chats", "4", "--workflows", "4",
                           "--scheduled", "1", "--tokens", "20"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verdict: OK" in done.stdout
    assert "5xx: 0, unsettled: 0" in done.stdout
