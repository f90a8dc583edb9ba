"""Serializers and thin views for /api/upload and /api/uploads/*."""

from __future__ import annotations

import base64
import binascii
import re
import uuid

from django.http import HttpResponse
from django.urls import reverse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.core.errors import AppError
from agentsite.core.parsers import PathLimitedJSONParser
from agentsite.core.validation import validated
from uploads import selectors, services
from uploads.models import Upload

# A browser's FileReader gives a data URL; its prefix is dropped (the type it names is not believed).
_DATA_URL_PREFIX = re.compile(r"^data:[^,]*;base64,", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")


# --- serializers ------------------------------------------------------------------------------------

class UploadSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    filename = serializers.CharField()
    content_type = serializers.CharField(help_text="Sniffed from the bytes, never taken from the client.")
    size = serializers.IntegerField()
    sha256 = serializers.CharField()
    is_image = serializers.BooleanField(help_text="A PNG, JPEG, GIF or WebP image that Pillow has read.")
    url = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()

    @extend_schema_field(OpenApiTypes.URI)
    def get_url(self, upload: Upload) -> str:
        path = reverse("upload-detail", args=[upload.pk])
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path


class UploadJSONSerializer(serializers.Serializer):
    filename = serializers.CharField(max_length=255, trim_whitespace=False,
                                     help_text="A label only: the file is stored under a generated name.")
    content_base64 = serializers.CharField(trim_whitespace=False,
                                           help_text="The file, base64 (a `data:...;base64,` URL is taken too).")
    content_type = serializers.CharField(max_length=255, required=False, allow_blank=True,
                                         help_text="Ignored: the type is sniffed from the bytes.")


class UploadFileSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="At most 10 MB.")


# --- views ------------------------------------------------------------------------------------------

class UploadJSONParser(PathLimitedJSONParser):
    """JSON up to the upload path's own body limit: a 10 MB file in base64 is larger than the 10 MB of other
    paths."""

    path_name = "upload"


class UploadCreateView(APIView):
    parser_classes = [UploadJSONParser, MultiPartParser]

    @extend_schema(
        request={"application/json": UploadJSONSerializer, "multipart/form-data": UploadFileSerializer},
        responses={
            201: UploadSerializer,
            400: OpenApiResponse(description="`invalid` (details name the field), or `invalid_image`: the bytes "
                                             "start like an image that Pillow cannot read. Nothing is stored."),
            413: OpenApiResponse(description="`payload_too_large` (a file over 10 MB; details: size, max_bytes) or "
                                             "`quota_exceeded` (details: used_bytes, quota_bytes, size). Nothing "
                                             "is stored."),
            503: OpenApiResponse(description="`unavailable`: the server could not write the file (a full disk)."),
            507: OpenApiResponse(description="`insufficient_storage`: the data directory's disk has less than "
                                             "AGENTSITE_MIN_FREE_MB free. Nothing is stored."),
        },
        description="Store a file (multipart `file`, or JSON with the bytes in base64). Its type is sniffed from "
                    "its bytes; the filename is a label only.",
    )
    def post(self, request: Request) -> Response:
        if request.content_type.startswith("multipart/"):
            upload = validated(UploadFileSerializer, request.data)["file"]
            services.size_check(upload.size)
            filename, data = upload.name or "", upload.read()
        else:
            if not hasattr(request.data, "get"):
                raise AppError("invalid", "Send a JSON object.", 400)
            body = validated(UploadJSONSerializer, request.data)
            filename, data = body["filename"], _base64_file(body["content_base64"])
        created = services.upload_create(owner_id=request.user.pk, filename=filename, data=data)
        return Response(UploadSerializer(created, context={"request": request}).data, status=status.HTTP_201_CREATED)


class UploadListView(ListAPIView):
    serializer_class = UploadSerializer

    def get_queryset(self):
        return selectors.upload_list_for(owner_id=self.request.user.pk)


class _AnyAccept(DefaultContentNegotiation):
    """The bytes go out whatever the client accepts (an `<img>` asks for image/*); errors are JSON."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class UploadDetailView(APIView):
    content_negotiation_class = _AnyAccept

    @extend_schema(responses={(200, "*/*"): OpenApiResponse(
        OpenApiTypes.BINARY, description="The bytes, with the sniffed Content-Type; `Content-Disposition: inline` "
                                         "for images, `attachment` for anything else.")})
    def get(self, request: Request, pk: uuid.UUID) -> HttpResponse:
        upload = selectors.upload_get_for(owner_id=request.user.pk, upload_id=pk)
        return upload_response(upload, selectors.upload_read(upload=upload), as_attachment=not upload.is_image)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: uuid.UUID) -> Response:
        services.upload_delete(owner_id=request.user.pk, upload_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


def upload_response(upload: Upload, data: bytes, *, as_attachment: bool) -> HttpResponse:
    """The bytes with headers that keep a browser from running them: the sniffed type, nosniff, a sandbox."""
    response = HttpResponse(data, content_type=_served_type(upload, data))
    response["Content-Disposition"] = content_disposition_header(as_attachment, upload.filename)
    response["X-Content-Type-Options"] = "nosniff"
    # Even opened directly, an HTML or SVG upload runs no script and loads nothing.
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private"
    return response


def _served_type(upload: Upload, data: bytes) -> str:
    text_like = upload.content_type.startswith("text/") or upload.content_type in (
        "application/json", "application/xml", "application/yaml", "image/svg+xml")
    if not text_like:
        return upload.content_type
    charset = "utf-16" if data.startswith((b"\xff\xfe", b"\xfe\xff")) else "utf-8"
    return f"{upload.content_type}; charset={charset}"


def _base64_file(text: str) -> bytes:
    """The bytes of `content_base64`; raises AppError 413 (before decoding) or 400 `invalid`."""
    compact = _WHITESPACE.sub("", _DATA_URL_PREFIX.sub("", text, count=1))
    services.size_check(len(compact) * 3 // 4 - compact[-2:].count("="))
    try:
        return base64.b64decode(compact.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise AppError("invalid", "content_base64 is not valid base64.", 400,
                       {"content_base64": ["Not valid base64."]}) from exc
