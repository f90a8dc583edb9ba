"""The two small base classes every speech provider implements, and what they take and give."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from agentsite.core.errors import AppError
from voice.speech.audio import DecodedAudio
from voice.speech.voices import VoiceChoice


@dataclass(frozen=True)
class WhisperDecoding:
    """How the local provider decodes with faster-whisper, beside the beam (AGENTSITE_STT_BEAM_SIZE).

    Chosen with bench/stt_accuracy.py (word error rate on espeak-ng speech; bench/RESULTS.md): one pass at
    temperature 0 and no timestamp tokens got the same words right as faster-whisper's defaults (2 words
    apart of 872) for a little less CPU time; the default falls back to sampling at 0.2 ... 1.0 when a pass
    looks unsure, up to six decodes of one window, so temperature 0 bounds the worst case and gives the same
    transcript every time. No initial prompt (it would bias every transcript toward its own words), no
    conditioning on the previous window (a misheard window would drag the next along), no voice-activity
    filter.
    """

    temperature: float | tuple[float, ...] = 0.0
    without_timestamps: bool = True
    vad_filter: bool = False
    initial_prompt: str | None = None
    condition_on_previous_text: bool = False


@dataclass(frozen=True)
class SpeechSettings:
    """What the providers read: the config's fields (accounts) and the AGENTSITE_* speech settings."""

    stt_provider: str = "local"
    tts_provider: str = "local"
    tts_voice: str = "en-us-female"
    llm_provider: str = "offline"  # hosted speech goes to the LLM's endpoint when it is OpenAI-compatible
    base_url: str = ""
    api_key: str = field(default="", repr=False)
    stt_model: str = ""  # a bundled model's name (tiny.en, base) or a faster-whisper model directory; empty: tiny.en
    stt_command: str = ""  # a command line that prints a transcript of {input}; set: used instead of the model
    stt_timeout_s: float = 300.0  # local transcription, waiting for a free slot included
    stt_max_audio_s: float = 600.0
    stt_beam_size: int = 5  # faster-whisper's beam; 1 is greedy decoding
    stt_decoding: WhisperDecoding = WhisperDecoding()  # the rest of faster-whisper's options (not settings)
    stt_language: str = ""  # local STT's language when a request names none; empty: detected (or the model's only)
    # Silence the local model hears before and after the clip: Whisper misreads a first word that starts at the
    # clip's first sample (bench/stt_accuracy.py; 2 s each side was the best of 0, 0.5, 1 and 2 s).
    stt_pad_s: float = 2.0
    espeak: str = "espeak-ng"
    timeout_s: float = 60.0  # hosted HTTP, edge-tts, espeak-ng
    hosted_stt_model: str = "whisper-1"
    hosted_tts_model: str = "tts-1"


@dataclass(frozen=True)
class Transcript:
    text: str | None  # None: the browser transcribes (fallback)
    provider: str
    language: str | None = None
    duration_s: float | None = None
    fallback: bool = False


@dataclass(frozen=True)
class Speech:
    provider: str
    text: str
    voice: str
    audio: bytes | None = None  # None: the browser speaks (fallback)
    format: str | None = None  # mp3 | wav

    @property
    def fallback(self) -> bool:
        return self.audio is None


class SpeechToText(ABC):
    """Turns decoded audio into text.

    `transcribe()` returns a Transcript with the text (stripped; possibly empty when nothing was said), the
    language used and the audio's duration. It returns or raises within its time limit, and raises AppError:
    400 `invalid` naming the field a caller can change (`language`), 502 `upstream_error` when a hosted
    service fails (its message never holds the API key), 503 `unavailable` naming what is missing here (a
    model, a program, a configured endpoint). Blocking work runs off the event loop.
    """

    name: ClassVar[str]
    decodes: ClassVar[bool] = True  # False: the audio is not looked at (the browser fallback)
    spends_upstream_key: ClassVar[bool] = False  # True: metered, held to the caller's budgets (services)

    def __init__(self, settings: SpeechSettings):
        self.settings = settings

    @abstractmethod
    async def transcribe(self, audio: DecodedAudio | None, *, language: str | None) -> Transcript:
        """See the class docstring."""


class TextToSpeech(ABC):
    """Turns text into audio in the asked format (mp3 or wav).

    `synthesize()` returns Speech with non-empty audio that holds sound, or raises AppError: 400 `invalid`
    naming `voice` (a voice this provider cannot use) or `text` (nothing it can speak), 502 `upstream_error`
    (a remote service failed or answered something that is not audio), 503 `unavailable` naming what is
    missing (a program, the network, a configured endpoint). It returns or raises within its time limit.
    """

    name: ClassVar[str]
    spends_upstream_key: ClassVar[bool] = False  # True: metered, held to the caller's budgets (services)

    def __init__(self, settings: SpeechSettings):
        self.settings = settings

    @abstractmethod
    async def synthesize(self, text: str, *, voice: VoiceChoice, audio_format: str) -> Speech:
        """See the class docstring."""


def invalid_voice(choice: VoiceChoice, reason: str) -> AppError:
    message = f"The voice {choice.requested!r} cannot be used: {reason}"
    return AppError("invalid", f"voice: {message}", 400, {"voice": [message]})
