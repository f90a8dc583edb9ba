"""Remote A2A agents for the client's tests: a blocking one and a streaming one, each served by uvicorn on a loopback
port in a thread for the whole package (no subprocess: the API tests stay unit tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.a2a_app.remote_agent import RemoteAgent, Served


@pytest.fixture(scope="package")
def _served_echo() -> Iterator[Served]:
    served = Served(RemoteAgent(name="Echo agent")).start()
    yield served
    served.stop()


@pytest.fixture(scope="package")
def _served_streaming() -> Iterator[Served]:
    served = Served(RemoteAgent(name="Streaming agent", streaming=True)).start()
    yield served
    served.stop()


@pytest.fixture
def echo_agent(_served_echo: Served) -> RemoteAgent:
    _served_echo.agent.headers.clear()
    _served_echo.agent.cancelled.clear()
    return _served_echo.agent


@pytest.fixture
def streaming_agent(_served_streaming: Served) -> RemoteAgent:
    _served_streaming.agent.headers.clear()
    _served_streaming.agent.cancelled.clear()
    return _served_streaming.agent


@pytest.fixture
def loopback_allowed(settings):
    """Fetches of loopback addresses allowed, as every test with a loopback server sets it."""
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = True
    return settings
