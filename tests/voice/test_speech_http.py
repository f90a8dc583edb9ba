"""Speech over real HTTP against daphne: the local round trip (the sync view's async work under daphne's loop,
the model in its worker thread) and the 10 MB body limit on /api/voice/stt."""

from __future__ import annotations

import pytest
import requests

pytestmark = pytest.mark.e2e

SENTENCE = "Please schedule a meeting with the marketing team tomorrow morning."


def test_speech_made_by_the_server_comes_back_as_its_text(live, headers):
    speech = requests.post(f"{live.base_url}/api/voice/tts", headers=headers, timeout=60,
                           json={"text": SENTENCE, "voice": "en-US-GuyNeural"})
    assert speech.status_code == 200 and speech.headers["Content-Type"] == "audio/mpeg", speech.text[:300]
    assert speech.headers["X-Content-Type-Options"] == "nosniff"
    response = requests.post(f"{live.base_url}/api/voice/stt", headers=headers, timeout=120,
                             files={"file": ("speech.mp3", speech.content, "audio/mpeg")}, data={"language": "en"})
    assert response.status_code == 200, response.text
    heard = {word.strip(".,").lower() for word in response.json()["text"].split()}
    assert {"meeting", "marketing", "tomorrow"} <= heard, response.json()


def test_a_body_over_ten_megabytes_is_a_413_before_it_is_read(live, headers):
    response = requests.post(f"{live.base_url}/api/voice/stt", headers=headers, timeout=60,
                             files={"file": ("long.wav", b"RIFF" + b"\x00" * (10 * 1024 * 1024), "audio/wav")})
    assert response.status_code == 413, response.text[:300]
    assert response.json()["error"]["code"] == "payload_too_large"
