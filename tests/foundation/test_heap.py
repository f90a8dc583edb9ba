"""A daphne process freezes the heap it starts with and collects young objects in larger batches; a process
that only imports the ASGI module (a test, a management command) keeps the collector as it was
(agentsite/server/heap.py)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time

import pytest

from agentsite.server import heap
from tests.server import ROOT

# Imported by daphne as its application: reports the collector's state once the ASGI module is loaded.
APP = """
import gc, json, sys
from agentsite.asgi import application
print("HEAP " + json.dumps({"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()}), file=sys.stderr,
      flush=True)
"""

IMPORT_ONLY = """
import gc, json
import agentsite.asgi
print(json.dumps({"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()}))
"""


def _env(tmp_path) -> dict[str, str]:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "agentsite.settings", "AGENTSITE_DATA_DIR": str(tmp_path),
            "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}


@pytest.mark.e2e
@pytest.mark.parametrize("entry", ["agentsite.server.daphne_worker", "daphne"])  # serve's workers; daphne run by hand
def test_a_daphne_process_freezes_its_startup_heap_and_raises_the_young_threshold(tmp_path, entry):
    (tmp_path / "heap_probe_app.py").write_text(APP)
    server = subprocess.Popen([sys.executable, "-m", entry, "-b", "127.0.0.1", "-p", "0",
                               "heap_probe_app:application"], cwd=tmp_path, env=_env(tmp_path),
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        report = None
        while report is None and time.monotonic() < deadline:
            line = server.stderr.readline()
            if not line:
                break
            if line.startswith("HEAP "):
                report = json.loads(line[5:])
        assert report is not None, "daphne never loaded the application"
    finally:
        server.terminate()
        server.wait(timeout=20)
    assert report["frozen"] > 50_000  # Django and the apps: ~150,000 objects
    assert report["threshold"][0] == heap.YOUNG_THRESHOLD


@pytest.mark.e2e
def test_importing_the_asgi_module_outside_daphne_leaves_the_collector_alone(tmp_path):
    out = subprocess.run([sys.executable, "-c", IMPORT_ONLY], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"frozen": 0, "threshold": [700, 10, 10]}  # CPython's defaults


def test_settle_runs_once_and_is_undone_by_unfreeze(monkeypatch):
    before = gc.get_threshold()
    monkeypatch.setattr(heap, "_settled", False)
    try:
        assert heap.settle() is True
        assert gc.get_freeze_count() > 0 and gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
        frozen = gc.get_freeze_count()
        made_since = [[] for _ in range(10_000)]  # tracked objects a second freeze would take
        assert heap.settle() is False  # once per process
        # Frozen objects freed by other threads leave the count, so it is not exact; a second freeze would
        # have added the 10,000 lists.
        assert gc.get_freeze_count() < frozen + len(made_since)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_worker_serve_forked_counts_as_a_server_process(monkeypatch):
    """serve's workers are forks whose `__main__` is serve's: the worker's entry point declares the process."""
    monkeypatch.setattr(heap, "_declared", False)
    assert heap.is_server_process() is False  # pytest's process
    heap.declare_server_process()
    assert heap.is_server_process() is True
