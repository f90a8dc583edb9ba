"""The browser fallback: the server does no speech work and tells the client to use its own (Web Speech API)."""

from __future__ import annotations

from voice.speech.providers.base import Speech, SpeechToText, TextToSpeech, Transcript
from voice.speech.voices import VoiceChoice


class BrowserSpeechToText(SpeechToText):
    name = "browser"
    decodes = False

    async def transcribe(self, audio, *, language):
        return Transcript(None, self.name, language, None, fallback=True)


class BrowserTextToSpeech(TextToSpeech):
    name = "browser"

    async def synthesize(self, text: str, *, voice: VoiceChoice, audio_format: str) -> Speech:
        return Speech(self.name, text, voice.id)
