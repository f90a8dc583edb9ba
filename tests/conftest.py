"""Shared fixtures: three users (owner, other_user, admin), API clients with their tokens, a live server."""

from __future__ import annotations

import os
import subprocess
import time
from urllib.parse import urlparse

import pytest
from rest_framework.test import APIClient

from tests.server import LiveServer, remove_made_data_dirs, templates

pytest_plugins = ["tests.fakes.fixtures", "tests.dbthreads", "tests.cputime"]

PASSWORD = "correct-horse-battery-9"


def pytest_configure(config):
    from django.conf import settings

    if "postgresql" in settings.DATABASES["default"]["ENGINE"]:
        _flush_postgres_by_delete()
    _tasks_run_inline_keep_the_process_title()


def _tasks_run_inline_keep_the_process_title() -> None:
    """django-q2 titles the processes it runs tasks in (`qcluster ... processing ...`, setproctitle, which serve
    installs); the tests run tasks inline (AGENTSITE_Q_SYNC), and pytest kept that title: a test that looks for a
    cluster's processes by their command line would have found pytest itself."""
    import importlib

    for name in ("django_q.conf", "django_q.cluster", "django_q.monitor", "django_q.worker", "django_q.pusher"):
        module = importlib.import_module(name)
        if hasattr(module, "setproctitle"):
            module.setproctitle = None


# --- the fast tier: `pytest -m "not e2e"` ----------------------------------------------------------------
# A test is e2e when it starts a server, a browser or any other subprocess, itself or through a fixture. It says
# so: `@pytest.mark.e2e` on the test, or `pytestmark = pytest.mark.e2e` in a module where every test starts one.
# Nothing is inferred. The guard below fails a test left unmarked that starts a process anyway, in its body or
# in the setup of a fixture of any scope (a fixture seen starting one fails every unmarked test that uses it), so
# a missing mark cannot silently slow the fast tier or hide in it. The sandbox's V8 workers are the exception:
# the pool starts them once per process and reuses them, like a thread pool's threads.
SANDBOX_WORKER = os.path.join("workflows", "sandbox", "worker.py")
# Programs libraries run to describe the platform (the openai SDK's headers call platform.processor()).
PLATFORM_PROBES = ("uname",)


class _ProcessGuard:
    """Who is starting processes: the test being set up or run, and the fixtures being set up for it."""

    def __init__(self) -> None:
        self.item: pytest.Item | None = None
        self.fixtures: list[str] = []
        self.starting: dict[str, str] = {}  # fixture name -> the first command it was seen to start
        self.refused: list[str] = []

    def started(self, command: str) -> None:
        for name in self.fixtures:
            self.starting.setdefault(name, command)
        item = self.item
        if item is not None and "e2e" not in item.keywords:
            self.refused.append(command)
            pytest.fail(_unmarked(item, command), pytrace=False)


_guard = _ProcessGuard()
_popen_init = subprocess.Popen.__init__


def _guarded_popen_init(self, args, *rest, **options):
    command = [str(part) for part in (args if isinstance(args, list | tuple) else [args])]
    if not any(part.endswith(SANDBOX_WORKER) for part in command) and command[0] not in PLATFORM_PROBES:
        _guard.started(" ".join(command)[:200])
    _popen_init(self, args, *rest, **options)


subprocess.Popen.__init__ = _guarded_popen_init  # asyncio's subprocesses and multiprocessing's spawn come here too


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    _guard.fixtures.append(fixturedef.argname)
    try:
        yield
    finally:
        _guard.fixtures.pop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _guard.item, _guard.refused = item, []
    if "e2e" in item.keywords:
        return
    for name in item.fixturenames:
        if name in _guard.starting:
            pytest.fail(_unmarked(item, f"{_guard.starting[name]}, through the fixture {name}"), pytrace=False)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    _guard.item = None


@pytest.fixture(autouse=True)
def _unmarked_tests_start_no_process(request):
    yield
    if _guard.refused and _guard.item is request.node:  # also when the code under test caught the failure
        pytest.fail(_unmarked(request.node, _guard.refused[0]), pytrace=False)


def _unmarked(item: pytest.Item, command: str) -> str:
    return (f"{item.nodeid} starts a process ({command}) but is not marked e2e: put @pytest.mark.e2e on the "
            "test (or pytestmark = pytest.mark.e2e in its module when every test there starts one) so the fast "
            "tier (-m 'not e2e') leaves it out")


# --- a second backend's pass: `AGENTSITE_TESTS_BACKEND_ONLY=1` ------------------------------------------------
# CI runs the suite on SQLite and again on PostgreSQL + Redis. A test that uses no database and starts no process
# (pure functions, parsers, the JavaScript sandbox, source scans) cannot answer differently on the second backend:
# with this variable set (CI's PostgreSQL pass, .ci/run) it is deselected, and the summary says how many were.
# What uses a database: the django_db mark or a fixture that opens it (its closure names one of DATABASE_FIXTURES);
# what starts a process is marked e2e (the guard above), and a live server's database is the run's backend.
BACKEND_ONLY = "AGENTSITE_TESTS_BACKEND_ONLY"
# (Not django_db_blocker: every test's closure has it, through the session fixture below that drops connections.)
DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback",
                     "live_server"}


def needs_the_backend(item: pytest.Item) -> bool:
    return ("e2e" in item.keywords or item.get_closest_marker("django_db") is not None
            or bool(DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))))


def pytest_collection_modifyitems(config, items):
    if os.environ.get(BACKEND_ONLY) != "1":
        return
    left = [item for item in items if not needs_the_backend(item)]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if needs_the_backend(item)]
        config._agentsite_backend_only = len(left)


def pytest_terminal_summary(terminalreporter, config):
    left = getattr(config, "_agentsite_backend_only", 0)
    if left:
        terminalreporter.write_line(f"{BACKEND_ONLY}=1: {left} tests that use no database and start no process were "
                                    "left to the other backend's pass")


def pytest_sessionfinish(session, exitstatus):
    templates.drop()  # the migrated databases live servers were copied from
    remove_made_data_dirs()  # the live servers' data directories


def _flush_postgres_by_delete() -> None:
    """Empty the tables after a transactional test with DELETE instead of Django's TRUNCATE.

    On PostgreSQL a TRUNCATE of the ~30 tables gives each of them new files, synced at commit; deleting the
    few rows a test leaves is cheaper: a transactional test's teardown went from ~0.42 s to ~0.25 s (63 of
    them, 27 s to 16 s), ~25 s a run. The end state is the same:
    empty tables, sequences as they were (Django's TRUNCATE does not restart them either). Django's foreign
    keys are DEFERRABLE INITIALLY DEFERRED on PostgreSQL and flush runs in one transaction, so the order of
    the DELETEs does not matter. Flushes that reset sequences or cascade keep Django's statements.
    """
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return [f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};" for table in tables]

    DatabaseOperations.sql_flush = sql_flush


def _configured_database_name() -> str:
    """The database DATABASE_URL names (the test database, when made, is another)."""
    return urlparse(os.environ.get("DATABASE_URL", "")).path.lstrip("/")


@pytest.fixture(scope="session", autouse=True)
def _test_database_dropped_at_the_end(django_db_setup, django_db_blocker):
    """On PostgreSQL, the connections other threads of this process still hold to the test database (request
    threads of in-process ASGI tests keep theirs, by design) are ended before pytest-django drops it: else
    the drop fails with "being accessed by other users" and the database is left behind."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql" or connection.settings_dict["NAME"] == _configured_database_name():
        return  # not PostgreSQL, or no test database: pytest-django makes one only when a collected test uses it
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")


@pytest.fixture(autouse=True)
def _fresh_caches():
    from django.core.cache import cache

    from accounts.authentication import keys, users
    from agents_app.selectors import directory
    from catalogue.selectors import config_cache_clear
    from usage.budgets import drop_user_budget

    def clear() -> None:
        config_cache_clear()
        directory.drop()  # the agents a rolled-back database no longer holds
        users.drop(None)
        keys.drop(None)
        drop_user_budget(None)  # a user id reused by the next test's rolled-back database must not keep a budget

    _clear_own_cache(cache)
    clear()
    yield
    clear()


def _clear_own_cache(cache) -> None:
    from django.conf import settings

    if not settings.REDIS_URL:
        cache.clear()
        return
    client = cache._cache.get_client(write=True)  # RedisCache.clear() would FLUSHDB: live servers share it
    for key in client.scan_iter(f"{os.environ['AGENTSITE_CACHE_PREFIX']}:*"):
        client.delete(key)


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user(username="owner", password=PASSWORD)


@pytest.fixture
def other_user(django_user_model):
    return django_user_model.objects.create_user(username="other", password=PASSWORD)


@pytest.fixture
def admin(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password=PASSWORD, email="")


def client_for(user=None) -> APIClient:
    from accounts.tokens import token_pair_for

    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_pair_for(user)['token']}")
    return client


@pytest.fixture
def anon_client() -> APIClient:
    return APIClient()


@pytest.fixture
def owner_client(owner) -> APIClient:
    return client_for(owner)


@pytest.fixture
def other_client(other_user) -> APIClient:
    return client_for(other_user)


@pytest.fixture
def admin_client(admin) -> APIClient:
    return client_for(admin)


@pytest.fixture
def one_minute(monkeypatch):
    """Every budget window this test's in-process calls count in is the one of the moment it began.

    Budgets count per-minute limits by the clock's minute (usage/budgets.py, Windows): a minute that turned
    between a test's calls (seconds apart on a loaded machine) would free the limit the test checks. Hold slots
    stand still too, so use it where a test's point is a limit, not time passing. A live server's clock cannot be
    held: tests/e2e.py's minute_with_room is its counterpart there."""
    # Django's app registry: the usage app's modules load once the test database is set up.
    from usage import budgets

    began, at = time.time(), budgets.Windows.at.__func__
    monkeypatch.setattr(budgets.Windows, "at",
                        classmethod(lambda cls, now=None: at(cls, began if now is None else now)))
    return began


@pytest.fixture(scope="session")
def live_server_proc():
    """One real daphne server process (own data dir and database) shared by the session's e2e tests."""
    server = LiveServer()
    server.start()
    yield server
    server.stop()
