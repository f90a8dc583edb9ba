"""Serializers and thin views for /api/voices, /api/voice/stt and /api/voice/tts."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils import html
from rest_framework.views import APIView

from agentsite.agent.usage import Caller
from agentsite.core.errors import AppError
from agentsite.core.parsers import BoundedJSONParser
from agentsite.core.validation import validated
from catalogue.models import AgentConfig
from voice.speech import services
from voice.speech.audio import CONTENT_TYPES, INPUT_FORMATS, OUTPUT_FORMATS
from voice.speech.selectors import voice_list
from voice.speech.voices import VOICE_NAME_PATTERN

MAX_TEXT_CHARS = 4096  # OpenAI's /audio/speech limit; edge-tts and espeak-ng take it in a few seconds
LANGUAGE_PATTERN = r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8}){0,3}$"
BUDGET_REFUSED = OpenApiResponse(description=(
    "`budget_exceeded` or `rate_limited` (Retry-After): `hosted` only, the caller's budget (or their API key's) "
    "has no room for the call (usage facet `voice`)."))
_DATA_URL = re.compile(r"^data:[\w.+/-]*(;[\w=.+-]+)*;base64,")
_WHITESPACE = re.compile(rb"\s+")


# The provider fields take the config's choices (the same names as the registries in voice.speech.providers), so
# that the schema shows one enum for each.

# --- serializers ------------------------------------------------------------------------------------

class VoiceSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="An edge-tts voice id, e.g. en-US-AriaNeural.")
    name = serializers.CharField()
    language = serializers.CharField(help_text="BCP 47, e.g. en-US, zh-CN, ja-JP.")
    gender = serializers.ChoiceField(choices=["female", "male"])


class VoiceListSerializer(serializers.Serializer):
    voices = VoiceSerializer(many=True)


class _FormBlankRefused:
    """A form's empty value is refused like a JSON one: DRF reads an empty, optional form field as omitted, which
    the schema (an enum, a minLength) does not allow."""

    field_name: str

    def get_value(self, dictionary: Any) -> Any:
        if html.is_html_input(dictionary):
            return dictionary.get(self.field_name, empty)
        return super().get_value(dictionary)  # type: ignore[misc]


class _ProviderField(_FormBlankRefused, serializers.ChoiceField):
    pass


class _LanguageField(_FormBlankRefused, serializers.RegexField):
    pass


def _provider_field(choices) -> serializers.ChoiceField:
    return _ProviderField(choices=choices, required=False, help_text="Defaults to the config's choice.")


def _language_field() -> serializers.RegexField:
    return _LanguageField(LANGUAGE_PATTERN, max_length=35, required=False,
                                  help_text="The spoken language, e.g. en or en-US (the first part is used). "
                                            "Omitted: the server's AGENTSITE_STT_LANGUAGE for local speech-"
                                            "to-text when set, else detected, or the model's only language.")


class SttUploadSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="WAV, MP3, WebM/Opus or Ogg; at most 10 MB.")
    provider = _provider_field(AgentConfig.STT_PROVIDERS)
    language = _language_field()


class SttJsonSerializer(serializers.Serializer):
    audio = serializers.CharField(help_text="The audio, base64 (a data: URL is taken too).")
    format = serializers.ChoiceField(choices=INPUT_FORMATS, help_text="What the audio is.")
    provider = _provider_field(AgentConfig.STT_PROVIDERS)
    language = _language_field()


class TranscriptSerializer(serializers.Serializer):
    text = serializers.CharField(allow_null=True, help_text="null when the browser is to transcribe (fallback).")
    provider = serializers.ChoiceField(choices=AgentConfig.STT_PROVIDERS)
    language = serializers.CharField(allow_null=True, help_text="The language used or detected, when known.")
    duration_s = serializers.FloatField(allow_null=True, help_text="Seconds of audio; null for the fallback.")
    fallback = serializers.BooleanField(help_text="true: transcribe in the browser (provider browser).")


class TtsInputSerializer(serializers.Serializer):
    text = serializers.CharField(max_length=MAX_TEXT_CHARS, trim_whitespace=False)
    voice = serializers.RegexField(VOICE_NAME_PATTERN, max_length=100, required=False, help_text=(
        "A preset id from /api/voices, another edge-tts voice id, `<language>-female|male` (en-us-female), or a "
        "name the provider knows (hosted: nova; local: an espeak-ng voice). Defaults to the config's tts_voice."))
    provider = _provider_field(AgentConfig.TTS_PROVIDERS)
    format = serializers.ChoiceField(choices=OUTPUT_FORMATS, default="mp3")

    def validate_text(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("Nothing to speak: the text is blank.")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise serializers.ValidationError("Not valid Unicode text (a lone surrogate).") from None
        return value


class BrowserSpeechSerializer(serializers.Serializer):
    provider = serializers.ChoiceField(choices=["browser"])
    fallback = serializers.BooleanField()
    text = serializers.CharField()
    voice = serializers.CharField()


# --- views ------------------------------------------------------------------------------------------

class VoiceListView(APIView):
    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(responses={200: VoiceListSerializer}, summary="The preset voices (edge-tts ids)")
    def get(self, request: Request) -> Response:
        return Response(VoiceListSerializer({"voices": voice_list()}).data)


class SpeechToTextView(APIView):
    parser_classes = [BoundedJSONParser, MultiPartParser]

    @extend_schema(
        request={"multipart/form-data": SttUploadSerializer, "application/json": SttJsonSerializer},
        responses={
            200: TranscriptSerializer,
            400: OpenApiResponse(description="`invalid`: not audio, no sound, too long, not the declared format, "
                                             "a language the model does not know (details name the field)."),
            429: BUDGET_REFUSED,
            502: OpenApiResponse(description="`upstream_error`: the hosted speech service failed."),
            503: OpenApiResponse(description="`unavailable`: the provider cannot work here (details.missing)."),
        },
        summary="Speech to text",
    )
    def post(self, request: Request) -> Response:
        if request.content_type.startswith("multipart/"):
            data = _valid(SttUploadSerializer, request.data)
            upload = data["file"]
            _check_size(upload.size, "file")
            audio, field, declared = upload.read(), "file", None
        else:
            data = _valid(SttJsonSerializer, request.data)
            audio, field, declared = _base64_audio(data["audio"]), "audio", data["format"]
        transcript = async_to_sync(services.speech_transcribe)(
            audio=audio, field=field, declared_format=declared, provider=data.get("provider"),
            language=_primary_language(data.get("language")), caller=_caller(request))
        return Response(TranscriptSerializer(transcript).data)


class TextToSpeechView(APIView):
    @extend_schema(
        request=TtsInputSerializer,
        responses={
            (200, "audio/mpeg"): OpenApiResponse(OpenApiTypes.BINARY, description="The speech, `format: mp3`."),
            (200, "audio/wav"): OpenApiResponse(OpenApiTypes.BINARY, description="The speech, `format: wav`."),
            (200, "application/json"): OpenApiResponse(BrowserSpeechSerializer, description=(
                "`provider: browser`: the client speaks the text itself.")),
            400: OpenApiResponse(description="`invalid`: a voice the provider cannot use, or text it cannot speak "
                                             "(details name the field)."),
            429: BUDGET_REFUSED,
            502: OpenApiResponse(description="`upstream_error`: the hosted service or edge-tts failed."),
            503: OpenApiResponse(description="`unavailable`: the provider cannot work here (details.missing)."),
        },
        summary="Text to speech",
    )
    def post(self, request: Request) -> Response | HttpResponse:
        data = _valid(TtsInputSerializer, request.data)
        speech = async_to_sync(services.speech_synthesize)(
            text=data["text"], voice=data.get("voice"), provider=data.get("provider"), audio_format=data["format"],
            caller=_caller(request))
        if speech.fallback:
            return Response(BrowserSpeechSerializer({"provider": speech.provider, "fallback": True,
                                                     "text": speech.text, "voice": speech.voice}).data)
        response = HttpResponse(speech.audio, content_type=CONTENT_TYPES[speech.format])
        response["Content-Disposition"] = f'inline; filename="speech.{speech.format}"'
        response["Cache-Control"] = "no-store"
        return response

    def perform_content_negotiation(self, request: Request, force: bool = False):
        # The audio is returned as bytes, past the renderers; errors and the fallback are JSON whatever the
        # client's Accept says (an `Accept: audio/mpeg` must not turn them into a 406).
        return super().perform_content_negotiation(request, force=True)


# --- helpers ----------------------------------------------------------------------------------------

def _caller(request: Request) -> Caller:
    """Who a hosted speech call is metered for: the user, and the API key the request carried."""
    return Caller.with_key(request.user.pk, getattr(request, "api_key", None), "voice")


def _valid(serializer_class: type[serializers.Serializer], data) -> dict:
    if not hasattr(data, "get"):
        raise AppError("invalid", "Send a JSON object.", 400)
    return validated(serializer_class, data)


def _check_size(size: int, field: str) -> None:
    if size > settings.MAX_BODY_BYTES:
        limit = settings.MAX_BODY_BYTES // (1024 * 1024)
        raise AppError("payload_too_large", f"The audio is larger than {limit} MB.", 413,
                       {field: [f"At most {limit} MB."]})


def _base64_audio(text: str) -> bytes:
    encoded = _DATA_URL.sub("", text, count=1).encode("ascii", "replace")
    try:
        audio = base64.b64decode(_WHITESPACE.sub(b"", encoded), validate=True)
    except (binascii.Error, ValueError):
        raise AppError("invalid", "audio: Not base64.", 400, {"audio": ["Not base64."]}) from None
    _check_size(len(audio), "audio")
    if not audio:
        raise AppError("invalid", "audio: Empty.", 400, {"audio": ["Empty."]})
    return audio


def _primary_language(language: str | None) -> str | None:
    return language.split("-")[0].lower() if language else None
