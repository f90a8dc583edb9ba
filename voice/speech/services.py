"""Speech work: transcribe audio and synthesize speech with the requested (or the configured) provider.

A provider that spends the operator's upstream key (hosted) is metered for the caller, facet `voice`, and held
to their budgets before it is called (agentsite.agent.usage.metered_call): its text or seconds of audio count as
prompt tokens of the hosted model, priced like any model.
"""

from __future__ import annotations

import asyncio
import math

from asgiref.sync import sync_to_async

from agentsite.agent.usage import CHARS_PER_TOKEN, Caller, metered_call
from voice.speech.audio import audio_decode
from voice.speech.providers import Speech, Transcript, stt_provider_get, tts_provider_get
from voice.speech.selectors import speech_settings_get
from voice.speech.voices import PRESETS, voice_choose

# A minute of audio: 600 tokens.
STT_TOKENS_PER_SECOND = 10


def tts_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def stt_tokens(seconds: float) -> int:
    return max(1, math.ceil(seconds * STT_TOKENS_PER_SECOND))


async def speech_transcribe(*, audio: bytes, field: str, declared_format: str | None, provider: str | None,
                            language: str | None, caller: Caller | None = None) -> Transcript:
    """The transcript of audio (WAV, MP3, WebM/Opus, Ogg) by `provider`, else the config's stt_provider; a hosted
    one metered for `caller` (None: not metered).

    Raises AppError: 400 `invalid` naming `field` (not audio, no sound, too long), `format` (not the declared
    format) or `language`; 429 `budget_exceeded`/`rate_limited` (hosted: the caller's budget has no room); 502
    `upstream_error` (a hosted service failed); 503 `unavailable` naming what is missing here.
    """
    settings = await sync_to_async(speech_settings_get)()
    stt = stt_provider_get(provider or settings.stt_provider, settings)
    decoded = None
    if stt.decodes:
        decoded = await asyncio.to_thread(audio_decode, audio, field=field, max_seconds=settings.stt_max_audio_s,
                                          declared=declared_format)
    if caller is None or not stt.spends_upstream_key or decoded is None:
        return await stt.transcribe(decoded, language=language)
    return await metered_call(caller, settings.hosted_stt_model, stt_tokens(decoded.duration_s),
                              lambda: stt.transcribe(decoded, language=language))


async def speech_synthesize(*, text: str, voice: str | None, provider: str | None, audio_format: str,
                            caller: Caller | None = None) -> Speech:
    """Speech of text in `voice` (else the config's tts_voice) by `provider` (else the config's tts_provider); a
    hosted one metered for `caller` (None: not metered).

    Raises AppError: 400 `invalid` naming `voice` or `text`; 429 `budget_exceeded`/`rate_limited` (hosted: the
    caller's budget has no room); 502 `upstream_error`; 503 `unavailable` naming what is missing here.
    """
    settings = await sync_to_async(speech_settings_get)()
    tts = tts_provider_get(provider or settings.tts_provider, settings)
    choice = voice_choose(voice or settings.tts_voice or PRESETS[0].id)
    if caller is None or not tts.spends_upstream_key:
        return await tts.synthesize(text, voice=choice, audio_format=audio_format)
    return await metered_call(caller, settings.hosted_tts_model, tts_tokens(text),
                              lambda: tts.synthesize(text, voice=choice, audio_format=audio_format))
