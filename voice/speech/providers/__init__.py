"""Speech providers: one module per engine behind the `SpeechToText` and `TextToSpeech` base classes."""

from __future__ import annotations

from agentsite.core.errors import AppError
from voice.speech.providers.base import Speech, SpeechSettings, SpeechToText, TextToSpeech, Transcript
from voice.speech.providers.browser import BrowserSpeechToText, BrowserTextToSpeech
from voice.speech.providers.edge import EdgeTextToSpeech
from voice.speech.providers.espeak import EspeakTextToSpeech
from voice.speech.providers.hosted import HostedSpeechToText, HostedTextToSpeech
from voice.speech.providers.whisper import LocalSpeechToText

# In the config's order (catalogue.models.AgentConfig): the schema names each set of choices once.
STT_PROVIDERS: dict[str, type[SpeechToText]] = {
    provider.name: provider for provider in (HostedSpeechToText, LocalSpeechToText, BrowserSpeechToText)}
TTS_PROVIDERS: dict[str, type[TextToSpeech]] = {
    provider.name: provider for provider in (HostedTextToSpeech, EdgeTextToSpeech, EspeakTextToSpeech,
                                             BrowserTextToSpeech)}

__all__ = ["STT_PROVIDERS", "TTS_PROVIDERS", "Speech", "SpeechSettings", "SpeechToText", "TextToSpeech",
           "Transcript", "stt_provider_get", "tts_provider_get"]


def stt_provider_get(name: str, settings: SpeechSettings) -> SpeechToText:
    """The speech-to-text provider of that name; raises AppError 503 for a name the config holds but none has."""
    return _provider(STT_PROVIDERS, name, "speech-to-text")(settings)


def tts_provider_get(name: str, settings: SpeechSettings) -> TextToSpeech:
    """The text-to-speech provider of that name; raises AppError 503 for a name the config holds but none has."""
    return _provider(TTS_PROVIDERS, name, "text-to-speech")(settings)


def _provider(registry: dict, name: str, what: str):
    try:
        return registry[name]
    except KeyError:
        raise AppError("unavailable", f"The configured {what} provider {name!r} is not one of "
                       f"{', '.join(sorted(registry))}.", 503, {"missing": f"{what} provider {name!r}"}) from None
