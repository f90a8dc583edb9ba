"""manage.py serve as a person runs it: first start, restart, Ctrl-C."""

import os
import queue
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest
import requests

from tests.e2e import UPSTREAM_KEY, poll
from tests.fakes.llm import Text
from tests.server import ROOT, LiveServer, listeners_on, listening_socket, refusing_port

pytestmark = pytest.mark.e2e  # every test here starts a process


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, stack = set(), [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pids: set[int], timeout: float = 25.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = {pid for pid in pids if _alive(pid)}
        if not alive:
            return set()
        time.sleep(0.1)
    return {pid for pid in pids if _alive(pid)}


def test_a_token_issued_before_a_restart_still_works_after_it():
    first = LiveServer().start()
    try:
        password = first.admin_password
        tokens = first.login()
        admin_file = (first.data_dir / "initial_admin.txt").read_text()
    finally:
        first.stop(drop_database=False)
    second = LiveServer(data_dir=str(first.data_dir), database_url=first.database_url)
    second._own_database, second._admin_url = first._own_database, getattr(first, "_admin_url", None)
    second.start()
    try:
        me = requests.get(f"{second.base_url}/api/auth/me", headers={"Authorization": f"Bearer {tokens['token']}"},
                          timeout=5)
        assert me.status_code == 200
        assert me.json()["username"] == "admin"
        refreshed = requests.post(f"{second.base_url}/api/auth/refresh", json={"refresh": tokens["refresh"]}, timeout=5)
        assert refreshed.status_code == 200
        assert (second.data_dir / "initial_admin.txt").read_text() == admin_file
        assert second.login(password=password)["user"]["is_admin"] is True
    finally:
        second.stop()


def _socket_inodes_of(pid: int) -> set[int]:
    inodes = set()
    for link in (Path("/proc") / str(pid) / "fd").iterdir():
        try:
            target = os.readlink(link)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _lines_of(proc: subprocess.Popen) -> queue.Queue:
    """serve's output lines as they come; `lines.reader` ends when serve closes its output."""
    lines: queue.Queue = queue.Queue()
    lines.reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    lines.reader.start()
    return lines


def _read_until(lines: queue.Queue, pattern: str, timeout: float = 60.0) -> tuple[re.Match, str]:
    seen, deadline = [], time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        seen.append(line)
        if match := re.search(pattern, line):
            return match, "".join(seen)
    raise AssertionError(f"serve did not print {pattern!r} within {timeout} s; it printed:\n{''.join(seen)}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_serve_stops_daphne_and_the_cluster_and_leaves_no_process(tmp_path, signum):
    """As a person runs it (--port; 0 here, so that serve picks a free port and says which)."""
    env = LiveServer(data_dir=str(tmp_path)).env()
    proc = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", "0"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = _lines_of(proc)
        match, output = _read_until(lines, r"serving on http://127\.0\.0\.1:(\d+)/")
        port = int(match[1])
        # serve holds the port itself (daphne adopts its socket): the one listener there is serve's.
        assert listeners_on(port) and listeners_on(port) <= _socket_inodes_of(proc.pid)
        base_url = f"http://127.0.0.1:{port}"
        # The port is listening from the start: the request waits in its backlog until daphne takes it.
        assert requests.get(f"{base_url}/api/health", timeout=60).status_code == 200
        family = poll(lambda: found if len(found := _descendants(proc.pid)) >= 2 else None,
                      "serve running daphne and the q2 cluster as children", timeout=20, every=0.1)
        proc.send_signal(signum)
        proc.wait(timeout=30)
        lines.reader.join(timeout=30)
        output += "".join(lines.get() for _ in range(lines.qsize()))
        assert proc.returncode == 0, output
        assert not _wait_gone(family), f"processes left behind: {_wait_gone(family, 0)}"
        assert "password: " in output and "stopped." in output
        assert not listeners_on(port)
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{base_url}/api/health", timeout=2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_serve_refuses_a_port_that_is_taken_naming_it(tmp_path):
    taken = listening_socket()
    try:
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "manage.py", "serve", "--port", str(port)], cwd=ROOT, timeout=60,
                              env=LiveServer(data_dir=str(tmp_path)).env(), capture_output=True, text=True)
    finally:
        taken.close()
    assert done.returncode != 0
    assert f"Cannot listen on 127.0.0.1:{port}" in done.stderr, done.stderr


def test_serve_ignores_x_forwarded_for_and_keeps_the_data_dir_private():
    server = LiveServer().start()
    try:
        url = f"{server.base_url}/api/auth/login"
        statuses = [requests.post(url, json={"username": "admin", "password": "wrong"}, timeout=5,
                                  headers={"X-Forwarded-For": f"10.0.{i}.1"}).status_code for i in range(11)]
        assert statuses == [401] * 10 + [429]
        assert stat.S_IMODE(server.data_dir.stat().st_mode) == 0o700
        for name in ("db.sqlite3", "config.json", "initial_admin.txt"):
            path = server.data_dir / name
            if path.exists():
                assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, f"{name} is readable by others"
    finally:
        server.stop()


def test_health_is_503_degraded_when_the_database_does_not_answer(tmp_path):
    listener = listening_socket()
    env = {**LiveServer(data_dir=str(tmp_path), database_url="").env(),
           "DATABASE_URL": f"postgres://postgres@127.0.0.1:{refusing_port()}/nothing"}
    proc = subprocess.Popen([sys.executable, "-m", "agentsite.server.daphne_worker", "--fd", str(listener.fileno()),
                             "agentsite.asgi:application"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, pass_fds=(listener.fileno(),))
    try:
        # The socket is held from the start: the request waits in its backlog until daphne answers.
        response = requests.get(f"http://127.0.0.1:{listener.getsockname()[1]}/api/health", timeout=60)
        assert proc.poll() is None
        assert response.status_code == 503
        assert response.json()["status"] == "degraded"
        assert response.json()["database"] == "error"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        listener.close()


def _children_running(pid: int, marker: str) -> set[int]:
    found = set()
    for child in _descendants(pid):
        try:
            if marker in (Path("/proc") / str(child) / "cmdline").read_bytes().decode(errors="replace") \
                    and _alive(child):
                found.add(child)
        except OSError:
            continue
    return found


def _cmdline(pid: int) -> str:
    return (Path("/proc") / str(pid) / "cmdline").read_bytes().rstrip(b"\0").replace(b"\0", b" ").decode()


def test_serve_restarts_a_child_that_dies_and_keeps_serving(tmp_path):
    # One worker: the point is the restart of serve's one daphne child and its message; workers restarted one
    # by one while the others serve are tests/foundation/test_workers.py's.
    server = LiveServer(data_dir=str(tmp_path), workers=1)
    proc = server.launch(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        server.wait_healthy(60)
        daphne = _children_running(proc.pid, "daphne")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _children_running(proc.pid, "qcluster"):
            time.sleep(0.1)
        cluster = _children_running(proc.pid, "qcluster")
        assert len(daphne) == 1 and cluster
        # The first daphne is a fork of serve (its title says which child it is); a restart is a fresh
        # interpreter, since serve runs threads by then (agentsite/server/serve.py, _fork).
        assert [_cmdline(pid).startswith("agentsite daphne: -m agentsite.server.daphne_worker --fd ")
                for pid in daphne] == [True], [_cmdline(pid) for pid in daphne]
        for pid in daphne | cluster:
            os.kill(pid, signal.SIGKILL)
        server.wait_healthy(30)  # a new daphne answers
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (_children_running(proc.pid, "qcluster") - cluster):
            time.sleep(0.1)
        restarted = _children_running(proc.pid, "daphne") - daphne
        assert restarted, "daphne was not started again"
        assert [_cmdline(pid).split(" ", 1)[0] for pid in restarted] == [sys.executable]
        assert _children_running(proc.pid, "qcluster") - cluster, "the cluster was not started again"
        assert proc.poll() is None, "serve stopped"
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, output
        assert "daphne exited unexpectedly (status -9); starting it again in 1 s." in output
        assert "qcluster exited unexpectedly" in output
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.stop()


def test_a_forked_worker_writes_its_buffered_usage_when_serve_stops(fake_openai_server, fake_openai):
    """serve's workers are forks that end through the interpreter's exit functions: the usage a worker holds in
    its buffer (here: never flushed on its own, AGENTSITE_USAGE_FLUSH_S=3600) is written when serve stops."""
    server = LiveServer(env={"AGENTSITE_USAGE_FLUSH_S": "3600"}).start()
    try:
        admin = {"Authorization": f"Bearer {server.login()['token']}"}
        requests.patch(f"{server.base_url}/api/config", headers=admin, timeout=10, json={
            "provider": "openai", "base_url": fake_openai_server.base_url, "api_key": UPSTREAM_KEY,
            "model": "fake-model", "kb_enabled": False}).raise_for_status()
        fake_openai.script(Text("one", usage=(7, 3)), Text("two", usage=(5, 2)))
        for question in ("q1", "q2"):
            answer = requests.post(f"{server.base_url}/v1/chat/completions", headers=admin, timeout=30, json={
                "model": "fake-model", "messages": [{"role": "user", "content": question}]})
            assert answer.status_code == 200, answer.text
        assert _usage_rows(server) == []  # still in the workers' buffers
        assert server.stop(drop_database=False) == 0
        assert _usage_rows(server) == [(2, 12, 5)]
    finally:
        server.stop()


def _usage_rows(server: LiveServer) -> list[tuple]:
    query = "SELECT SUM(requests), SUM(prompt_tokens), SUM(completion_tokens) FROM usage_usagedaily HAVING COUNT(*) > 0"
    if server.database_url:
        import psycopg

        with psycopg.connect(server.database_url) as conn:
            return [tuple(int(value) for value in row) for row in conn.execute(query).fetchall()]
    with closing(sqlite3.connect(server.data_dir / "db.sqlite3")) as conn:
        return [tuple(int(value) for value in row) for row in conn.execute(query).fetchall()]
