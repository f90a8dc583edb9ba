"""Reads: the preset voices, and the speech settings (the config singleton plus the AGENTSITE_* settings)."""

from __future__ import annotations

from django.conf import settings

from catalogue.selectors import config_get
from voice.speech.providers.base import SpeechSettings
from voice.speech.voices import PRESETS, Voice


def voice_list() -> tuple[Voice, ...]:
    """The preset voices, English, Chinese and Japanese (edge-tts ids)."""
    return PRESETS


def speech_settings_get() -> SpeechSettings:
    """The config's speech fields and endpoint with the deployment's speech settings (sync: it may query)."""
    config = config_get()
    connection = config.connection  # the default connection: hosted speech goes where the LLM goes
    return SpeechSettings(
        stt_provider=config.stt_provider, tts_provider=config.tts_provider, tts_voice=config.tts_voice,
        llm_provider=connection.provider if connection else "offline",
        base_url=connection.base_url if connection else "", api_key=connection.api_key if connection else "",
        stt_model=settings.AGENTSITE_STT_MODEL, stt_command=settings.AGENTSITE_STT_COMMAND,
        stt_timeout_s=settings.AGENTSITE_STT_TIMEOUT_S, stt_max_audio_s=settings.AGENTSITE_STT_MAX_AUDIO_S,
        stt_beam_size=settings.AGENTSITE_STT_BEAM_SIZE, stt_language=settings.AGENTSITE_STT_LANGUAGE,
        espeak=settings.AGENTSITE_TTS_ESPEAK, timeout_s=settings.AGENTSITE_SPEECH_TIMEOUT_S,
        hosted_stt_model=settings.AGENTSITE_STT_HOSTED_MODEL, hosted_tts_model=settings.AGENTSITE_TTS_HOSTED_MODEL,
    )
