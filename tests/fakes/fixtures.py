"""Pytest fixtures for the fake upstreams. Each server starts once per test session on a free loopback port
and is reset (script, requests, hang-ups, open connections) before each test that asks for it.

tests/conftest.py loads this module as a plugin (`pytest_plugins = ["tests.fakes.fixtures"]`), so every test
can ask for them by name.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.audio import FakeEdgeService, FakeOpenAIAudio
from tests.fakes.llm import FakeAnthropic, FakeOpenAI
from tests.fakes.web import FakeSearchServer, FakeWebServer

__all__ = ["fake_anthropic", "fake_anthropic_server", "fake_audio", "fake_audio_server", "fake_edge",
           "fake_edge_server", "fake_openai", "fake_openai_server", "fake_search", "fake_search_server", "fake_web",
           "fake_web_server"]


@pytest.fixture(scope="session")
def fake_openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="session")
def fake_anthropic_server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


@pytest.fixture(scope="session")
def fake_search_server() -> Iterator[FakeSearchServer]:
    with FakeSearchServer() as server:
        yield server


@pytest.fixture(scope="session")
def fake_web_server() -> Iterator[FakeWebServer]:
    with FakeWebServer() as server:
        yield server


@pytest.fixture
def fake_openai(fake_openai_server: FakeOpenAI) -> FakeOpenAI:
    fake_openai_server.reset()
    return fake_openai_server


@pytest.fixture
def fake_anthropic(fake_anthropic_server: FakeAnthropic) -> FakeAnthropic:
    fake_anthropic_server.reset()
    return fake_anthropic_server


@pytest.fixture
def fake_search(fake_search_server: FakeSearchServer) -> FakeSearchServer:
    fake_search_server.reset()
    return fake_search_server


@pytest.fixture
def fake_web(fake_web_server: FakeWebServer) -> FakeWebServer:
    fake_web_server.reset()
    return fake_web_server


@pytest.fixture(scope="session")
def fake_audio_server() -> Iterator[FakeOpenAIAudio]:
    with FakeOpenAIAudio() as server:
        yield server


@pytest.fixture
def fake_audio(fake_audio_server: FakeOpenAIAudio) -> FakeOpenAIAudio:
    fake_audio_server.reset()
    return fake_audio_server


@pytest.fixture(scope="session")
def fake_edge_server() -> Iterator[FakeEdgeService]:
    with FakeEdgeService() as server:
        yield server


@pytest.fixture
def fake_edge(fake_edge_server: FakeEdgeService, monkeypatch: pytest.MonkeyPatch) -> FakeEdgeService:
    """The fake read-aloud service, with edge-tts pointed at it for this test (its URL is the only change)."""
    import edge_tts.communicate

    fake_edge_server.reset()
    monkeypatch.setattr(edge_tts.communicate, "WSS_URL", fake_edge_server.wss_url)
    return fake_edge_server
