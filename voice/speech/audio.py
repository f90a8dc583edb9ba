"""Audio in and out with PyAV (FFmpeg's libraries, in-process: no ffmpeg binary).

Input is recognised by its first bytes and opened with that demuxer only: letting FFmpeg probe freely would
also let a playlist (HLS, concat) through, whose demuxers open the files and URLs it names. These functions
block (decoding is CPU work): call them in a worker thread.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from agentsite.core.errors import AppError

SAMPLE_RATE = 16_000  # what Whisper and whisper.cpp take
INPUT_FORMATS = ("wav", "mp3", "webm", "ogg")
OUTPUT_FORMATS = ("mp3", "wav")
CONTENT_TYPES = {"mp3": "audio/mpeg", "wav": "audio/wav", "webm": "audio/webm", "ogg": "audio/ogg"}
_DEMUXERS = {"wav": "wav", "mp3": "mp3", "webm": "matroska", "ogg": "ogg"}
_ENCODERS = {"mp3": ("mp3", "libmp3lame"), "wav": ("wav", "pcm_s16le")}


def _av() -> ModuleType:
    """PyAV, imported on first use."""
    # Here, not at the top: PyAV and its FFmpeg libraries are much of a server process's memory, for a facet
    # many deployments never call.
    import av

    return av


def _decode_errors() -> tuple[type[BaseException], ...]:
    return (_av().FFmpegError, ValueError, OSError, EOFError)


@dataclass(frozen=True)
class DecodedAudio:
    """The audio as sent (for a hosted provider) and as 16 kHz mono float32 samples (for a local one)."""

    data: bytes
    format: str  # wav | mp3 | webm | ogg
    samples: np.ndarray

    @property
    def duration_s(self) -> float:
        return len(self.samples) / SAMPLE_RATE

    @property
    def content_type(self) -> str:
        return CONTENT_TYPES[self.format]


def audio_format_sniff(data: bytes) -> str | None:
    """The container the bytes start like (WAV, MP3, WebM/Matroska, Ogg), or None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:4] == b"OggS":
        return "ogg"
    if data[:4] == b"\x1a\x45\xdf\xa3":
        return "webm"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "mp3"
    return None


def audio_decode(data: bytes, *, field: str, max_seconds: float, declared: str | None = None) -> DecodedAudio:
    """Decode WAV, MP3, WebM/Opus or Ogg to 16 kHz mono samples.

    Raises AppError 400 `invalid` naming `field` (or `format`, when the bytes are not the declared format) for
    anything that is not such audio, holds no sound, or is longer than max_seconds.
    """
    kind = audio_format_sniff(data)
    if kind is None:
        raise _invalid(field, "Not audio: send WAV, MP3, WebM/Opus or Ogg.")
    if declared and declared != kind:
        raise _invalid("format", f"The audio is {kind}, not {declared}.")
    try:
        samples = _samples(data, kind, max_samples=int(max_seconds * SAMPLE_RATE))
    except _decode_errors() as exc:
        raise _invalid(field, f"The {kind} audio could not be decoded ({type(exc).__name__}).") from None
    if samples is None:
        raise _invalid(field, f"The audio is longer than {max_seconds:g} seconds.")
    if not len(samples):
        raise _invalid(field, "The audio holds no sound.")
    return DecodedAudio(data, kind, samples)


def _samples(data: bytes, kind: str, *, max_samples: int) -> np.ndarray | None:
    """The samples, or None past max_samples (decoding stops there: a small file can hold hours)."""
    with _av().open(io.BytesIO(data), mode="r", format=_DEMUXERS[kind]) as container:
        if not container.streams.audio:
            raise ValueError("no audio stream")
        stream = container.streams.audio[0]
        resampler = _av().AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        parts: list[np.ndarray] = []
        total = 0
        for frame in _frames_then_flush(container.decode(stream)):
            for resampled in resampler.resample(frame):
                part = resampled.to_ndarray().reshape(-1)
                total += len(part)
                if total > max_samples:
                    return None
                parts.append(part)
    return np.concatenate(parts).astype(np.float32, copy=False) if parts else np.zeros(0, np.float32)


def _frames_then_flush(frames):
    yield from frames
    yield None  # a None frame flushes the resampler


def audio_transcode(data: bytes, *, source: str, target: str) -> bytes:
    """The audio re-encoded as target (mp3 or wav), mono at its own sample rate; the bytes as is when equal."""
    if source == target:
        return data
    container_format, codec = _ENCODERS[target]
    buffer = io.BytesIO()
    with _av().open(io.BytesIO(data), mode="r", format=_DEMUXERS[source]) as inp:
        rate = inp.streams.audio[0].rate
        with _av().open(buffer, mode="w", format=container_format) as out:
            # LAME's quality 7 halves the encoding time (50 ms for a sentence on 2 cores) with no audible loss
            # on speech at 64 kb/s.
            options = {"compression_level": "7"} if target == "mp3" else {}
            stream = out.add_stream(codec, rate=rate, layout="mono", options=options)
            if target == "mp3":
                stream.bit_rate = 64_000
            resampler = _av().AudioResampler(format=stream.format.name, layout="mono", rate=rate)
            for frame in _frames_then_flush(inp.decode(inp.streams.audio[0])):
                for resampled in resampler.resample(frame):
                    out.mux(stream.encode(resampled))
            out.mux(stream.encode(None))
    return buffer.getvalue()


class NotAudio(ValueError):
    """The bytes are not audio in a format this module reads."""


class NoSound(ValueError):
    """The audio decodes but holds no samples."""


def audio_output(data: bytes, *, target: str) -> bytes:
    """A provider's audio as target (mp3 or wav), checked to hold sound; raises NotAudio or NoSound."""
    kind = audio_format_sniff(data)
    if kind is None:
        raise NotAudio("not WAV, MP3, WebM or Ogg")
    try:
        duration = audio_duration(data, kind=kind)
        converted = audio_transcode(data, source=kind, target=target) if duration > 0 else b""
    except _decode_errors() as exc:
        raise NotAudio(f"{kind} that does not decode ({type(exc).__name__})") from None
    if not converted:
        raise NoSound("no samples")
    return converted


def audio_duration(data: bytes, *, kind: str) -> float:
    """Seconds of sound in the audio (decoded, not read from a header that may lie)."""
    samples = 0
    rate = 1
    with _av().open(io.BytesIO(data), mode="r", format=_DEMUXERS[kind]) as container:
        stream = container.streams.audio[0]
        for frame in container.decode(stream):
            samples += frame.samples
            rate = frame.sample_rate
    return samples / rate


def wav_16k(samples: np.ndarray) -> bytes:
    """16 kHz mono 16-bit PCM WAV of the samples (what whisper.cpp reads)."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    header = b"".join([
        b"RIFF", (36 + len(pcm)).to_bytes(4, "little"), b"WAVE",
        b"fmt ", (16).to_bytes(4, "little"), (1).to_bytes(2, "little"), (1).to_bytes(2, "little"),
        SAMPLE_RATE.to_bytes(4, "little"), (SAMPLE_RATE * 2).to_bytes(4, "little"), (2).to_bytes(2, "little"),
        (16).to_bytes(2, "little"), b"data", len(pcm).to_bytes(4, "little"),
    ])
    return header + pcm


def _invalid(field: str, message: str) -> AppError:
    return AppError("invalid", f"{field}: {message}", 400, {field: [message]})
