"""Fixtures for the foundation's end-to-end tests: a daphne server per module, and its admin's headers."""

from __future__ import annotations

import pytest

from tests.server import LiveServer


@pytest.fixture(scope="module")
def server():
    # The login rate limit is per client IP and every test comes from 127.0.0.1: each module gets a server of
    # its own with a high limit.
    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000"}).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def admin_headers(server):
    return {"Authorization": f"Bearer {server.login()['token']}"}
