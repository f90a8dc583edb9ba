"""Views for GET /api/sessions/:id/export and POST /api/sessions/import (sessions_app.transfer does the work)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.http import HttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.core.errors import AppError
from agentsite.core.jsonbody import json_containers
from agentsite.core.parsers import PathLimitedJSONParser
from agentsite.core.validation import validated
from sessions_app import importdoc, selectors, transfer
from sessions_app.api import SessionSerializer


class ExportQuerySerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=["json", "markdown"], default="json", help_text="`json` (default): the "
                                     "whole tree, to import again; `markdown`: the selected path, to read.")


class FormatIsTheExports(DefaultContentNegotiation):
    """`?format=` names the export's format here, not a renderer (DRF's URL_FORMAT_OVERRIDE would 404 on it)."""

    def select_renderer(self, request: Request, renderers: Iterable[Any], format_suffix: str | None = None) -> Any:
        first = next(iter(renderers))
        return first, first.media_type


class SessionExportView(APIView):
    content_negotiation_class = FormatIsTheExports

    @extend_schema(parameters=[ExportQuerySerializer], responses={(200, "application/json"): OpenApiResponse(
        OpenApiTypes.OBJECT, description="The `agentsite.chat` document (a download)."), (200, "text/markdown"):
        OpenApiResponse(OpenApiTypes.STR, description="The selected path as Markdown (a download)."),
        400: OpenApiResponse(description="`invalid` naming `format`: neither `json` nor `markdown`.")})
    def get(self, request: Request, pk) -> HttpResponse:
        """The session as a download: its whole tree (JSON) or its selected path (Markdown)."""
        query = validated(ExportQuerySerializer, request.query_params)
        session = selectors.session_get_for(owner=request.user, session_id=pk)
        if query["format"] == "markdown":
            response = HttpResponse(transfer.session_export_markdown(session=session),
                                    content_type="text/markdown; charset=utf-8")
            extension = "md"
        else:
            document = transfer.session_export_document(session=session)
            response = HttpResponse(json.dumps(document, ensure_ascii=False, indent=1),
                                    content_type="application/json; charset=utf-8")
            extension = "json"
        response["Content-Disposition"] = content_disposition_header(True, transfer.export_filename(session, extension))
        return response


class ImportJSONParser(PathLimitedJSONParser):
    """The import's JSON, up to its own body limit (20 MiB, above the 10 MB of other paths)."""

    path_name = "session-import"

    def check(self, raw: bytes) -> None:
        """Refuse a body of more containers than an import takes, counted before json.loads builds them all."""
        if json_containers(raw, importdoc.MAX_IMPORT_CONTAINERS) > importdoc.MAX_IMPORT_CONTAINERS:
            raise importdoc.invalid_at("body", f"More than {importdoc.MAX_IMPORT_CONTAINERS:,} JSON objects and "
                                       "arrays (import the rest in another file).")


class SessionImportView(APIView):
    parser_classes = [ImportJSONParser]

    @extend_schema(request=OpenApiTypes.OBJECT, responses={201: inline_serializer("SessionImport", {
        "imported": SessionSerializer(many=True), "count": serializers.IntegerField()}), 400: OpenApiResponse(
        description="`invalid` or `message_too_long`, `details` naming where (`messages.3.parent`, "
                    "`conversations.2.mapping.<node>.parent`); nothing is stored."),
        413: OpenApiResponse(description="`payload_too_large`: a body over 20 MB.")})
    def post(self, request: Request) -> Response:
        """New sessions from an `agentsite.chat` export or ChatGPT's conversations.json, all or none."""
        if request.content_type.split(";")[0].strip() != "application/json":
            raise AppError("unsupported_media_type", "Send the file's JSON as Content-Type: application/json.", 415)
        sessions = transfer.sessions_import(owner=request.user, document=request.data)
        return Response({"imported": SessionSerializer(sessions, many=True).data, "count": len(sessions)},
                        status=status.HTTP_201_CREATED)
