"""agentsite.server.requestthreads: a request's sync work on a reused thread that keeps its connection."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db import connection

from agentsite.server.requestthreads import ReusedRequestThreads

pytestmark = pytest.mark.django_db(transaction=True)


def where() -> tuple[int, int]:
    get_user_model().objects.exists()
    return threading.get_ident(), id(connection.connection)


class App:
    """An ASGI app whose requests record where their sync work ran; `hold` keeps a request open."""

    def __init__(self):
        self.seen: list[tuple[int, int]] = []
        self.hold: asyncio.Event | None = None
        self.leftover: asyncio.Task | None = None

    async def __call__(self, scope, receive, send):
        self.seen.append(await sync_to_async(where)())
        if scope.get("path") == "/hold":
            await self.hold.wait()
        if scope.get("path") == "/outlive":  # a task started here that calls sync code after the request
            self.leftover = asyncio.ensure_future(self._later())

    async def _later(self):
        await asyncio.sleep(0.05)
        return await sync_to_async(threading.get_ident)()


async def request(app, path="/"):
    await app({"type": "http", "path": path}, None, None)


def close_all(wrapper: ReusedRequestThreads) -> None:
    for executor in wrapper.idle:
        executor.submit(lambda: connection.close()).result()
        executor.shutdown()


def test_one_request_after_another_reuses_the_thread_and_its_connection():
    app = App()
    wrapper = ReusedRequestThreads(app)

    async def three():
        for _ in range(3):
            await request(wrapper)

    asyncio.run(three())
    close_all(wrapper)
    assert len(set(app.seen)) == 1 and wrapper.made == 1
    assert app.seen[0][0] != threading.get_ident()


def test_requests_in_flight_together_never_share_a_thread():
    app = App()
    wrapper = ReusedRequestThreads(app)

    async def together():
        app.hold = asyncio.Event()
        held = [asyncio.ensure_future(request(wrapper, "/hold")) for _ in range(3)]
        while len(app.seen) < 3:
            await asyncio.sleep(0.01)
        app.hold.set()
        await asyncio.gather(*held)
        await request(wrapper)  # then one more: a thread that is idle again

    asyncio.run(together())
    close_all(wrapper)
    assert len({thread for thread, _ in app.seen[:3]}) == 3 and wrapper.made == 3
    assert app.seen[3] in app.seen[:3]


def test_a_task_that_outlives_its_request_still_runs_sync_code_but_on_a_thread_of_its_own():
    app = App()
    wrapper = ReusedRequestThreads(app)

    async def outlive():
        await request(wrapper, "/outlive")
        leftover_thread = await app.leftover
        await request(wrapper)
        return leftover_thread

    leftover_thread = asyncio.run(outlive())
    close_all(wrapper)
    assert leftover_thread not in {thread for thread, _ in app.seen}


def test_idle_threads_beyond_the_limit_close_their_connections_and_stop():
    app = App()
    wrapper = ReusedRequestThreads(app, keep=1)

    async def two_at_once():
        app.hold = asyncio.Event()
        held = [asyncio.ensure_future(request(wrapper, "/hold")) for _ in range(2)]
        while len(app.seen) < 2:
            await asyncio.sleep(0.01)
        app.hold.set()
        await asyncio.gather(*held)

    asyncio.run(two_at_once())
    assert len(wrapper.idle) == 1 and wrapper.made == 2
    close_all(wrapper)
    stopped = [thread for thread in threading.enumerate()
               if thread.name.startswith("agentsite-request") and thread.ident in {t for t, _ in app.seen}]
    for thread in stopped:
        thread.join(5)
    assert not any(thread.is_alive() for thread in stopped)


def test_other_scopes_pass_through():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])

    asyncio.run(ReusedRequestThreads(app)({"type": "lifespan"}, None, None))
    assert seen == ["lifespan"]


@pytest.mark.e2e
def test_the_request_start_signal_has_no_sync_receiver_and_connections_are_still_checked_at_the_end(tmp_path):
    """agentsite.apps: a sync receiver on request_started costs every ASGI request a thread crossing. Checked in a
    fresh server-like process: Django's test client reconnects close_old_connections in this one."""
    import json
    import os
    import subprocess
    import sys

    from tests.server import ROOT

    probe = ("import json, django; django.setup(); from django.core import signals; "
             "from django.core.handlers.asgi import ASGIHandler; "
             "names = lambda receivers: sorted(f.__name__ for f in receivers); "
             "print(json.dumps([names(signals.request_started._live_receivers(ASGIHandler)[0]), "
             "names(signals.request_finished._live_receivers(ASGIHandler)[0])]))")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentsite.settings", "AGENTSITE_DATA_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    started, finished = json.loads(out.stdout.strip().splitlines()[-1])
    assert started == []
    assert {"close_old_connections", "reset_queries"} <= set(finished)
