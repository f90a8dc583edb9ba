"""One start at a time: the migrations, the first administrator and the crash sweep that `serve` runs before it
listens are done by one process of the deployment while the others wait, so replicas started together (compose)
migrate once and make one administrator.

The lock is where every replica sees it: on PostgreSQL a session advisory lock on a connection of its own
(released when it closes, so a replica that dies holding it frees it); on SQLite (one host) an exclusive `flock`
on `<data dir>/run/start.lock`, which the kernel drops with the process. Before it, `serve` waits up to
DATABASE_WAIT_S for the database to accept a connection (containers may start before their database).
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import OperationalError, connections

# pg_advisory_lock's key: any constant that no other code of this database uses ("agentsite start").
ADVISORY_KEY = 0x6167_656E_7473_7401
# How often a waiting replica says it is still waiting.
WAITING_NOTE_S = 10.0
# How long serve waits for the database to accept a first connection before it gives up, saying why.
DATABASE_WAIT_S = 60.0


def database_wait(note: Callable[[str], None], timeout: float = DATABASE_WAIT_S, connection: Any = None) -> None:
    """Return once the database (default: the default one) accepts a connection; after `timeout`, raise its last
    error."""
    connection = connection if connection is not None else connections["default"]
    deadline = time.monotonic() + timeout
    next_note = time.monotonic() + WAITING_NOTE_S
    while True:
        try:
            connection.ensure_connection()
            return
        except OperationalError as error:
            connection.close()
            if time.monotonic() >= deadline:
                raise
            if time.monotonic() >= next_note:
                next_note = time.monotonic() + WAITING_NOTE_S
                note(f"agentsite: waiting for the database ({str(error).strip().splitlines()[0]}) ...")
            time.sleep(1.0)


@contextmanager
def start_lock(data_dir: Path, note: Callable[[str], None]) -> Iterator[None]:
    """Hold the deployment's start lock for the body; `note` is told when the wait is long."""
    if connections["default"].vendor == "postgresql":
        with _advisory_lock(note):
            yield
    else:
        with _file_lock(data_dir / "run" / "start.lock", note):
            yield


@contextmanager
def _advisory_lock(note: Callable[[str], None]) -> Iterator[None]:
    connection = connections.create_connection("default")  # its own session: migrate may close the default one
    try:
        with connection.cursor() as cursor:
            def take() -> bool:
                cursor.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_KEY])
                return bool(cursor.fetchone()[0])

            _acquire(take, note)
        yield
    finally:
        connection.close()  # ends the session, and with it the lock


@contextmanager
def _file_lock(path: Path, note: Callable[[str], None]) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        def take() -> bool:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        _acquire(take, note)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _acquire(take: Callable[[], bool], note: Callable[[str], None]) -> None:
    """Call `take` every half second until it holds the lock, saying so every WAITING_NOTE_S."""
    started = next_note = time.monotonic()
    while not take():
        now = time.monotonic()
        if now >= next_note + WAITING_NOTE_S:
            next_note = now
            note(f"agentsite: waiting {now - started:.0f} s for another process of this deployment to finish "
                 "starting (migrations, the first administrator) ...")
        time.sleep(0.5)
