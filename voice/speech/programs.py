"""Run a local speech program (espeak-ng, whisper.cpp) with a time limit, from a worker thread.

The program gets its own process group, which is killed whole when the time limit passes or the caller
gives up (`stop` set), so a stuck program or its children never outlive the request.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from agentsite.core.errors import AppError

_POLL_S = 0.1  # how often a waiting runner looks at `stop`
MAX_OUTPUT = 16 * 1024 * 1024
# The environment a program gets: what it needs to run. The server's own (API keys, the secret key) stays here.
_PASSED_ON = ("PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "ESPEAK_DATA_PATH")


@dataclass(frozen=True)
class ProgramResult:
    returncode: int
    stdout: bytes
    stderr: bytes

    def stderr_tail(self, limit: int = 300) -> str:
        return self.stderr.decode("utf-8", "replace").strip()[-limit:]


class ProgramStopped(Exception):
    """The caller gave up (its request was cancelled or timed out) and the program was killed."""


def program_path(program: str, *, what: str, setting: str) -> str:
    """The executable's path; raises AppError 503 `unavailable` naming the program and the setting."""
    path = shutil.which(program)
    if path is None:
        raise AppError("unavailable", f"{what} is not available here: the program {program!r} is not installed "
                       f"(install it, or point {setting} at it).", 503, {"missing": program})
    return path


def program_run(argv: list[str], *, stdin: bytes = b"", time_limit: float, stop: threading.Event,
                what: str) -> ProgramResult:
    """Run argv to its end; raises AppError 503 past time_limit, ProgramStopped when `stop` is set."""
    try:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True, env=_environment())
    except OSError as exc:  # removed or not executable since program_path() found it
        raise AppError("unavailable", f"{what} could not start {argv[0]!r}: {exc.strerror or exc}.", 503,
                       {"missing": argv[0]}) from None
    deadline = time.monotonic() + time_limit
    pending: bytes | None = stdin
    try:
        while True:
            try:
                stdout, stderr = process.communicate(pending, timeout=_POLL_S)
                return ProgramResult(process.returncode, stdout[:MAX_OUTPUT], stderr[-65536:])
            except subprocess.TimeoutExpired:
                pending = None  # communicate() sent the input already; a retry must not send it again
            if stop.is_set():
                raise ProgramStopped(what)
            if time.monotonic() > deadline:
                raise AppError("unavailable", f"{what} did not finish within {time_limit:g} s.", 503,
                               {"timeout_s": time_limit})
    finally:
        _kill_group(process)


def _kill_group(process: subprocess.Popen) -> None:
    if process.returncode is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def _environment() -> dict[str, str]:
    """What a program needs to run, and no more: the server's secrets (keys in the environment) stay with it."""
    return {key: value for key, value in os.environ.items() if key in _PASSED_ON}

