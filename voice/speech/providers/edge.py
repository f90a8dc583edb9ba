"""edge-tts: Microsoft Edge's read-aloud voices, through the edge-tts package (a websocket on the internet).

edge-tts always answers MP3 (24 kHz mono); WAV is converted here. Which failures mean what: the service
cannot be reached at all (DNS, refused, no answer before the time limit) is 503, since this machine has no
way to it; a service that answers wrongly, or stalls after it began, is 502.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing

from agentsite.core.errors import AppError
from voice.speech.audio import NoSound, NotAudio, audio_output
from voice.speech.providers.base import Speech, TextToSpeech, invalid_voice
from voice.speech.voices import VoiceChoice

logger = logging.getLogger(__name__)

SERVICE = "Microsoft's speech service (speech.platform.bing.com)"
MAX_AUDIO = 64 * 1024 * 1024
CONNECT_TIMEOUT_S = 10


class EdgeTextToSpeech(TextToSpeech):
    name = "edge"

    async def synthesize(self, text: str, *, voice: VoiceChoice, audio_format: str) -> Speech:
        if not voice.edge_id:
            raise invalid_voice(voice, "edge-tts takes a voice id such as en-US-AriaNeural (see /api/voices).")
        mp3 = await self._mp3(text, voice.edge_id)
        try:
            audio = await asyncio.to_thread(audio_output, mp3, target=audio_format)
        except (NotAudio, NoSound) as exc:
            raise _upstream(f"{SERVICE} answered audio that does not decode ({exc}).") from None
        return Speech(self.name, text, voice.edge_id, audio, audio_format)

    async def _mp3(self, text: str, voice_id: str) -> bytes:
        # edge-tts and aiohttp take half a second to import: only when this provider is used.
        import aiohttp
        import edge_tts
        from edge_tts.exceptions import EdgeTTSException

        limit = self.settings.timeout_s
        try:
            communicate = edge_tts.Communicate(text, voice_id, connect_timeout=CONNECT_TIMEOUT_S,
                                               receive_timeout=max(1, int(limit)))
        except ValueError as exc:  # edge-tts' own check of the voice id
            raise invalid_voice(_choice(voice_id), str(exc)) from None
        audio = bytearray()
        try:
            async with asyncio.timeout(limit), aclosing(communicate.stream()) as chunks:
                async for chunk in chunks:
                    if chunk["type"] == "audio":
                        audio += chunk["data"]
                        if len(audio) > MAX_AUDIO:
                            raise _upstream(f"{SERVICE} sent more than {MAX_AUDIO // (1024 * 1024)} MB of audio.")
        except TimeoutError:
            if not audio:
                raise _unreachable(f"no answer within {limit:g} s") from None
            raise _upstream(f"{SERVICE} stopped sending audio (time limit {limit:g} s).") from None
        except aiohttp.ClientConnectionError as exc:
            if not audio:
                raise _unreachable(_reason(exc)) from None
            raise _upstream(f"the connection to {SERVICE} broke ({type(exc).__name__}).") from None
        except (aiohttp.ClientError, EdgeTTSException) as exc:
            raise _upstream(f"{SERVICE}: {type(exc).__name__}: {exc}") from None
        return bytes(audio)


def _reason(exc: Exception) -> str:
    """Why a connection failed, without aiohttp's repr of the SSL context."""
    cause = getattr(exc, "os_error", None)
    if cause is not None:
        return f"{type(exc).__name__}: {getattr(exc, 'host', '')}:{getattr(exc, 'port', '')}: {cause.strerror or cause}"
    return f"{type(exc).__name__}: {exc}"


def _choice(voice_id: str) -> VoiceChoice:
    return VoiceChoice(voice_id, edge_id=voice_id)


def _unreachable(reason: str) -> AppError:
    message = f"edge-tts is not available here: {SERVICE} could not be reached ({reason})."
    logger.warning("%s", message)
    return AppError("unavailable", message, 503, {"missing": "network access to speech.platform.bing.com"})


def _upstream(reason: str) -> AppError:
    message = f"edge-tts failed: {reason}"
    logger.warning("%s", message)
    return AppError("upstream_error", message, 502, {"provider": "edge"})
