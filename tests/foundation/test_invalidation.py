"""agentsite.core.invalidation: announcements drop per-process caches here at once and, through a real Redis, in
another process; a listener that loses its connection drops everything."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
import uuid

import pytest
import redis

from agentsite.core import invalidation
from tests.server import ROOT

# The run's own Redis database when it has one (CI's PostgreSQL + Redis pass), else db 3: CI's two passes
# run side by side and must not share a database.
REDIS = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/3"


def _redis_up() -> bool:
    try:
        return bool(redis.Redis.from_url(REDIS, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


needs_redis = pytest.mark.skipif(not _redis_up() and os.environ.get("CI") != "true",
                                 reason="Redis is not running on 127.0.0.1:6379")


def test_an_announcement_drops_here_before_it_returns_and_a_failing_subscriber_stops_no_other(settings):
    settings.REDIS_URL = ""
    topic = f"t-{uuid.uuid4().hex}"
    dropped: list[str | None] = []

    def broken(key):
        raise RuntimeError("a cache's own bug")

    invalidation.subscribe(topic, broken)
    invalidation.subscribe(topic, dropped.append)
    invalidation.subscribe(topic, dropped.append)  # the same callback once only

    invalidation.announce(topic, 7)
    invalidation.drop_here(topic)

    assert dropped == ["7", None]


LISTENER = """
import os, sys, time
import django
django.setup()
from agentsite.core import invalidation
topic = sys.argv[1]
def drop(key):
    if key == "slow":
        time.sleep(0.3)  # a listener thread that runs late (its process is busy)
    print(f"drop {key}", flush=True)
invalidation.subscribe(topic, drop)
invalidation.listen()
deadline = time.monotonic() + 20
while not invalidation.connected() and time.monotonic() < deadline:
    time.sleep(0.01)
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def listener(settings):
    prefix = f"inv-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "REDIS_URL": REDIS, "AGENTSITE_CACHE_PREFIX": prefix,
           "DJANGO_SETTINGS_MODULE": "agentsite.settings", "PYTHONPATH": str(ROOT)}
    env.pop("DATABASE_URL", None)
    topic = f"t-{uuid.uuid4().hex}"
    process = subprocess.Popen([sys.executable, "-c", LISTENER, topic], cwd=ROOT, env=env, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    lines: list[str] = []
    output: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [output.put(line.strip()) for line in process.stdout], daemon=True).start()

    def read_until(expected: str, timeout: float = 15.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = output.get(timeout=left)
            except queue.Empty:
                break
            lines.append(line)
            if line == expected:
                return lines
        raise AssertionError(f"never read {expected!r} in {timeout} s; read {lines!r}")

    read_until("ready")
    assert lines == ["drop None", "ready"]  # subscribing starts from nothing
    lines.clear()
    os.environ["AGENTSITE_CACHE_PREFIX"], previous = prefix, os.environ.get("AGENTSITE_CACHE_PREFIX")
    settings.REDIS_URL = REDIS
    try:
        yield topic, read_until, prefix
    finally:
        os.environ["AGENTSITE_CACHE_PREFIX"] = previous or ""
        process.stdin.close()
        process.kill()
        process.wait(5)


@pytest.mark.e2e
@needs_redis
def test_another_process_drops_what_this_one_announces(listener):
    topic, read_until, _ = listener
    invalidation.announce(topic, 42)
    assert read_until("drop 42", timeout=5)[-1] == "drop 42"


@pytest.mark.e2e
@needs_redis
def test_an_announcement_returns_once_the_other_processes_applied_it(listener):
    """The request that made a change answers after every process dropped its old cache: the client's next
    request, to another host, never meets it (the announcer waits for each listener's confirmation)."""
    topic, read_until, _ = listener
    invalidation.announce(topic, "slow")
    assert read_until("drop slow", timeout=0.1)[-1] == "drop slow"


@pytest.mark.e2e
@needs_redis
def test_a_listener_that_loses_redis_drops_everything_and_hears_later_announcements(listener):
    topic, read_until, prefix = listener
    client = redis.Redis.from_url(REDIS)
    listeners = [entry for entry in client.client_list(_type="pubsub") if entry["name"] == f"{prefix}:invalidate"]
    assert len(listeners) == 1
    assert client.client_kill_filter(_id=listeners[0]["id"]) == 1
    read_until("drop None")  # whatever was announced while it was away is gone with everything else
    # Announcements made before it has subscribed again are lost (it drops everything once it has): announce
    # until one arrives.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        invalidation.announce(topic, "after")
        try:
            read_until("drop after", timeout=0.2)
            return
        except AssertionError:
            continue
    raise AssertionError("the listener never heard an announcement again")


FIRST_LISTEN = """
import django, sys
django.setup()
from agentsite.core import invalidation
invalidation.listen()
print("connected" if invalidation.connected() else "not yet", flush=True)
"""


@pytest.mark.e2e
@needs_redis
def test_a_process_first_listen_returns_once_it_hears_the_others():
    env = {**os.environ, "REDIS_URL": REDIS, "AGENTSITE_CACHE_PREFIX": f"inv-{uuid.uuid4().hex[:8]}",
           "DJANGO_SETTINGS_MODULE": "agentsite.settings", "PYTHONPATH": str(ROOT)}
    env.pop("DATABASE_URL", None)
    done = subprocess.run([sys.executable, "-c", FIRST_LISTEN], cwd=ROOT, env=env, text=True, capture_output=True,
                          timeout=60)
    # What is announced from the moment its first load returns reaches it (a worker's first request).
    assert done.stdout.strip() == "connected", done.stderr[-2000:]
