"""OpenAI's audio wire format (`/audio/transcriptions`, `/audio/speech`) at the configured base URL and key.

Hosted speech goes where the LLM goes: the config's `base_url` (empty: OpenAI) with its `api_key`, when the
config's provider is `openai` (any OpenAI-compatible server). Another provider's key is never sent here.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import httpx
from pydantic import BaseModel, ValidationError

from agentsite.agent.providers.http import error_text, redact, shared_client
from agentsite.agent.providers.openai import OpenAIProvider
from agentsite.agent.providers.urls import basic_auth, join_url, mask_url, url_secrets
from agentsite.core.errors import AppError
from voice.speech.audio import NoSound, NotAudio, audio_output
from voice.speech.providers.base import Speech, SpeechSettings, SpeechToText, TextToSpeech, Transcript
from voice.speech.voices import VoiceChoice

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0
MAX_AUDIO_REPLY = 64 * 1024 * 1024
MAX_JSON_REPLY = 1024 * 1024
MAX_ERROR_BODY = 16_384
# OpenAI's own voices for a preset or an edge-tts id (a compatible server with other voice names takes them by
# name: any name that is not an edge-tts id is passed on as is).
OPENAI_VOICES = {"female": "nova", "male": "onyx", None: "alloy"}


class _TranscriptionReply(BaseModel):
    text: str


@dataclass
class HostedEndpoint:
    base_url: str
    api_key: str = field(repr=False)
    timeout_s: float

    @classmethod
    def from_settings(cls, settings: SpeechSettings) -> HostedEndpoint:
        """The configured OpenAI-compatible endpoint; raises AppError 503 when the config names none."""
        if settings.llm_provider != OpenAIProvider.name:
            raise AppError("unavailable", "Hosted speech needs an OpenAI-compatible endpoint: set the config's "
                           f"provider to openai (with its base_url and api_key); it is {settings.llm_provider!r}.",
                           503, {"missing": "config.provider=openai"})
        base_url = (settings.base_url or OpenAIProvider.default_base_url).rstrip("/")
        return cls(base_url, settings.api_key, settings.timeout_s)

    def headers(self) -> dict[str, str]:
        # As the LLM provider's: a base URL's user:password@ is Basic auth, unless the key takes the header.
        if self.api_key:
            return {"Authorization": f"Bearer {self.api_key}"}
        basic = basic_auth(self.base_url)
        return {"Authorization": basic} if basic else {}

    def error(self, path: str, message: str, *, status: int | None = None) -> AppError:
        text = redact(message, (self.api_key, *url_secrets(self.base_url)))
        where = f"The hosted speech service ({mask_url(join_url(self.base_url, path))})"
        text = text[:500]
        sentence = f"{where} answered {status}: {text}" if status else f"{where} failed: {text}"
        logger.warning("%s", sentence)
        details = {"provider": "hosted", **({"status": status} if status else {})}
        return AppError("upstream_error", sentence, 502, details)

    async def post(self, path: str, *, limit: int, **kwargs) -> bytes:
        """POST and return the reply's body (at most `limit` bytes) within the time limit; raises the upstream
        AppError (502) for a transport failure, a time-out, an error status or a reply that is too large."""
        request = shared_client().build_request(
            "POST", join_url(self.base_url, path), headers=self.headers(),
            timeout=httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, CONNECT_TIMEOUT)), **kwargs)
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await shared_client().send(request, stream=True)
                try:
                    body = await _read_capped(response, MAX_ERROR_BODY if response.status_code >= 400 else limit)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise self.error(path, f"no answer within {self.timeout_s:g} s.") from None
        except httpx.HTTPError as exc:
            raise self.error(path, f"{type(exc).__name__}: {exc or 'no detail'}") from None
        if response.status_code >= 400:
            raise self.error(path, error_text(body), status=response.status_code)
        if body is None:
            raise self.error(path, f"the reply is larger than {limit // (1024 * 1024)} MB.")
        return body


async def _read_capped(response: httpx.Response, limit: int) -> bytes | None:
    """The body, or None when it passes limit (an error body is cut at limit instead)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            return bytes(body[:limit]) if response.status_code >= 400 else None
    return bytes(body)


class HostedSpeechToText(SpeechToText):
    name = "hosted"
    spends_upstream_key = True

    async def transcribe(self, audio, *, language):
        endpoint = HostedEndpoint.from_settings(self.settings)
        form = {"model": self.settings.hosted_stt_model, "response_format": "json"}
        if language:
            form["language"] = language
        path = "/audio/transcriptions"
        body = await endpoint.post(path, limit=MAX_JSON_REPLY, data=form,
                                   files={"file": (f"audio.{audio.format}", audio.data, audio.content_type)})
        try:
            reply = _TranscriptionReply.model_validate_json(body)
        except ValidationError:
            shown = body[:200].decode("utf-8", "replace")
            raise endpoint.error(path, f"the reply is not a transcription: {shown!r}") from None
        return Transcript(reply.text.strip(), self.name, language, audio.duration_s)


class HostedTextToSpeech(TextToSpeech):
    name = "hosted"
    spends_upstream_key = True

    async def synthesize(self, text: str, *, voice: VoiceChoice, audio_format: str) -> Speech:
        endpoint = HostedEndpoint.from_settings(self.settings)
        name = OPENAI_VOICES[voice.gender] if voice.edge_id else voice.requested
        path = "/audio/speech"
        body = await endpoint.post(path, limit=MAX_AUDIO_REPLY, json={
            "model": self.settings.hosted_tts_model, "input": text, "voice": name, "response_format": audio_format})
        try:
            audio = await asyncio.to_thread(audio_output, body, target=audio_format)
        except NotAudio as exc:
            raise endpoint.error(path, f"the reply is not audio ({exc}).") from None
        except NoSound:
            raise endpoint.error(path, "the reply is audio without sound.") from None
        return Speech(self.name, text, name, audio, audio_format)
