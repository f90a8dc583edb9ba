"""manage.py serve as a person runs it: first start, restart, Ctrl-C."""

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.server import ROOT, LiveServer, free_port


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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_serve_stops_daphne_and_the_cluster_and_leaves_no_process(tmp_path, signum):
    server = LiveServer(data_dir=str(tmp_path))
    port = free_port()
    env = {**server.env()}
    proc = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        server.port, server.base_url, server.proc = port, f"http://127.0.0.1:{port}", proc
        server.wait_healthy(60)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(_descendants(proc.pid)) < 2:
            time.sleep(0.1)
        family = _descendants(proc.pid)
        assert len(family) >= 2, "serve should run daphne and the q2 cluster as children"
        proc.send_signal(signum)
        output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, output
        assert not _wait_gone(family), f"processes left behind: {_wait_gone(family, 0)}"
        assert "password: " in output and "stopped." in output
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{server.base_url}/api/health", timeout=2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.stop()


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
    port = free_port()
    env = {**LiveServer(data_dir=str(tmp_path), database_url="").env(),
           "DATABASE_URL": f"postgres://postgres@127.0.0.1:{free_port()}/nothing"}
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                             "agentsite.asgi:application"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        response = None
        while time.monotonic() < deadline:
            try:
                response = requests.get(f"http://127.0.0.1:{port}/api/health", timeout=10)
                break
            except requests.ConnectionError:
                time.sleep(0.1)
        assert response is not None, "daphne did not start"
        assert response.status_code == 503
        assert response.json()["status"] == "degraded"
        assert response.json()["database"] == "error"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


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


def test_serve_restarts_a_child_that_dies_and_keeps_serving(tmp_path):
    server = LiveServer(data_dir=str(tmp_path))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)], cwd=ROOT, env=server.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        server.port, server.base_url, server.proc = port, f"http://127.0.0.1:{port}", proc
        server.wait_healthy(60)
        daphne = _children_running(proc.pid, "daphne")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _children_running(proc.pid, "qcluster"):
            time.sleep(0.1)
        cluster = _children_running(proc.pid, "qcluster")
        assert len(daphne) == 1 and cluster
        for pid in daphne | cluster:
            os.kill(pid, signal.SIGKILL)
        server.wait_healthy(30)  # a new daphne answers
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (_children_running(proc.pid, "qcluster") - cluster):
            time.sleep(0.1)
        assert _children_running(proc.pid, "daphne") - daphne, "daphne was not started again"
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
