"""Speech fixtures. The speech tests speak with espeak-ng, a system package: without it they are skipped, saying
so, except in CI (CI=true, which .ci/run sets after installing it), where a missing espeak-ng must fail rather
than pass quietly."""

from __future__ import annotations

import shutil

import pytest

from tests.needs import in_ci
from tests.server import LiveServer

SPEECH_MODULES = ("test_speech_stt.py", "test_speech_tts.py", "test_speech_http.py")


def pytest_collection_modifyitems(config, items):
    if shutil.which("espeak-ng") or in_ci():
        return
    skip = pytest.mark.skip(reason="the speech tests need espeak-ng: apt-get install espeak-ng (.ci/run installs it)")
    for item in items:
        if item.path.name in SPEECH_MODULES:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def live():
    """One real daphne server for the speech tests that go over HTTP."""
    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000"}).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def headers(live) -> dict[str, str]:
    return {"Authorization": f"Bearer {live.login()['token']}"}
