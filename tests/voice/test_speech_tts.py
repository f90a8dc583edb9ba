"""POST /api/voice/tts: local (espeak-ng), edge (edge-tts against a fake read-aloud service), hosted, browser."""

from __future__ import annotations

import io
import stat
import time

import av
import pytest

from catalogue.selectors import config_cache_clear
from catalogue.services import config_update
from tests.fakes.audio import tone
from tests.fakes.http import FakeResponse

pytestmark = [pytest.mark.django_db, pytest.mark.e2e]  # runs espeak-ng and local models

SECRET = "sk-test-secret-4242"


def configure(**changes) -> None:
    config_update(changes=changes)
    config_cache_clear()  # the update's on_commit never fires inside a test's transaction


def tts(client, **body):
    return client.post("/api/voice/tts", body, format="json")


def error_of(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == code, error
    return error


def seconds_of(response, fmt: str) -> float:
    """The audio's length, decoded; and the response says what it is."""
    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"] == {"mp3": "audio/mpeg", "wav": "audio/wav"}[fmt]
    container = {"mp3": "mp3", "wav": "wav"}[fmt]
    with av.open(io.BytesIO(response.content), format=container) as audio:
        frames = list(audio.decode(audio=0))
    return sum(frame.samples for frame in frames) / frames[0].sample_rate


# --- local (espeak-ng) ---------------------------------------------------------------------------------------

def test_local_is_the_default_and_answers_mp3_in_the_config_s_voice(owner_client):
    response = tts(owner_client, text="Hello world, this is agentsite speaking.")
    assert 1.0 < seconds_of(response, "mp3") < 10.0
    assert response["Content-Disposition"] == 'inline; filename="speech.mp3"'


@pytest.mark.parametrize(("voice", "text"), [
    ("en-GB-RyanNeural", "Good morning."), ("zh-CN-XiaoxiaoNeural", "你好，世界。"),
    ("ja-JP-KeitaNeural", "こんにちは。"), ("fr-FR-DeniseNeural", "Bonjour tout le monde."), ("de", "Guten Tag."),
])
def test_local_speaks_every_preset_language_other_edge_ids_and_espeak_voices(owner_client, voice, text):
    assert seconds_of(tts(owner_client, text=text, voice=voice, format="wav", provider="local"), "wav") > 0.3


def test_text_that_starts_with_a_dash_is_spoken_not_read_as_an_option(owner_client):
    assert seconds_of(tts(owner_client, text="-w /tmp/owned --version", format="wav"), "wav") > 0.5


def test_a_voice_espeak_ng_lacks_is_a_400_naming_the_voice(owner_client):
    error = error_of(tts(owner_client, text="Hello", voice="nova", provider="local"), 400, "invalid")
    assert "voice" in error["details"]


def test_a_missing_espeak_ng_is_a_503_naming_the_program(owner_client, settings):
    settings.AGENTSITE_TTS_ESPEAK = "/nonexistent/espeak-ng"
    error = error_of(tts(owner_client, text="Hello"), 503, "unavailable")
    assert error["details"]["missing"] == "/nonexistent/espeak-ng"


def test_an_espeak_ng_past_its_time_limit_is_a_503_at_once(owner_client, settings, tmp_path):
    program = tmp_path / "slow-espeak"
    program.write_text("#!/bin/sh\nsleep 30\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    settings.AGENTSITE_TTS_ESPEAK = str(program)
    settings.AGENTSITE_SPEECH_TIMEOUT_S = 0.3
    started = time.monotonic()
    error_of(tts(owner_client, text="Hello"), 503, "unavailable")
    assert time.monotonic() - started < 3


# --- edge (edge-tts, its network step replaced by a loopback fake) --------------------------------------------

@pytest.mark.parametrize("fmt", ["mp3", "wav"])
def test_edge_speaks_through_edge_tts_in_the_asked_format(owner_client, fake_edge, fmt):
    response = tts(owner_client, text="Tom & Jerry say <hello>", voice="zh-CN-XiaoxiaoNeural", provider="edge",
                   format=fmt)
    assert 0.9 < seconds_of(response, fmt) < 1.3  # the fake's one-second tone, whole
    (ssml,) = fake_edge.ssml()
    assert "<voice name='Microsoft Server Speech Text to Speech Voice (zh-CN, XiaoxiaoNeural)'>" in ssml
    assert "Tom &amp; Jerry say &lt;hello&gt;" in ssml  # edge-tts' own escaping ran
    assert any("Path:speech.config" in message for message in fake_edge.messages)


def test_edge_takes_the_config_s_alias_and_any_edge_tts_voice_id(owner_client, fake_edge):
    configure(tts_provider="edge")
    assert tts(owner_client, text="Hi").status_code == 200
    assert tts(owner_client, text="Salut", voice="fr-FR-DeniseNeural").status_code == 200
    first, second = fake_edge.ssml()
    assert "(en-US, AriaNeural)" in first and "(fr-FR, DeniseNeural)" in second


def test_edge_with_a_voice_that_is_not_an_edge_id_is_a_400(owner_client, fake_edge):
    error = error_of(tts(owner_client, text="Hi", voice="nova", provider="edge"), 400, "invalid")
    assert "voice" in error["details"]
    assert fake_edge.connections == 0


def test_edge_when_the_service_is_unreachable_is_a_503_naming_the_network(owner_client, monkeypatch):
    import edge_tts.communicate

    monkeypatch.setattr(edge_tts.communicate, "WSS_URL", "ws://127.0.0.1:9/edge/v1?TrustedClientToken=x")
    error = error_of(tts(owner_client, text="Hi", provider="edge"), 503, "unavailable")
    assert "speech.platform.bing.com" in error["details"]["missing"]


def test_edge_when_the_service_says_nothing_is_a_503_at_the_time_limit(owner_client, fake_edge, settings):
    fake_edge.mode = "stall"
    settings.AGENTSITE_SPEECH_TIMEOUT_S = 0.5
    started = time.monotonic()
    error_of(tts(owner_client, text="Hi", provider="edge"), 503, "unavailable")
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("mode", ["no_audio", "garbage"])
def test_edge_answers_without_usable_audio_are_a_502_never_empty_audio(owner_client, fake_edge, mode):
    fake_edge.mode = mode
    error_of(tts(owner_client, text="Hi", provider="edge"), 502, "upstream_error")


# --- hosted (an OpenAI-compatible /audio/speech) ----------------------------------------------------------------

@pytest.fixture
def hosted(fake_audio):
    configure(provider="openai", base_url=fake_audio.base_url, api_key=SECRET)
    return fake_audio


@pytest.mark.parametrize(("voice", "sent"), [
    ("en-US-AriaNeural", "nova"), ("ja-JP-KeitaNeural", "onyx"), ("fr-FR-DeniseNeural", "alloy"),
    ("shimmer", "shimmer"), ("af_bella", "af_bella"),
])
def test_hosted_tts_sends_openai_s_request_and_maps_presets_to_its_voices(owner_client, hosted, voice, sent):
    response = tts(owner_client, text="Hello there", voice=voice, provider="hosted", format="wav")
    assert seconds_of(response, "wav") == pytest.approx(0.5, abs=0.05)
    assert hosted.speeches() == [{"model": "tts-1", "input": "Hello there", "voice": sent, "response_format": "wav"}]
    assert hosted.requests[0].headers["authorization"] == f"Bearer {SECRET}"


def test_hosted_audio_in_another_format_than_asked_is_converted(owner_client, hosted, settings):
    settings.AGENTSITE_TTS_HOSTED_MODEL = "kokoro"
    hosted.script(FakeResponse(200, tone(fmt="wav"), "audio/wav"))  # a server that ignores response_format
    assert seconds_of(tts(owner_client, text="Hi", provider="hosted"), "mp3") == pytest.approx(0.5, abs=0.1)
    assert hosted.speeches()[0]["model"] == "kokoro"


@pytest.mark.parametrize("reply", [
    FakeResponse.json({"error": {"message": f"Incorrect API key provided: {SECRET}"}}, 401),
    FakeResponse.json({"error": {"message": "overloaded"}}, 503),
    FakeResponse.json({"not": "audio"}),
    FakeResponse(200, b"", "audio/mpeg"),
    FakeResponse(truncate=True, chunks=[]),
])
def test_a_failing_hosted_service_is_a_502_that_never_shows_the_key(owner_client, hosted, reply):
    hosted.script(reply)
    error = error_of(tts(owner_client, text="Hi", provider="hosted"), 502, "upstream_error")
    assert SECRET not in str(error)


@pytest.mark.parametrize(("key", "redacted"), [("x", False), ("k-12345", False), ("k-123456", True)])
def test_hosted_errors_redact_keys_of_8_characters_or_more_and_leave_words_whole(owner_client, fake_audio, key,
                                                                                  redacted):
    configure(provider="openai", base_url=fake_audio.base_url, api_key=key)
    fake_audio.script(FakeResponse.json({"error": {"message": f"max context exceeded for ({key})"}}, 500))
    error = error_of(tts(owner_client, text="Hi", provider="hosted"), 502, "upstream_error")
    assert "max context exceeded for (" in error["message"]
    assert ("([redacted])" in error["message"]) is redacted and (f"({key})" in error["message"]) is not redacted



def test_a_silent_hosted_service_is_a_502_at_the_time_limit(owner_client, hosted, settings):
    settings.AGENTSITE_SPEECH_TIMEOUT_S = 0.3
    hosted.script(FakeResponse(delay=30))
    started = time.monotonic()
    error_of(tts(owner_client, text="Hi", provider="hosted"), 502, "upstream_error")
    assert time.monotonic() - started < 3


def test_hosted_tts_with_the_offline_provider_is_a_503(owner_client):
    error = error_of(tts(owner_client, text="Hi", provider="hosted"), 503, "unavailable")
    assert error["details"]["missing"] == "config.provider=openai"


# --- browser, config defaults, validation, auth -------------------------------------------------------------

def test_the_browser_provider_answers_the_fallback_with_the_voice(owner_client):
    response = tts(owner_client, text="Read this aloud", provider="browser", voice="ja-jp-female")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response.json() == {"provider": "browser", "fallback": True, "text": "Read this aloud",
                               "voice": "ja-JP-NanamiNeural"}


def test_the_config_s_provider_and_voice_are_the_defaults(owner_client):
    configure(tts_provider="browser", tts_voice="zh-CN-YunxiNeural")
    assert tts(owner_client, text="Hi").json()["voice"] == "zh-CN-YunxiNeural"
    configure(tts_voice="")
    assert tts(owner_client, text="Hi").json()["voice"] == "en-US-AriaNeural"


@pytest.mark.parametrize(("body", "field"), [
    ({"text": ""}, "text"), ({"text": "   \n"}, "text"), ({"text": "x" * 4097}, "text"), ({}, "text"),
    ({"text": 5}, "text"), ({"text": "Hi", "format": "ogg"}, "format"),
    ({"text": "Hi", "provider": "cloud"}, "provider"), ({"text": "Hi", "voice": "-v"}, "voice"),
    ({"text": "Hi", "voice": "a voice with spaces"}, "voice"), ({"text": "Hi", "voice": "x" * 101}, "voice"),
])
def test_bad_fields_are_a_400_naming_the_field(owner_client, body, field):
    error = error_of(owner_client.post("/api/voice/tts", body, format="json"), 400, "invalid")
    assert field in error["details"], error


def test_a_lone_surrogate_is_a_400_not_a_crash(owner_client):
    response = owner_client.generic("POST", "/api/voice/tts", '{"text": "\\ud800 broken"}',
                                    content_type="application/json")
    assert "text" in error_of(response, 400, "invalid")["details"]


def test_the_longest_text_is_taken(owner_client):
    text = ("word " * 820)[:4096]
    response = tts(owner_client, text=text, provider="browser")
    assert response.status_code == 200 and response.json()["text"] == text


def test_errors_stay_json_when_the_client_accepts_only_audio(owner_client):
    response = owner_client.post("/api/voice/tts", {"text": ""}, format="json", HTTP_ACCEPT="audio/mpeg")
    error_of(response, 400, "invalid")


def test_tts_needs_a_token(anon_client):
    error_of(tts(anon_client, text="Hi"), 401, "not_authenticated")
