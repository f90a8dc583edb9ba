"""One sandbox worker process seen from its parent: start it bare, send a request, read the answer by a deadline."""

# The worker is `python -I worker.py` (isolated mode: no PYTHON* variables, no user site, no cwd on sys.path) with
# an environment of PATH and LANG only, cwd `/`, no inherited descriptors but its pipes, and its own session (a ^C
# to the server's terminal is the server's to handle). It exits at EOF on stdin, so a parent that dies, however
# it dies, does not leave workers behind.
#
# A request is blocking I/O with a deadline; callers run it in a thread when they are async. Failure to answer in
# time, EOF or a malformed line raise WorkerLost, after which the worker must be killed, never reused.

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WORKER_SCRIPT = str(Path(__file__).resolve().with_name("worker.py"))
WORKER_ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
READ_CHUNK = 1 << 16


class WorkerLost(Exception):
    """The worker did not answer: `timed_out` when the deadline passed, else it died or spoke garbage."""

    def __init__(self, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timed_out = timed_out


class SandboxWorker:
    """A started worker; not thread-safe (the pool hands it to one caller at a time)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.pid = popen.pid
        self._buffer = b""
        self._next_id = 0

    @classmethod
    def start(cls, config: dict[str, Any], *, timeout_s: float) -> SandboxWorker:
        """Spawn a worker and wait for its ready line; raises WorkerLost if it does not come up."""
        try:
            popen = subprocess.Popen(
                [sys.executable, "-I", WORKER_SCRIPT, json.dumps(config)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=WORKER_ENVIRONMENT, cwd="/", close_fds=True, start_new_session=True,
            )
        except OSError as exc:  # out of processes or descriptors: the caller's evaluation fails, not the caller
            raise WorkerLost(f"the worker could not be spawned: {exc}") from None
        worker = cls(popen)
        try:
            ready = worker._read_answer(time.monotonic() + timeout_s)
        except WorkerLost:
            worker.kill()
            raise
        if not ready.get("ready"):
            worker.kill()
            raise WorkerLost(f"the worker could not start: {ready.get('error', 'no reason given')}")
        return worker

    def request(self, message: dict[str, Any], *, deadline: float) -> dict[str, Any]:
        """Send one request and return its answer; raises WorkerLost."""
        self._next_id += 1
        line = json.dumps({**message, "id": self._next_id}).encode() + b"\n"
        try:
            self.popen.stdin.write(line)  # type: ignore[union-attr]
            self.popen.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, ValueError, OSError) as exc:
            raise WorkerLost(f"the worker was gone ({type(exc).__name__})") from None
        answer = self._read_answer(deadline)
        if answer.get("id") != self._next_id:
            raise WorkerLost("the worker answered another request")
        return answer

    def _read_answer(self, deadline: float) -> dict[str, Any]:
        line = self._read_line(deadline)
        try:
            answer = json.loads(line)
        except ValueError:
            raise WorkerLost("the worker sent a malformed answer") from None
        if not isinstance(answer, dict):
            raise WorkerLost("the worker sent a malformed answer")
        return answer

    def _read_line(self, deadline: float) -> bytes:
        try:
            fd = self.popen.stdout.fileno()  # type: ignore[union-attr]
        except ValueError:
            raise WorkerLost("the worker was closed") from None
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerLost("the worker did not answer in time", timed_out=True)
            try:
                readable, _, _ = select.select([fd], [], [], remaining)
                chunk = os.read(fd, READ_CHUNK) if readable else None
            except (OSError, ValueError):  # the pool closed its end meanwhile (pool.close() from another thread)
                raise WorkerLost("the worker was closed") from None
            if chunk is not None:
                if not chunk:
                    raise WorkerLost(self._exit_description())
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _exit_description(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=1)
        code = self.popen.returncode
        if code is not None and code < 0:
            return f"the worker was killed by signal {-code}"
        return f"the worker exited with status {code}"

    def kill(self) -> None:
        """SIGKILL and reap: a worker is never asked nicely, V8's own teardown can hang."""
        with contextlib.suppress(OSError):
            self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
        self.forget()

    def forget(self) -> None:
        """Close our ends of the pipes without signalling (the state a forked child must drop)."""
        for stream in (self.popen.stdin, self.popen.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
