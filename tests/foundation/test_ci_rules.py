"""The suite's own rules for CI (CI=true, as .ci/run sets it): a test that misses a program or package fails
there instead of skipping, so a run cannot pass by leaving out what it was meant to test."""

from __future__ import annotations

import re

import pytest

from tests.needs import program
from tests.server import ROOT

# Skips that depend on the run's configuration, never on a missing program or package: each runs in one
# of CI's two passes (SQLite, PostgreSQL + Redis). tests/needs.py is where missing requirements are handled.
CONFIGURATION_SKIPS = {
    "tests/foundation/test_dbcall.py": "PostgreSQL only",
    "tests/foundation/test_settings.py": "SQLite only",
    "tests/foundation/test_multiprocess.py": "PostgreSQL + Redis only",
    "tests/sso/test_hosts_e2e.py": "PostgreSQL + Redis only (two hosts share only those)",
    "tests/foundation/test_invalidation.py": "no Redis outside CI (fails under CI=true)",
    "tests/accounts/test_stream_revocation.py": "PostgreSQL + Redis only (two processes share revocations)",
    "tests/knowledge/test_quota.py": "PostgreSQL only (on SQLite adds never overlap)",
    "tests/knowledge/test_lexical_stats.py": "PostgreSQL only (SQLite's FTS5 keeps its own statistics)",
    "tests/voice/conftest.py": "no espeak-ng outside CI (runs, and fails, under CI=true)",
    "tests/usage/test_two_processes.py": "PostgreSQL + Redis only (two processes share budgets through Redis)",
    "tests/foundation/test_qbroker.py": "SQLite without Redis only (the SQLite broker's pusher)",
    "tests/foundation/test_qbroker_redis.py": "Redis only (the Redis broker's pusher)",
    "tests/mcpbridge/test_workers.py": "PostgreSQL + Redis only (two hosts share only those)",
    "tests/usage/test_reservations.py": "the Redis store on the PostgreSQL + Redis pass only",
    "tests/organisation/test_policy_cost.py": "SQLite only (the query plan is read in SQLite's wording)",
    "tests/sessions_app/test_search.py": "one test each for SQLite and PostgreSQL (each database has its own index)",
    "tests/sessions_app/test_stop_without_channel.py": "PostgreSQL without Redis between two hosts only",
    "tests/needs.py": "the one place that decides",
    "tests/foundation/test_ci_rules.py": "this file",
}
SKIP = re.compile(r"pytest\.skip\(|importorskip\(|mark\.skip(if)?\b")


def test_under_ci_a_missing_program_fails_the_test_instead_of_skipping(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # empty: no Xvfb
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="Xvfb is not installed.*CI=true"):
        program("Xvfb", "apt-get install xvfb")


def test_outside_ci_a_missing_program_skips_the_test_saying_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install xvfb"):
        program("Xvfb", "apt-get install xvfb")


def test_every_skip_in_the_suite_is_about_configuration_or_goes_through_tests_needs():
    found = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        hits = [number for number, line in enumerate(path.read_text().splitlines(), 1) if SKIP.search(line)]
        if hits and name not in CONFIGURATION_SKIPS:
            found[name] = hits
    assert not found, f"skips outside tests/needs.py (use tests.needs.unavailable or program): {found}"


def test_every_app_package_goes_into_the_wheel():
    """Each top-level Python package of the project (an app) is in pyproject.toml's package list: the usage app
    was left out, and only the wheel check (.ci/package_check) found it, after the whole suite had passed."""
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as file:
        include = tomllib.load(file)["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")} - {"tests", "bench", "examples"}
    assert packages, "no package found at the top level"
    assert sorted(name for name in packages if f"{name}*" not in include) == []


# CI's second pass (AGENTSITE_TESTS_BACKEND_ONLY, tests/conftest.py) keeps a test when it can answer differently on
# that backend: it uses the database (the mark, or a fixture whose closure opens it) or starts a process (e2e).
def test_a_test_that_uses_no_database_is_left_to_the_first_pass(request):
    from tests.conftest import needs_the_backend

    assert needs_the_backend(request.node) is False


@pytest.mark.django_db
def test_a_test_marked_for_the_database_runs_in_both_passes(request):
    from tests.conftest import needs_the_backend

    assert needs_the_backend(request.node) is True


def test_a_test_whose_fixture_opens_the_database_runs_in_both_passes(request, owner):
    from tests.conftest import needs_the_backend

    assert needs_the_backend(request.node) is True


@pytest.mark.e2e
def test_a_test_that_starts_a_process_runs_in_both_passes(request):
    from tests.conftest import needs_the_backend

    assert needs_the_backend(request.node) is True


@pytest.mark.django_db(transaction=True)
def test_a_task_run_inline_leaves_the_test_process_its_title():
    """The tests run queued tasks inline; django-q2 would retitle the process it runs them in `qcluster ...`
    (tests/conftest.py turns that off in the test process), and a test looking for a cluster by its command line
    would find pytest."""
    from django_q.tasks import async_task

    async_task("math.floor", 2.5, sync=True)
    with open("/proc/self/cmdline", "rb") as cmdline:
        assert b"qcluster" not in cmdline.read()
