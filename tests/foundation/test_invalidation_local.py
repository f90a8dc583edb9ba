"""agentsite.core.invalidation without Redis on SQLite: the host's channel. Real processes of one data directory
(as serve's workers, its task cluster and a manage.py command are): an announcement in one drops the cache
in another at once; a registration whose process died is removed by the next announcement; a forked child
is not connected until it listens itself; PostgreSQL without Redis has no channel."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from agentsite.core import invalidation
from tests.server import ROOT

LISTENER = """
import sys, time
import django
django.setup()
from agentsite.core import invalidation
invalidation.subscribe(sys.argv[1], lambda key: print(f"drop {key}", flush=True))
invalidation.listen()
print("connected" if invalidation.connected() else "not connected", flush=True)
sys.stdin.read()
"""

ANNOUNCER = """
import sys
import django
django.setup()
from agentsite.core import invalidation
invalidation.announce(sys.argv[1], sys.argv[2])
"""


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "AGENTSITE_DATA_DIR": str(data_dir), "DJANGO_SETTINGS_MODULE": "agentsite.settings",
           "PYTHONPATH": str(ROOT), "REDIS_URL": ""}
    env.pop("DATABASE_URL", None)  # SQLite in data_dir (one host's database) unless told otherwise
    return {**env, **extra}


class Listener:
    def __init__(self, data_dir: Path, topic: str, **env: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", LISTENER, topic], cwd=ROOT, env=_env(data_dir, **env),
                                        text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(line.strip()) for line in self.process.stdout],
                         daemon=True).start()

    def next_line(self, timeout: float = 20.0) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the listener printed nothing in {timeout} s") from None

    def stop(self) -> None:
        self.process.stdin.close()  # it exits on its own, leaving the channel
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def announce_from_another_process(data_dir: Path, topic: str, key: str, **env: str) -> None:
    subprocess.run([sys.executable, "-c", ANNOUNCER, topic, key], cwd=ROOT, env=_env(data_dir, **env), check=True,
                   timeout=60)


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex}"


@pytest.mark.e2e
def test_an_announcement_in_one_process_drops_the_cache_of_another_at_once(tmp_path, topic):
    listener = Listener(tmp_path, topic)
    directory = tmp_path / "run" / "invalidate"
    try:
        assert listener.next_line() == "connected"
        assert len(list(directory.iterdir())) == 1
        started = time.monotonic()
        announce_from_another_process(tmp_path, topic, "42")
        assert listener.next_line(timeout=5) == "drop 42"
        # The announcer's own start-up (django.setup) is most of this; what matters is no time to live (2 s).
        assert time.monotonic() - started < 30
    finally:
        listener.stop()
    assert list(directory.iterdir()) == [], "a process that exited left its registration"


SLOW_LISTENER = """
import pathlib, sys, time
import django
django.setup()
from agentsite.core import invalidation
def drop(key):
    time.sleep(0.3)  # a listener thread that runs late (the process is busy): the drop lands 0.3 s after
    pathlib.Path(sys.argv[2]).write_text(str(key))
invalidation.subscribe(sys.argv[1], drop)
invalidation.listen()
print("connected" if invalidation.connected() else "not connected", flush=True)
sys.stdin.read()
"""

CHECKING_ANNOUNCER = """
import pathlib, sys
import django
django.setup()
from agentsite.core import invalidation
invalidation.announce(sys.argv[1], "7")
marker = pathlib.Path(sys.argv[2])
print(marker.read_text() if marker.exists() else "not yet", flush=True)
"""


@pytest.mark.e2e
def test_an_announcement_returns_once_every_other_process_has_applied_it(tmp_path, topic):
    """The change a request made is dropped everywhere before that request answers: the client's next request,
    in whichever process, never meets the old cache (the announcer waits for each listener's confirmation)."""
    marker = tmp_path / "dropped"
    data_dir = tmp_path / "data"
    listener = subprocess.Popen([sys.executable, "-c", SLOW_LISTENER, topic, str(marker)], cwd=ROOT,
                                env=_env(data_dir), text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert listener.stdout.readline().strip() == "connected"
        announced = subprocess.run([sys.executable, "-c", CHECKING_ANNOUNCER, topic, str(marker)], cwd=ROOT,
                                   env=_env(data_dir), text=True, capture_output=True, check=True, timeout=60)
        assert announced.stdout.strip() == "7", announced.stdout + announced.stderr
    finally:
        listener.stdin.close()
        listener.wait(20)


@pytest.mark.e2e
def test_a_registration_whose_process_died_is_removed_by_the_next_announcement(tmp_path, topic):
    listener = Listener(tmp_path, topic)
    assert listener.next_line() == "connected"
    listener.process.kill()  # killed: no chance to remove its own registration
    listener.process.wait(10)
    directory = tmp_path / "run" / "invalidate"
    assert len(list(directory.iterdir())) == 1
    announce_from_another_process(tmp_path, topic, "nobody")
    assert list(directory.iterdir()) == []


@pytest.mark.e2e
def test_postgresql_without_redis_has_no_host_channel(tmp_path, topic):
    # Its processes may be on several hosts: a file in one host's data directory would reach only some.
    listener = Listener(tmp_path, topic, DATABASE_URL="postgres://postgres@127.0.0.1:5432/unused")
    try:
        assert listener.next_line() == "not connected"
        assert not (tmp_path / "run" / "invalidate").exists()
    finally:
        listener.stop()


@pytest.mark.e2e
def test_a_forked_child_is_not_connected_until_it_listens(tmp_path, topic):
    script = LISTENER.replace('print("connected" if', 'import os\n'
                              'pid = os.fork()\n'
                              'if pid == 0:\n'
                              '    print("child " + str(invalidation.connected()), flush=True)\n'
                              '    invalidation.listen()\n'
                              '    print("child listening " + str(invalidation.connected()), flush=True)\n'
                              '    os._exit(0)\n'
                              'os.waitpid(pid, 0)\n'
                              'print("connected" if')
    process = subprocess.run([sys.executable, "-c", script, topic], cwd=ROOT, env=_env(tmp_path), text=True,
                             input="", capture_output=True, timeout=60)
    assert process.stdout.splitlines() == ["child False", "child listening True", "connected"], process.stderr
    assert len(list((tmp_path / "run" / "invalidate").iterdir())) == 1  # the child's; the parent's left on exit


def test_a_connected_cache_lives_longer_only_when_connected(monkeypatch):
    monkeypatch.setattr(invalidation, "_local", None)
    monkeypatch.setattr(invalidation, "_listener", None)
    assert invalidation.ttl(2.0) == 2.0
    monkeypatch.setattr(invalidation, "_local", (os.getpid(), None, None))
    assert invalidation.ttl(2.0) == invalidation.CONNECTED_TTL_S
    assert invalidation.ttl(600.0) == 600.0
    monkeypatch.setattr(invalidation, "_local", (os.getpid() + 1, None, None))  # a parent's: not this process's
    assert invalidation.ttl(2.0) == 2.0
