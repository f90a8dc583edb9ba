"""Replicas started together migrate once (agentsite/server/startlock.py): serve's start lock and its wait for the
database."""

from __future__ import annotations

import re
import threading
import time

import pytest
import requests
from django.db import OperationalError, connection

from agentsite.server import startlock
from tests.e2e import poll
from tests.server import LiveServer


def _holders(take_lock) -> tuple[list[str], list[str]]:
    """Two threads take the lock; the first holds it until the second has waited a while. (events, notes)."""
    events: list[str] = []
    notes: list[str] = []
    first_in, release = threading.Event(), threading.Event()

    def first() -> None:
        with take_lock(notes.append):
            events.append("first in")
            first_in.set()
            release.wait(10)
            events.append("first out")

    def second() -> None:
        first_in.wait(10)
        with take_lock(notes.append):
            events.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    first_in.wait(10)
    time.sleep(1.5)  # the second is waiting meanwhile: three of its half-second tries
    events.append("released")
    release.set()
    for thread in threads:
        thread.join(15)
    return events, notes


def test_the_file_lock_lets_one_holder_in_at_a_time_and_the_waiter_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(startlock, "WAITING_NOTE_S", 0.4)
    events, notes = _holders(lambda note: startlock._file_lock(tmp_path / "run" / "start.lock", note))

    assert events == ["first in", "released", "first out", "second in"]
    assert notes and all("waiting" in note and "another process of this deployment" in note for note in notes)


@pytest.mark.django_db(transaction=True)
def test_the_start_lock_on_this_database_lets_one_holder_in_at_a_time(tmp_path, monkeypatch):
    # PostgreSQL's advisory lock in the PostgreSQL pass, the data directory's file lock on SQLite.
    monkeypatch.setattr(startlock, "WAITING_NOTE_S", 0.4)
    events, notes = _holders(lambda note: startlock.start_lock(tmp_path, note))

    assert events == ["first in", "released", "first out", "second in"]
    assert notes
    if connection.vendor == "postgresql":  # released with its connection: nobody holds it now
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s",
                           [startlock.ADVISORY_KEY & 0xFFFFFFFF])
            assert cursor.fetchone()[0] == 0


class _Database:
    """A connection that refuses `failures` times, then connects."""

    def __init__(self, failures: int):
        self.failures = failures
        self.closed = 0

    def ensure_connection(self) -> None:
        if self.failures:
            self.failures -= 1
            raise OperationalError('connection to server at "db", port 5432 failed: Connection refused\nIs it up?')

    def close(self) -> None:
        self.closed += 1


def test_serve_waits_for_a_database_that_is_starting_and_says_what_it_waits_for(monkeypatch):
    monkeypatch.setattr(startlock, "WAITING_NOTE_S", 0.0)
    monkeypatch.setattr(startlock.time, "sleep", lambda _seconds: None)
    notes: list[str] = []
    database = _Database(failures=3)

    startlock.database_wait(notes.append, timeout=60, connection=database)

    assert database.failures == 0 and database.closed == 3
    assert notes and notes[0] == ('agentsite: waiting for the database (connection to server at "db", port 5432 '
                                  'failed: Connection refused) ...')


def test_a_database_that_never_answers_stops_serve_with_its_error():
    database = _Database(failures=10**6)
    started = time.monotonic()
    with pytest.raises(OperationalError, match="Connection refused"):
        startlock.database_wait(lambda _note: None, timeout=1.2, connection=database)
    assert 1.2 <= time.monotonic() - started < 5


@pytest.mark.e2e
def test_two_serves_started_together_on_an_empty_database_migrate_once_and_make_one_admin():
    # Two replicas of one deployment, as compose starts them: one database (SQLite in the shared data directory,
    # or one PostgreSQL database) and one data directory, both started at the same moment on a database no
    # migration has touched.
    first = LiveServer(migrated=False)
    second = LiveServer(data_dir=str(first.data_dir), database_url=first.database_url, migrated=False)
    try:
        first.launch()
        second.launch()
        first.wait_healthy(120)
        second.wait_healthy(120)
        log = poll(lambda: first.log_path.read_text() if first.log_path.read_text().count("serving on") == 2
                   else None, "both servers' start messages", timeout=30)
        assert log.count("created the initial administrator") == 1, log
        assert "Traceback" not in log, log
        password = re.search(r"^password: (\S+)$", (first.data_dir / "initial_admin.txt").read_text(), re.M).group(1)
        for server in (first, second):
            answer = requests.post(f"{server.base_url}/api/auth/login",
                                   json={"username": "admin", "password": password}, timeout=30)
            assert answer.status_code == 200, answer.text
    finally:
        second.stop()
        first.stop()
