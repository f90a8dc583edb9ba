"""The database pool of agentsite.core.dbcall in in-process tests: the production path, with one seam.

Async views hand their database work to dbcall's pool of threads (AGENTSITE_DB_THREADS, as in production). A test
that is not transactional (pytest-django's `db`) keeps its data in a transaction open on the test's own
connection, which a pool thread's connection cannot see; while that transaction is open, a pool thread's call
runs on the test's connection (shared for the call, as Django's LiveServerThread shares an in-memory SQLite
connection), and on its own connection otherwise (transactional tests: exactly production).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from django.db import connections

from agentsite.core import dbcall

T = TypeVar("T")


@pytest.fixture(autouse=True)
def _pool_calls_see_the_tests_transaction(monkeypatch):
    test_connection = connections["default"]
    call = dbcall._call

    def call_on_the_tests_connection(fn, args, kwargs):
        if not test_connection.in_atomic_block:
            return call(fn, args, kwargs)
        own = getattr(connections._connections, "default", None)  # this thread's own, kept for its next call
        test_connection.inc_thread_sharing()
        connections["default"] = test_connection
        try:
            return fn(*args, **kwargs)  # no _tidy(): the connection is the test's, not the thread's to close
        finally:
            if own is not None:
                connections["default"] = own
            else:
                del connections["default"]
            test_connection.dec_thread_sharing()

    monkeypatch.setattr(dbcall, "_call", call_on_the_tests_connection)
    yield


def on_threads(work: Callable[[int], T], count: int, *, timeout: float = 30.0) -> list[T]:
    """work(0), ..., work(count - 1) at once, each on a thread of its own with its own database connection (closed
    when it ends), for tests of concurrent writers; their results in order. A failure in any is raised here."""
    results: list[Any] = [None] * count
    failures: list[BaseException] = []

    def run(index: int) -> None:
        try:
            results[index] = work(index)
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread below
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    if failures:
        raise failures[0]
    assert not any(thread.is_alive() for thread in threads), f"a thread still runs after {timeout} s"
    return results
