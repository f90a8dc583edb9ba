"""Speech work: transcribe audio and synthesize speech with the requested (or the configured) provider."""

from __future__ import annotations

import asyncio

from asgiref.sync import sync_to_async

from voice.speech.audio import audio_decode
from voice.speech.providers import Speech, Transcript, stt_provider_get, tts_provider_get
from voice.speech.selectors import speech_settings_get
from voice.speech.voices import PRESETS, voice_choose


async def speech_transcribe(*, audio: bytes, field: str, declared_format: str | None, provider: str | None,
                            language: str | None) -> Transcript:
    """The transcript of audio (WAV, MP3, WebM/Opus, Ogg) by `provider`, else the config's stt_provider.

    Raises AppError: 400 `invalid` naming `field` (not audio, no sound, too long), `format` (not the declared
    format) or `language`; 502 `upstream_error` (a hosted service failed); 503 `unavailable` naming what is
    missing here.
    """
    settings = await sync_to_async(speech_settings_get)()
    stt = stt_provider_get(provider or settings.stt_provider, settings)
    decoded = None
    if stt.decodes:
        decoded = await asyncio.to_thread(audio_decode, audio, field=field, max_seconds=settings.stt_max_audio_s,
                                          declared=declared_format)
    return await stt.transcribe(decoded, language=language)


async def speech_synthesize(*, text: str, voice: str | None, provider: str | None, audio_format: str) -> Speech:
    """Speech of text in `voice` (else the config's tts_voice) by `provider` (else the config's tts_provider).

    Raises AppError: 400 `invalid` naming `voice` or `text`; 502 `upstream_error`; 503 `unavailable` naming
    what is missing here.
    """
    settings = await sync_to_async(speech_settings_get)()
    tts = tts_provider_get(provider or settings.tts_provider, settings)
    choice = voice_choose(voice or settings.tts_voice or PRESETS[0].id)
    return await tts.synthesize(text, voice=choice, audio_format=audio_format)
