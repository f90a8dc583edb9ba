"""A real agentsite server in a subprocess (manage.py serve: migrate, admin, q2 cluster, daphne)."""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import requests

ROOT = Path(__file__).resolve().parent.parent
# What `serve` does before it starts daphne (migrate, the initial admin, the start-up hooks), for a
# daphne-only server.
PREPARE = ("import django; django.setup(); from django.core.management import call_command; "
           "call_command('migrate', interactive=False, verbosity=0); call_command('initadmin'); "
           "call_command('recover')")
# What a template database gets (_MigratedTemplates): PREPARE without `recover`, whose schedules would be
# overdue by the time a copy starts (serve runs it on each start; a daphne-only server runs no task cluster).
TEMPLATE = ("import django; django.setup(); from django.core.management import call_command; "
            "call_command('migrate', interactive=False, verbosity=0); call_command('initadmin')")


def listening_socket(port: int = 0) -> socket.socket:
    """A TCP socket bound to 127.0.0.1:port (0: one the kernel picks) and listening, for a server to inherit.

    Whoever holds it holds the port: no other process can bind 127.0.0.1:port (nor the wildcard address)
    until it is closed, so a server started on it cannot lose its port to another test run in the seconds
    its start takes. Connections made before the server accepts wait in the backlog.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT only; never a listener's
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise RuntimeError(f"cannot listen on 127.0.0.1:{port}: another process holds it ({exc})") from exc
    sock.listen(128)
    return sock


_refusing: socket.socket | None = None


def refusing_port() -> int:
    """A loopback port where a connection is refused, for as long as this test process runs.

    It is bound and never listened on (Linux answers a connection to it with a reset): unlike a port that
    was free a moment ago, no other process can start listening there.
    """
    global _refusing
    if _refusing is None:
        _refusing = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _refusing.bind(("127.0.0.1", 0))
    return _refusing.getsockname()[1]


def free_port() -> int:
    """A port that was free when asked: racy (another process may take it before it is used).

    To start a server use LiveServer (it holds its port); for a port where connections are refused, use
    refusing_port(). Kept for callers outside tests/ that have not moved yet.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listeners_on(port: int) -> set[int]:
    """The socket inodes listening on a TCP port of this host (any address, IPv4 and IPv6), from the
    kernel's tables."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found.add(inode)
    return found


class _MigratedTemplates:
    """A database prepared once per test process, which each new server's database starts as a copy of.

    Prepared: migrated and with the initial admin made (TEMPLATE), its `initial_admin.txt` kept beside it
    and copied with it. Migrating an empty database costs a server ~2 s on SQLite and ~3 s on PostgreSQL;
    copying a prepared one, milliseconds. A `serve` server started on a copy still runs its whole start path
    (`migrate` finds nothing to do, the admin exists, the start-up hooks run). A daphne-only server's first
    start on a copy skips PREPARE, a Django start of ~2.5 s of CPU that would find nothing to do: the copy
    is migrated and has its admin, no process ever ran work on it for `recover` to mark, and the schedules
    `recover` ensures are read only by a task cluster, which a daphne-only server does not run. A restart
    runs PREPARE (recovery then has work to find). First starts on an empty database stay covered by the
    servers whose callers pass their own data_dir (test_serve.py).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sqlite: Path | None = None
        self._postgres: dict[str, tuple[str, Path]] = {}  # admin URL -> (template database, its data dir)

    def sqlite_copy_to(self, data_dir: Path) -> None:
        with self._lock:
            if self._sqlite is None:
                directory = Path(tempfile.mkdtemp(prefix="agentsite-e2e-template-"))
                _prepare(directory, database_url="")
                path = directory / "db.sqlite3"
                # WAL mode: what a connection left in db.sqlite3-wal goes into the file first, so that the
                # file alone is the whole database.
                with closing(sqlite3.connect(path)) as conn:
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._sqlite = path
        target = data_dir / "db.sqlite3"
        shutil.copyfile(self._sqlite, target)
        target.chmod(0o600)
        _copy_admin_file(self._sqlite.parent, data_dir)

    def postgres_template(self, admin_url: str, database_url_for: Callable[[str], str]) -> tuple[str, Path]:
        """The migrated template database on the server at admin_url (made on first use) and the data dir
        that holds its initial_admin.txt."""
        import psycopg

        with self._lock:
            if admin_url not in self._postgres:
                name = f"agentsite_e2e_template_{secrets.token_hex(4)}"
                directory = Path(tempfile.mkdtemp(prefix="agentsite-e2e-template-"))
                with psycopg.connect(admin_url, autocommit=True) as conn:
                    conn.execute(f'CREATE DATABASE "{name}"')
                try:
                    _prepare(directory, database_url=database_url_for(name))
                except BaseException:
                    _drop_database(admin_url, name)
                    shutil.rmtree(directory, ignore_errors=True)
                    raise
                self._postgres[admin_url] = (name, directory)
            return self._postgres[admin_url]

    def drop(self) -> None:
        """Remove the templates (at the end of the test session)."""
        with self._lock:
            if self._sqlite is not None:
                shutil.rmtree(self._sqlite.parent, ignore_errors=True)
                self._sqlite = None
            for admin_url, (name, directory) in self._postgres.items():
                _drop_database(admin_url, name)
                shutil.rmtree(directory, ignore_errors=True)
            self._postgres.clear()


def _prepare(data_dir: Path, *, database_url: str) -> None:
    env = LiveServer(data_dir=str(data_dir), database_url=database_url, migrated=False).env()
    done = subprocess.run([sys.executable, "-c", TEMPLATE], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"preparing the template database failed:\n{(done.stdout + done.stderr)[-5000:]}")


def _copy_admin_file(source: Path, data_dir: Path) -> None:
    target = data_dir / "initial_admin.txt"
    shutil.copyfile(source / "initial_admin.txt", target)
    target.chmod(0o600)


def _drop_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


templates = _MigratedTemplates()

# The data directories LiveServer made (not those a caller passed): removed when the test run or the
# benchmark ends (remove_made_data_dirs), not at stop(), since a test may start a stopped server again on
# its directory, start a second server on it, or read what the first one left there.
_made_data_dirs: list[Path] = []


def remove_made_data_dirs() -> None:
    """Remove every data directory LiveServer made in this process (at the end of the test session, and at
    exit for a benchmark): each holds a database, logs and uploads, and a day of runs left gigabytes."""
    while _made_data_dirs:
        shutil.rmtree(_made_data_dirs.pop(), ignore_errors=True)


atexit.register(remove_made_data_dirs)


class LiveServer:
    """Start with start(); base_url, admin_password and data_dir are then set. stop() leaves no process, port
    or database behind; a data directory this object made goes at the end of the run (remove_made_data_dirs).

    The port: the server inherits a listening socket that this object binds (listening_socket) on first use
    of `port`, `base_url` or start(), and holds until stop(): no other process can take the port between
    its choice and the server's start, nor while serve restarts daphne, nor when a test starts the server
    again on the same port (launch()). wait_healthy() accepts an answer only when the kernel's one listener
    on the port is that socket and the process is alive: the server answering is this one.

    migrated: whether the server's database starts as a copy of one migrated earlier in this test run
    (templates above). By default it does unless the caller passes its own data_dir: a test that brings
    its own directory is the first start of an install, on an empty database.

    workers: serve's `--workers`; None (the default): serve decides, as it does for a user (one worker a CPU:
    two on CI's machines), so that state a worker keeps to itself shows up as a failure. Pass 1 only where
    the test's point needs a single process, and say why there. A daphne-only server is one process.
    """

    def __init__(self, *, env: dict[str, str] | None = None, data_dir: str | None = None, command: str = "serve",
                 port: int | None = None, database_url: str | None = None, migrated: bool | None = None,
                 workers: int | None = None):
        self.extra_env = env or {}
        self.workers = workers
        self.migrated = data_dir is None if migrated is None else migrated
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="agentsite-e2e-"))
        if data_dir is None:
            _made_data_dirs.append(self.data_dir)
        self.command = command
        self._wanted_port = port or 0
        self._listener: socket.socket | None = None
        self._port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir / "server.log"
        self._log = None
        self._own_database: str | None = None
        # Whether the database is a copy of the prepared template that no server has started on yet: a
        # daphne-only server's first start then skips PREPARE (templates above).
        self._fresh_copy = False
        self.database_url = database_url if database_url is not None else self._database_url()
        if self.migrated and not self.database_url and not (self.data_dir / "db.sqlite3").exists():
            templates.sqlite_copy_to(self.data_dir)
            self._fresh_copy = True

    @property
    def listener(self) -> socket.socket:
        """The listening socket the server inherits (bound on first use, on the same port after a stop)."""
        if self._listener is None:
            self._listener = listening_socket(self._port or self._wanted_port)
            self._port = self._listener.getsockname()[1]
        return self._listener

    @property
    def port(self) -> int:
        return self._port if self._port is not None else self.listener.getsockname()[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base_url

    def _database_url(self) -> str:
        base = os.environ.get("DATABASE_URL", "")
        if not base.startswith("postgres"):
            return ""
        # Each server gets its own PostgreSQL database, so it never meets pytest-django's test DB.
        import psycopg

        name = f"agentsite_e2e_{secrets.token_hex(4)}"
        parsed = urlparse(base)
        admin_url = urlunparse(parsed._replace(path="/postgres"))

        def url_for(database: str) -> str:
            return urlunparse(parsed._replace(path=f"/{database}"))

        template = templates.postgres_template(admin_url, url_for) if self.migrated else None
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template[0]}"' if template else ""))
        self._own_database = name
        if template is not None:
            _copy_admin_file(template[1], self.data_dir)
            self._fresh_copy = True
        self._admin_url = admin_url
        return url_for(name)

    def env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
        env.pop("AGENTSITE_Q_SYNC", None)
        env.update({
            "AGENTSITE_DATA_DIR": str(self.data_dir),
            # The product's settings with a test password hash count (tests/live_settings.py).
            "DJANGO_SETTINGS_MODULE": "tests.live_settings",
            "AGENTSITE_CACHE_PREFIX": f"e2e-{secrets.token_hex(4)}",
            # Each server its own task queue on a shared Redis: a server of an earlier test (or another test
            # run) must never take this one's tasks.
            "AGENTSITE_Q_NAME": f"e2e-{secrets.token_hex(4)}",
            "PYTHONUNBUFFERED": "1",
        })
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        else:
            env.pop("DATABASE_URL", None)
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 60.0) -> LiveServer:
        self.launch()
        self.wait_healthy(timeout)
        return self

    def launch(self, **popen) -> subprocess.Popen:
        """Start the command on this server's socket without waiting for it (start() waits); self.proc is it.

        popen: subprocess.Popen options that replace the defaults (output into log_path), e.g.
        stdout=subprocess.PIPE, text=True. Called again after the process died, it starts a new one on the
        same port: the socket was held all along.
        """
        fd = self.listener.fileno()
        if self.command == "serve":
            args = [sys.executable, "manage.py", "serve", "--fd", str(fd)]
            if self.workers is not None:
                args += ["--workers", str(self.workers)]
        else:
            if not self._fresh_copy:  # a prepared copy's first start has nothing for PREPARE to do
                # One process for its steps: each Django start costs ~2.5 s of CPU on these machines.
                subprocess.run([sys.executable, "-c", PREPARE], cwd=ROOT, env=self.env(), check=True,
                               capture_output=True)
            args = [sys.executable, "-m", "agentsite.server.daphne_worker", "--fd", str(fd),
                    "agentsite.asgi:application"]
        self._fresh_copy = False
        if "stdout" not in popen:
            if self._log is None:
                self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
            popen = {"stdout": self._log, "stderr": subprocess.STDOUT, **popen}
        self.proc = subprocess.Popen(args, cwd=ROOT, env=popen.pop("env", None) or self.env(), pass_fds=(fd,),
                                     start_new_session=True, **popen)
        return self.proc

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Until /api/health answers from this server: its process alive, the one listener on the port ours."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if requests.get(f"{self.base_url}/api/health", timeout=2).status_code in (200, 503):
                    self.assert_ours()
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server did not answer /api/health within {timeout}s:\n{self.log()}")

    def assert_ours(self) -> None:
        """Fail unless the port's only listener is the socket this object handed its live process."""
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"the server's process is not running; something else answered on {self.port}")
        ours = os.fstat(self.listener.fileno()).st_ino
        found = listeners_on(self.port)
        if found != {ours}:
            raise RuntimeError(f"port {self.port} has listeners {sorted(found)}, not only this server's socket "
                               f"(inode {ours}): another process answers there")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    @property
    def admin_password(self) -> str:
        text = (self.data_dir / "initial_admin.txt").read_text()
        return next(line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("password: "))

    def login(self, username: str = "admin", password: str | None = None) -> dict:
        response = requests.post(f"{self.base_url}/api/auth/login",
                                 json={"username": username, "password": password or self.admin_password}, timeout=10)
        response.raise_for_status()
        return response.json()

    def release_port(self) -> None:
        """Close this object's copy of the listening socket: once the server's processes are gone too,
        connections to the port are refused (stop() does this)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def stop(self, drop_database: bool = True) -> int | None:
        code = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                code = self.proc.wait()
        elif self.proc:
            code = self.proc.returncode
        self.release_port()
        if self._log is not None:
            self._log.close()
            self._log = None
        if drop_database and self._own_database:
            _drop_database(self._admin_url, self._own_database)
            self._own_database = None
        return code


def two_hosts_possible() -> bool:
    """Whether this run can start two hosts of one deployment: PostgreSQL and Redis, which both share (CI's second
    pass). On SQLite a database is one host's: two hosts cannot share it."""
    return os.environ.get("DATABASE_URL", "").startswith("postgres") and bool(os.environ.get("REDIS_URL"))


class TwoHosts:
    """Two `serve` hosts of one deployment, as two machines behind a load balancer would run them: the same
    PostgreSQL database and Redis (one cache prefix and task queue name), the same secrets
    (AGENTSITE_SECRET_KEY, AGENTSITE_JWT_SIGNING_KEY: a token signed by one is good on the other), and each its
    own data directory. Files the hosts share on a real deployment (the plugin directory, uploads) are the
    caller's to point both at (e.g. AGENTSITE_PLUGIN_DIR in env). Each host runs serve's default workers
    unless `workers` says otherwise. PostgreSQL and Redis only (two_hosts_possible()).

    `hosts` holds the two LiveServers (the first owns the database and holds initial_admin.txt); stop() stops
    both and drops the database.
    """

    def __init__(self, *, env: dict[str, str] | None = None, workers: int | None = None) -> None:
        if not two_hosts_possible():
            raise RuntimeError("two hosts need PostgreSQL and Redis (DATABASE_URL=postgres://..., REDIS_URL)")
        tag = secrets.token_hex(4)
        shared = {"AGENTSITE_CACHE_PREFIX": f"hosts-{tag}", "AGENTSITE_Q_NAME": f"hosts-{tag}",
                  "AGENTSITE_SECRET_KEY": secrets.token_urlsafe(48),
                  "AGENTSITE_JWT_SIGNING_KEY": secrets.token_urlsafe(64), **(env or {})}
        first = LiveServer(env=shared, workers=workers)
        second = LiveServer(env=shared, workers=workers, database_url=first.database_url, migrated=False)
        self.hosts = (first, second)

    @property
    def first(self) -> LiveServer:
        return self.hosts[0]

    @property
    def second(self) -> LiveServer:
        return self.hosts[1]

    def start(self, timeout: float = 90.0) -> TwoHosts:
        """Start both (side by side: the database is migrated already) and wait until both answer."""
        try:
            for host in self.hosts:
                host.launch()
            for host in self.hosts:
                host.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def login(self, username: str = "admin", password: str | None = None) -> dict:
        return self.first.login(username, password or self.first.admin_password)

    def stop(self) -> None:
        self.second.stop(drop_database=False)
        self.first.stop()


class Alternating:
    """A client that sends each request to the next of several servers in turn (round robin, a new connection
    each time: keep-alive would pin it to one worker), as a load balancer in front of them would.

    `last_worker` is the process that answered the last request when the servers send AGENTSITE_WORKER_HEADER.
    """

    def __init__(self, *servers: LiveServer, headers: dict[str, str] | None = None) -> None:
        self.servers = servers
        self.headers = dict(headers or {})
        self._next = 0
        self.last_worker: int | None = None

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        server = self.servers[self._next % len(self.servers)]
        self._next += 1
        headers = {**self.headers, "Connection": "close", **kwargs.pop("headers", {})}
        kwargs.setdefault("timeout", 30)
        response = requests.request(method, f"{server.base_url}{path}", headers=headers, **kwargs)
        worker = response.headers.get("X-Agentsite-Worker")
        self.last_worker = int(worker) if worker else None
        return response

    def get(self, path: str, **kwargs) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs) -> requests.Response:
        return self.request("POST", path, **kwargs)
