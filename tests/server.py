"""A real agentsite server in a subprocess (manage.py serve: migrate, admin, q2 cluster, daphne)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import requests

ROOT = Path(__file__).resolve().parent.parent
# What `serve` does before it starts daphne (migrate, the initial admin, the start-up hooks), for a
# daphne-only server.
PREPARE = ("import django; django.setup(); from django.core.management import call_command; "
           "call_command('migrate', interactive=False, verbosity=0); call_command('initadmin'); "
           "call_command('recover')")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveServer:
    """Start with start(); base_url, admin_password and data_dir are then set. stop() leaves nothing behind."""

    def __init__(self, *, env: dict[str, str] | None = None, data_dir: str | None = None, command: str = "serve",
                 port: int | None = None, database_url: str | None = None):
        self.extra_env = env or {}
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="agentsite-e2e-"))
        self.command = command
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir / "server.log"
        self._own_database: str | None = None
        self.database_url = database_url if database_url is not None else self._database_url()

    def _database_url(self) -> str:
        base = os.environ.get("DATABASE_URL", "")
        if not base.startswith("postgres"):
            return ""
        # Each server gets its own PostgreSQL database, so it never meets pytest-django's test DB.
        import psycopg

        name = f"agentsite_e2e_{secrets.token_hex(4)}"
        parsed = urlparse(base)
        admin_url = urlunparse(parsed._replace(path="/postgres"))
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self._own_database = name
        self._admin_url = admin_url
        return urlunparse(parsed._replace(path=f"/{name}"))

    def env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
        env.pop("AGENTSITE_Q_SYNC", None)
        env.update({
            "AGENTSITE_DATA_DIR": str(self.data_dir),
            "DJANGO_SETTINGS_MODULE": "agentsite.settings",
            "AGENTSITE_CACHE_PREFIX": f"e2e-{secrets.token_hex(4)}",
            "PYTHONUNBUFFERED": "1",
        })
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        else:
            env.pop("DATABASE_URL", None)
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 60.0) -> LiveServer:
        if self.command == "serve":
            args = [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        else:
            # One process for both steps: each Django start costs ~3 s of imports on these machines.
            subprocess.run([sys.executable, "-c", PREPARE], cwd=ROOT, env=self.env(), check=True,
                           capture_output=True)
            args = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                    "agentsite.asgi:application"]
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log = log
        self.proc = subprocess.Popen(args, cwd=ROOT, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if requests.get(f"{self.base_url}/api/health", timeout=2).status_code in (200, 503):
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server did not answer /api/health within {timeout}s:\n{self.log()}")

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
        if getattr(self, "_log", None):
            self._log.close()
        if drop_database and self._own_database:
            import psycopg

            with psycopg.connect(self._admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self._own_database}" WITH (FORCE)')
            self._own_database = None
        return code
