"""Doorbells: a process of this host wakes a loop of another that sleeps until told, instead of that loop
polling the database.

On SQLite every process that can change a table is on this host, so it can tell the sleeper directly:
`Doorbell(name)` is a Unix datagram socket in Linux's abstract namespace named after the database file and
`name`; the sleeper calls `listen()` once, then `wait(timeout)`; whoever committed a change calls `ring()` (or
`ring_on_commit()` inside a transaction). A ring is only a hint to look now: the table stays the truth, so a lost
ring costs at most the sleeper's timeout. `available()` is False where other hosts may share the database
(PostgreSQL): the loops there keep polling, or listen on Redis.
"""

from __future__ import annotations

import hashlib
import os
import select
import socket
import threading

from django.db import connections, transaction

PREFIX = b"\0agentsite-"


def available(using: str = "default") -> bool:
    """Whether every process that changes this database is on this host (SQLite), so a doorbell reaches them."""
    return connections[using].vendor == "sqlite"


class Doorbell:
    """The doorbell `name` of the database `using` (see the module docstring)."""

    def __init__(self, name: str, using: str = "default") -> None:
        self.name, self.using = name, using
        self._lock = threading.Lock()
        self._held: tuple[int, socket.socket] | None = None  # (pid, socket) of the process that bound it
        self._failed_pid: int | None = None

    def address(self) -> bytes:
        database = str(connections[self.using].settings_dict["NAME"])
        digest = hashlib.sha256(f"{database}\0{self.name}".encode()).hexdigest()[:24]
        return PREFIX + digest.encode()

    def ring(self) -> None:
        """Wake the sleeper now (no-op when nobody listens, or its buffer is full: it looks at its timeout)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.setblocking(False)
                sock.sendto(b"", self.address())
        except OSError:
            pass

    def ring_on_commit(self) -> None:
        """Ring once the current transaction commits (at once outside one): before, the sleeper would look
        and not see the change."""

        transaction.on_commit(self.ring, using=self.using)

    def listen(self) -> bool:
        """Bind the doorbell in this process (once); whether this process holds it."""
        return self._socket() is not None

    def wait(self, timeout: float) -> bool:
        """Until a ring or `timeout` seconds; whether it rang. Sleeps the timeout when this process does not
        hold the doorbell (listen() first)."""
        sock = self._socket()
        if sock is None:
            threading.Event().wait(max(0.0, timeout))
            return False
        readable, _, _ = select.select([sock], [], [], max(0.0, timeout))
        if not readable:
            return False
        try:
            while True:  # every ring sent so far: one look serves them all
                sock.recv(16)
        except (BlockingIOError, InterruptedError):
            pass
        return True

    def _socket(self) -> socket.socket | None:
        pid = os.getpid()
        with self._lock:
            if self._held is not None and self._held[0] == pid:
                return self._held[1]
            if self._failed_pid == pid:
                return None
            # Held by the process this one was forked from: that socket is the parent's, not ours.
            self._held = None
            sock = None
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sock.bind(self.address())
                sock.setblocking(False)
            except (OSError, AttributeError):  # held by another process, or no AF_UNIX / abstract names here
                if sock is not None:
                    sock.close()
                self._failed_pid = pid
                return None
            self._held = (pid, sock)
            return sock

    def close(self) -> None:
        """Give the doorbell up in this process (tests; a sleeper that stops for good)."""
        with self._lock:
            if self._held is not None and self._held[0] == os.getpid():
                self._held[1].close()
            self._held, self._failed_pid = None, None
