"""manage.py serve: the one command that runs everything on the embedded default."""

from __future__ import annotations

import atexit
import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

import setproctitle
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from agentsite.core import metrics
from agentsite.core.datadir import data_dir_ensure, secrets_ensure
from agentsite.core.processes import sweep_dead
from agentsite.core.startup import service_loops_start
from agentsite.server import daphne_worker, heap
from agentsite.server.orphan import SERVE_PID_ENV, guard_if_child_of_serve
from agentsite.server.startlock import database_wait, start_lock

STOP_GRACE_S = 15
# A child that dies unexpectedly is started again after a wait that doubles from 1 s to 30 s while it keeps
# dying, and is back to 1 s once a run of it lasted a minute.
RESTART_FIRST_S = 1.0
RESTART_MAX_S = 30.0
RESTART_STABLE_S = 60.0
# The supervisor sleeps until a signal (a child exited: SIGCHLD; Ctrl-C, SIGTERM), a restart or a sweep is due;
# at most this long, should a SIGCHLD ever go missing.
SUPERVISE_MAX_SLEEP_S = 5.0
MAX_DEFAULT_WORKERS = 8


def default_workers() -> int:
    """The number of daphne processes `serve` runs when not told: one a CPU, at most MAX_DEFAULT_WORKERS."""
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_WORKERS))


def _workers(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise CommandError(f"--workers must be a whole number of at least 1, not {value!r}.")
    return count


class Command(BaseCommand):
    help = "Migrate, create the initial admin, start the task cluster and serve ASGI with daphne."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000, help="0: a free port, shown in the start message.")
        parser.add_argument("--fd", type=int, default=None, help=(
            "Serve on this inherited listening TCP socket (its file descriptor) instead of binding --host and "
            "--port (socket activation; tests that hold their server's port)."))
        parser.add_argument("--no-cluster", action="store_true", help="Do not start the django-q2 cluster.")
        parser.add_argument("--workers", type=_workers, default=None, help=(
            f"daphne processes serving the one listening socket (default: one a CPU, at most "
            f"{MAX_DEFAULT_WORKERS}; 1: a single process). The task cluster stays one per host."))

    def handle(self, *args, host: str, port: int, fd: int | None, no_cluster: bool, workers: int | None = None,
               **options) -> None:
        # serve holds the listening socket and daphne adopts it: a port that is taken stops serve here, and no
        # other process can take the port while daphne restarts. daphne adopts IPv4 sockets only (its fd
        # endpoint takes no address family): on an IPv6 host daphne binds the port itself, as it always did.
        listener = _listen(host, port) if fd is None and ":" not in host else None
        self.fd = listener.fileno() if listener is not None else fd
        if self.fd is not None:
            host, port = _listening_address(self.fd)
        elif port == 0:
            raise CommandError("--port 0 (a free port) needs an IPv4 --host.")
        self.workers = default_workers() if workers is None else workers
        if self.fd is None and self.workers > 1:
            # Workers share one listening socket that serve holds; on IPv6 daphne binds the port itself.
            self.stderr.write("agentsite: several workers need an IPv4 --host; serving with one.")
            self.workers = 1
        # The first start creates the data directory and its secrets here, before the children start: the
        # settings import wrote nothing, and a problem with either stops serve instead of a first request.
        secrets_ensure(data_dir_ensure(settings.DATA_DIR))
        self.stdout.write(f"agentsite: data directory {settings.DATA_DIR}")
        # One replica at a time (agentsite/server/startlock.py): replicas started together migrate once.
        database_wait(self.stdout.write)
        with start_lock(settings.DATA_DIR, self.stdout.write):
            self.stdout.write("agentsite: applying database migrations ...")
            call_command("migrate", interactive=False, verbosity=0)
            call_command("initadmin")
            call_command("recover")  # before the children start: nothing of theirs can be running yet
        commands = self._commands(host, port, no_cluster)
        # The metrics files of a previous run's processes would be summed into this run's (agentsite/core/metrics.py).
        metrics.clean_multiproc_dir()
        # Each child's guard: gone soon after serve (orphan.py). In serve's own environment too, which a forked
        # child keeps; serve itself is nobody's child of that pid.
        os.environ[SERVE_PID_ENV] = str(os.getpid())
        self.env = {**os.environ, "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE",
                                                                           "agentsite.settings")}
        children = {name: self._fork(name, command) for name, command in commands.items()}
        workers = f" with {self.workers} workers" if self.workers > 1 else ""
        self.stdout.write(self.style.SUCCESS(f"agentsite: serving on http://{host}:{port}/{workers} (Ctrl-C stops)"))

        loops = service_loops_start() if not no_cluster else None  # the scheduler's timer (one per host)
        try:
            self._supervise(commands, children)
        finally:
            if loops is not None:
                loops.stop()

    def _commands(self, host: str, port: int, no_cluster: bool) -> dict[str, list[str]]:
        manage = [sys.executable, os.path.abspath(sys.argv[0])] if sys.argv[0].endswith("manage.py") else \
            [sys.executable, "-m", "django"]
        commands = {} if no_cluster else {"qcluster": [*manage, "qcluster"]}
        # No --proxy-headers: daphne would take REMOTE_ADDR from the client's own X-Forwarded-For.
        # accounts.ratelimit.client_ip reads that header, and only behind AGENTSITE_TRUSTED_PROXIES.
        # daphne adopts serve's socket (its --fd); each restart of it gets the same one. With several workers,
        # each daphne accepts on that one socket: whichever is free takes the next connection, and
        # connections wait in the socket's backlog while a worker restarts.
        bind = ["-b", host, "-p", str(port)] if self.fd is None else ["--fd", str(self.fd)]
        daphne = [sys.executable, "-m", "agentsite.server.daphne_worker", *bind, "agentsite.asgi:application"]
        if self.workers == 1:
            commands["daphne"] = daphne
        else:
            commands.update({f"daphne-{index}": daphne for index in range(1, self.workers + 1)})
        return commands

    def _fork(self, name: str, command: list[str]) -> Child:
        """Start a child as a fork of serve, which has Django, the apps and their modules loaded already.

        A fresh interpreter would import and set up all of them again: ~2.5 s of CPU for each child on these
        machines, and ~100 MiB of its own. A fork shares serve's pages until it writes to them (the heap serve
        leaves is frozen first, so the collector does not write to every object). The children's first start
        only: a restart starts a fresh interpreter (_spawn), since by then serve runs its service loops'
        threads, and a fork copies only the thread that forks (a lock another thread held stays held). Where
        serve has a thread of its own here already, it starts fresh interpreters too.
        """
        if threading.active_count() > 1:
            running = ", ".join(thread.name for thread in threading.enumerate())
            self.stderr.write(f"agentsite: threads running in serve ({running}); starting {name} as a new process "
                              "instead of a fork.")
            return self._spawn(name, command)
        self.stdout.write(f"agentsite: starting {name} ...")
        connections.close_all()  # a child opens its own; a socket two processes talk on is garbled
        heap.settle_before_fork()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return ForkedChild(pid)
        _forked_child_main(name, command, self.fd)  # never returns
        raise AssertionError("unreachable")

    def _spawn(self, name: str, command: list[str]) -> Child:
        self.stdout.write(f"agentsite: starting {name} ...")
        # The listening socket goes to daphne only; every other descriptor of serve is closed in the child.
        passed = (self.fd,) if name.startswith("daphne") and self.fd is not None else ()
        return subprocess.Popen(command, env=self.env, start_new_session=True, preexec_fn=_stop_with_parent,
                                pass_fds=passed)

    def _supervise(self, commands: dict[str, list[str]], children: dict[str, Child]) -> None:
        """Until SIGINT/SIGTERM: restart a child that exits, after a back-off (RESTART_*), and keep serving."""
        stopping = {"signal": None}

        def on_signal(signum, _frame):
            stopping["signal"] = signum

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        signals = _SignalWakeup()
        started = {name: time.monotonic() for name in children}
        backoff = {name: RESTART_FIRST_S for name in children}
        restart_at: dict[str, float] = {}
        next_sweep = time.monotonic() + settings.AGENTSITE_PROCESS_SWEEP_S
        while stopping["signal"] is None:
            now = time.monotonic()
            if now >= next_sweep:  # work of processes that died (a q2 worker killed alone, another host)
                next_sweep = now + settings.AGENTSITE_PROCESS_SWEEP_S
                self._sweep()
            for name, proc in children.items():
                if name in restart_at or proc.poll() is None:
                    continue
                if now - started[name] >= RESTART_STABLE_S:
                    backoff[name] = RESTART_FIRST_S
                self.stderr.write(f"agentsite: {name} exited unexpectedly (status {proc.returncode}); starting it "
                                  f"again in {backoff[name]:g} s.")
                _signal_group(proc, signal.SIGKILL)  # what is left of its group (q2 workers) goes with it
                metrics.process_exited(proc.pid)  # its open streams and sandbox workers stop counting
                self._sweep()  # its runs and streaming replies are marked now, not at the next start
                restart_at[name] = now + backoff[name]
                backoff[name] = min(RESTART_MAX_S, backoff[name] * 2)
            for name, at in list(restart_at.items()):
                if now >= at:
                    del restart_at[name]
                    children[name], started[name] = self._spawn(name, commands[name]), now
            due = min([next_sweep, *restart_at.values()]) - time.monotonic()
            signals.wait(min(max(0.0, due), SUPERVISE_MAX_SLEEP_S))
        signals.close()
        self.stdout.write("agentsite: stopping ...")
        _stop_all(children)
        self.stdout.write("agentsite: stopped.")


    def _sweep(self) -> None:
        try:
            sweep_dead()
        except Exception as exc:  # a boundary: the database may be what failed; the next sweep catches up
            self.stderr.write(f"agentsite: could not mark the stopped process's work yet ({exc}).")


class _SignalWakeup:
    """A sleep that every signal ends at once: a child that exits (SIGCHLD), Ctrl-C, SIGTERM. Python runs its
    signal handlers between bytecodes of the main thread; the wakeup fd makes the signal also end the select
    the main thread sleeps in, instead of that sleep going on to its end (an idle serve then wakes only when
    something is due, not five times a second)."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        # A Python handler, so that the C-level one writes to the wakeup fd; the supervisor polls its children.
        self._previous_chld = signal.signal(signal.SIGCHLD, lambda *_: None)

    def wait(self, seconds: float) -> None:
        try:
            select.select([self._read], [], [], seconds)
        except InterruptedError:
            return
        try:
            while os.read(self._read, 512):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        signal.signal(signal.SIGCHLD, self._previous_chld)
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read)
        os.close(self._write)


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (0: a free port); CommandError naming them when it cannot be had."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, family=socket.AF_INET,
                                                             type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as daphne's own bind (Twisted) does
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        raise CommandError(f"Cannot listen on {host}:{port} ({exc}): is another server using that port? "
                           "Choose another with --port.") from exc
    return sock


def _listening_address(fd: int) -> tuple[str, int]:
    """The (host, port) that the inherited socket fd listens on; CommandError when it is not a listening
    TCP socket."""
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            family, kind, address = sock.family, sock.type, sock.getsockname()
    except OSError as exc:
        raise CommandError(f"--fd {fd} is not an open socket ({exc}).") from exc
    if family != socket.AF_INET or kind != socket.SOCK_STREAM or not listening:
        raise CommandError(f"--fd {fd} must be a listening IPv4 TCP socket (bound, listen() called).")
    return address[0], address[1]


class ForkedChild:
    """A child serve forked, as far as the supervisor uses a subprocess.Popen: pid, returncode, poll, wait and
    send_signal (the return code as Popen gives it: the exit status, or minus the signal that ended it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                waited, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone, its status unknown
                self.returncode = 255
                return self.returncode
            if waited:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"process {self.pid}", timeout or 0.0)
            time.sleep(0.05)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass


Child = subprocess.Popen | ForkedChild


def _forked_child_main(name: str, command: list[str], fd: int | None) -> None:
    """The body of a forked child: what `command` would run, in this process, which then ends (never returns
    into serve's code). As _spawn's children: a process group of its own, SIGTERM when serve dies, the
    listening socket for daphne only. It ends as an interpreter does, by the exit functions (atexit): a
    worker's buffered usage is written, and the task cluster waits for its own processes there."""
    code = 1
    try:
        # What `ps` and the tests tell the children by: the command a fresh interpreter would have shown.
        setproctitle.setproctitle(f"agentsite {name}: {' '.join(command[1:])}")
        os.setsid()
        _stop_with_parent()
        guard_if_child_of_serve()  # serve's apps were ready before this process was its child
        if name.startswith("daphne"):
            # The command's daphne options: after `-m agentsite.server.daphne_worker`.
            daphne_worker.main(command[command.index("agentsite.server.daphne_worker") + 1:])
        else:
            if fd is not None:
                os.close(fd)
            call_command(command[-1])  # qcluster
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a boundary: the child ends here whatever happened, and says why
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # what the interpreter runs before it exits; each failure is printed
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _stop_with_parent() -> None:
    """In a child, before it runs: SIGTERM it when serve dies, even by SIGKILL (Linux), so no child outlives
    serve. Each child leads its own process group, so a Ctrl-C reaches serve alone, which stops them in order."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: a hard kill of serve may leave children behind


def _stop_all(children: dict[str, Child]) -> None:
    # SIGTERM to each main process only: the q2 cluster stops its own workers in about a second, while a
    # signal to its whole group makes its sentinel wait on workers that are already gone. Each child leads
    # its own process group (start_new_session), so whatever is left of it is killed afterwards.
    for proc in children.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in children.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        _signal_group(proc, signal.SIGKILL)  # stragglers in the group (q2 workers) never outlive serve


def _signal_group(proc: Child, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
