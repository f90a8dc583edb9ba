"""The import's own body limit on a live server: past the 10 MB every other path takes, up to 20 MB, and refused
past it before the view reads it (agentsite.server.asgi_limits, MAX_BODY_BYTES_BY_PATH)."""

from __future__ import annotations

import json

import pytest
import requests

from tests.server import LiveServer
from tests.sessions_app.chatgpt_export import conversations

pytestmark = pytest.mark.e2e

MB = 1024 * 1024


def _padded_to(size: int) -> bytes:
    """The two-conversation export, padded with an ignored field to exactly `size` bytes."""
    document = conversations()
    document[0]["moderation_results"] = [""]
    bare = len(json.dumps(document).encode())
    document[0]["moderation_results"] = ["x" * (size - bare)]
    body = json.dumps(document).encode()
    assert len(body) == size
    return body


def test_an_import_of_up_to_twenty_megabytes_is_taken_and_one_byte_more_is_refused():
    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000"}).start()
    try:
        headers = {"Authorization": f"Bearer {server.login()['token']}", "Content-Type": "application/json"}
        url = f"{server.base_url}/api/sessions/import"
        taken = requests.post(url, data=_padded_to(20 * MB), headers=headers, timeout=60)
        assert taken.status_code == 201 and taken.json()["count"] == 2, taken.text[:300]
        refused = requests.post(url, data=_padded_to(20 * MB + 1), headers=headers, timeout=60)
        assert refused.status_code == 413 and refused.json()["error"]["code"] == "payload_too_large"
        elsewhere = requests.post(f"{server.base_url}/api/sessions", data=b" " * (10 * MB + 1), headers=headers,
                                  timeout=60)
        assert elsewhere.status_code == 413  # the control: the other paths keep their 10 MB
        listed = requests.get(f"{server.base_url}/api/sessions", headers=headers, timeout=10).json()
        assert listed["count"] == 2
    finally:
        server.stop()
