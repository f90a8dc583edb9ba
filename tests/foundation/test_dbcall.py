"""agentsite.core.dbcall: async views' database work on threads that keep their connections."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from agentsite.core import dbcall

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pool(settings, monkeypatch):
    settings.AGENTSITE_DB_THREADS = 1  # one thread: every call meets the same connection
    monkeypatch.setattr(dbcall, "_pool", None)
    yield
    if dbcall._pool is not None:
        dbcall._pool.submit(lambda: connection.close()).result()
        dbcall._pool.shutdown()


def connection_identity() -> tuple[int, int]:
    get_user_model().objects.exists()
    return threading.get_ident(), id(connection.connection)


def test_a_pool_thread_keeps_its_connection_from_call_to_call(pool):
    async def twice():
        return await dbcall.db(connection_identity), await dbcall.db(connection_identity)

    first, second = asyncio.run(twice())
    assert first == second and first[0] != threading.get_ident()


def test_results_and_exceptions_come_back_to_the_caller(pool):
    get_user_model().objects.create_user(username="ann", password="pw-ann-123456")

    async def calls():
        found = await dbcall.db(get_user_model().objects.filter(username="ann").count)
        with pytest.raises(get_user_model().DoesNotExist):
            await dbcall.db(get_user_model().objects.get, username="nobody")
        return found

    assert asyncio.run(calls()) == 1


def test_a_connection_that_broke_is_replaced_on_the_next_call(pool):
    if connection.vendor != "postgresql":
        pytest.skip("a server connection that goes away: PostgreSQL (SQLite reports every connection usable)")

    def break_it():
        connection.ensure_connection()
        connection.connection.close()  # the server went away under Django's feet
        with pytest.raises(Exception):  # noqa: B017 - the backend's own error type
            get_user_model().objects.exists()
        return id(connection.connection) if connection.connection is not None else None

    async def calls():
        await dbcall.db(break_it)
        return await dbcall.db(get_user_model().objects.exists)

    assert asyncio.run(calls()) is False  # answered on a fresh connection


def test_a_cancelled_caller_is_cancelled_while_the_call_still_runs_and_the_call_still_finishes(pool):
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow_write():
        entered.set()
        release.wait(10)  # held until the caller's cancellation is over
        get_user_model().objects.create_user(username="late", password="pw-late-123456")
        finished.set()

    async def cancel_it() -> bool:
        task = asyncio.ensure_future(dbcall.db(slow_write))
        assert await asyncio.to_thread(entered.wait, 5), "the call never started on its thread"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(5):  # a caller that waited for the call would wait for ever
                await task
        return finished.is_set()

    assert asyncio.run(cancel_it()) is False, "the caller was cancelled only after the call had finished"
    release.set()
    assert finished.wait(5) and get_user_model().objects.filter(username="late").exists()
