"""Local text-to-speech: espeak-ng, offline, as a subprocess with a time limit (WAV; MP3 encoded with PyAV)."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from pathlib import Path

from agentsite.core.errors import AppError
from voice.speech.audio import NoSound, NotAudio, audio_output
from voice.speech.programs import ProgramStopped, program_path, program_run
from voice.speech.providers.base import Speech, TextToSpeech, invalid_voice
from voice.speech.voices import VoiceChoice

WHAT = "Local text-to-speech (espeak-ng)"


class EspeakTextToSpeech(TextToSpeech):
    name = "local"

    async def synthesize(self, text: str, *, voice: VoiceChoice, audio_format: str) -> Speech:
        espeak = program_path(self.settings.espeak, what=WHAT, setting="AGENTSITE_TTS_ESPEAK")
        espeak_voice = voice.espeak_voice()
        if not espeak_voice or espeak_voice.startswith("-"):  # it goes after -v: never let it read as an option
            raise invalid_voice(voice, "not an espeak-ng voice name.")
        stop = threading.Event()
        try:
            audio = await asyncio.to_thread(self._speak, espeak, text, voice, espeak_voice, audio_format, stop)
        finally:
            stop.set()  # a cancelled request kills espeak-ng instead of waiting for it
        return Speech(self.name, text, voice.id, audio, audio_format)

    def _speak(self, espeak: str, text: str, voice: VoiceChoice, espeak_voice: str, audio_format: str,
               stop: threading.Event) -> bytes:
        with tempfile.TemporaryDirectory(prefix="agentsite-tts-") as directory:
            out = Path(directory) / "speech.wav"
            # The text goes in on stdin, never as an argument: it may start with a dash or be long.
            argv = [espeak, "-v", espeak_voice, "-w", str(out), "--stdin"]
            try:
                result = program_run(argv, stdin=text.encode("utf-8"), time_limit=self.settings.timeout_s,
                                     stop=stop, what=WHAT)
            except ProgramStopped:
                return b""
            if result.returncode != 0 or not out.exists():
                raise self._failure(voice, result.stderr_tail(), result.returncode)
            wav = out.read_bytes()
        try:
            return audio_output(wav, target=audio_format)
        except NoSound:
            raise AppError("invalid", "text: Nothing in it can be spoken.", 400,
                           {"text": ["Nothing in it can be spoken."]}) from None
        except NotAudio as exc:
            raise AppError("unavailable", f"{WHAT} wrote something that is not audio ({exc}).", 503) from None

    def _failure(self, voice: VoiceChoice, stderr: str, returncode: int) -> AppError:
        if "voice does not exist" in stderr:
            return invalid_voice(voice, f"espeak-ng has no voice {voice.espeak_voice()!r}.")
        return AppError("unavailable", f"{WHAT} failed (exit status {returncode}): {stderr or 'no message'}", 503,
                        {"missing": "a working espeak-ng"})
