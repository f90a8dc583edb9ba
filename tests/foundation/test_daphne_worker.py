"""The HTTP worker (agentsite/server/daphne_worker.py): daphne's command line on the event loop AGENTSITE_EVENT_LOOP
names, chosen before daphne makes its loop. Every other live-server test runs on the default (uvloop)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest
import requests
from django.core.exceptions import ImproperlyConfigured

from agentsite.server import daphne_worker as worker
from tests.e2e import sse_events
from tests.server import ROOT, LiveServer

# Imported by the worker as its application: names the class of the loop Twisted's reactor runs on.
PROBE = """
import sys
from twisted.internet import reactor
from autobahn.websocket import USES_NVX
loop = reactor._asyncioEventloop
print(f"WEBSOCKET accelerator {USES_NVX}, pycparser loaded {'pycparser' in sys.modules}", file=sys.stderr, flush=True)
print(f"LOOP {type(loop).__module__}.{type(loop).__name__}", file=sys.stderr, flush=True)

async def application(scope, receive, send):
    pass
"""


def _reactor_loop(tmp_path, event_loop: str | None) -> tuple[str, str]:
    (tmp_path / "loop_probe_app.py").write_text(PROBE)
    env = {key: value for key, value in os.environ.items() if key != "AGENTSITE_EVENT_LOOP"}
    env.update({"DJANGO_SETTINGS_MODULE": "agentsite.settings", "AGENTSITE_DATA_DIR": str(tmp_path),
                "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])})
    if event_loop is not None:
        env["AGENTSITE_EVENT_LOOP"] = event_loop
    proc = subprocess.Popen([sys.executable, "-m", "agentsite.server.daphne_worker", "-b", "127.0.0.1", "-p", "0",
                             "loop_probe_app:application"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("LOOP "):
                return line[5:].strip(), "".join(lines)
        raise AssertionError(f"the worker never loaded the application:\n{''.join(lines)}")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.e2e
@pytest.mark.parametrize(("event_loop", "expected"), [(None, "uvloop.Loop"), ("asyncio", "asyncio.unix_events.")])
def test_daphnes_reactor_runs_on_the_loop_the_variable_names(tmp_path, event_loop, expected):
    found, output = _reactor_loop(tmp_path, event_loop)
    assert found.startswith(expected), output
    assert f"on the {'uvloop' if event_loop is None else event_loop} event loop" in output  # said at start
    # No WebSocket is served: autobahn's native accelerator is not loaded, nor the C parser that loads it.
    assert "WEBSOCKET accelerator False, pycparser loaded False" in output


@pytest.mark.e2e
def test_a_worker_on_asyncios_loop_streams_a_reply():
    server = LiveServer(command="daphne", env={"AGENTSITE_EVENT_LOOP": "asyncio"}).start()
    try:
        assert "on the asyncio event loop" in server.log()
        model = requests.get(f"{server.base_url}/v1/models", timeout=10).json()["data"][0]["id"]
        with requests.post(f"{server.base_url}/v1/chat/completions", stream=True, timeout=30, json={
                "model": model, "stream": True, "messages": [{"role": "user", "content": "Say hello."}]}) as response:
            assert response.status_code == 200
            events = [data for _, data in sse_events(response)]
        assert events[-1] == "[DONE]"
        assert "".join((event["choices"][0]["delta"].get("content") or "") for event in events[:-1]
                       if isinstance(event, dict) and event.get("choices"))
    finally:
        server.stop()


def test_a_bad_choice_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("AGENTSITE_EVENT_LOOP", "trio")
    with pytest.raises(ImproperlyConfigured, match="AGENTSITE_EVENT_LOOP must be uvloop or asyncio"):
        worker.event_loop_choice()
    monkeypatch.setenv("AGENTSITE_EVENT_LOOP", " UVLoop ")
    assert worker.event_loop_choice() == "uvloop"


def test_without_uvloop_the_worker_falls_back_to_asyncio_and_says_so(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    policy = asyncio.get_event_loop_policy()
    assert worker.install_event_loop("uvloop") == "asyncio"
    assert asyncio.get_event_loop_policy() is policy
    assert "uvloop is not installed" in capsys.readouterr().err
