"""MCP fixtures: one real server (daphne on its own data dir) shared by this package's end-to-end tests."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.fakes.fixtures import fake_openai, fake_openai_server, fake_web, fake_web_server  # noqa: F401
from tests.server import LiveServer

HERE = Path(__file__).resolve().parent
FRAGILE_SERVER = [sys.executable, str(HERE / "fragile_server.py")]
TIME_SERVER = [sys.executable, "-m", "mcp_server_time"]  # the reference server from PyPI (mcp-server-time)
LIVE_ENV = {"AGENTSITE_ALLOW_PRIVATE_FETCH": "1", "AGENTSITE_LOGIN_RATE_LIMIT": "1000"}


class Api:
    """requests against the live server with one user's token."""

    def __init__(self, base_url: str, token: str):
        self.base_url = base_url
        self.token = token
        self.headers = {"Authorization": f"Bearer {token}"}

    def get(self, path: str) -> requests.Response:
        return requests.get(self.base_url + path, headers=self.headers, timeout=30)

    def post(self, path: str, body: dict) -> requests.Response:
        return requests.post(self.base_url + path, json=body, headers=self.headers, timeout=60)

    def patch(self, path: str, body: dict) -> requests.Response:
        return requests.patch(self.base_url + path, json=body, headers=self.headers, timeout=60)


@pytest.fixture(scope="package")
def live() -> Iterator[LiveServer]:
    # daphne alone (no q2 cluster): nothing here queues tasks, and it starts and stops in about a second.
    server = LiveServer(command="daphne", env=LIVE_ENV)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="package")
def admin_api(live: LiveServer) -> Api:
    return Api(live.base_url, live.login()["token"])


@pytest.fixture(scope="package")
def user_api(live: LiveServer) -> Api:
    response = requests.post(f"{live.base_url}/api/auth/register",
                             json={"username": "mcp-user", "password": "correct-horse-battery-9"}, timeout=10)
    assert response.status_code == 201, response.text
    return Api(live.base_url, response.json()["token"])


# --- processes --------------------------------------------------------------------------------------

def processes_running(marker: str, *, under: int) -> set[int]:
    """Descendants of pid `under` whose command line contains marker."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, stack = set(), [under]
    while stack:
        for child in children.get(stack.pop(), []):
            try:
                if marker in (Path("/proc") / str(child) / "cmdline").read_bytes().decode(errors="replace"):
                    found.add(child)
            except OSError:
                continue
            stack.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its exit status waits for its parent


def wait_until(condition, message: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(message)
        time.sleep(0.05)

# The named-agent fixtures shared with tests/compat (tests/mcpbridge/test_agent_ask.py uses them).
from tests.compat.agent_world import helper, metering  # noqa: E402, F401
