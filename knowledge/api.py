"""Serializers and thin views for /api/kb/*."""

from __future__ import annotations

import uuid

from django.core.files.uploadedfile import UploadedFile
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.agent.config import get_settings
from agentsite.core.errors import AppError
from agentsite.core.parsers import BoundedJSONParser
from agentsite.core.validation import validated
from knowledge import services
from knowledge.selectors import DEFAULT_MODE, MODES, chunk_search, context_build, document_list_for, offered_modes

MAX_QUERY_CHARS = 32_000


# --- serializers ------------------------------------------------------------------------------------

class DocumentSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    filename = serializers.CharField()
    content_type = serializers.CharField()
    chunks = serializers.IntegerField(source="chunk_count")
    size = serializers.IntegerField()
    created_at = serializers.DateTimeField()


class DocumentCreatedSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    filename = serializers.CharField()
    chunks = serializers.IntegerField(source="chunk_count")


class DocumentTextSerializer(serializers.Serializer):
    filename = serializers.CharField(max_length=255)
    # Blank passes here so that an empty document answers `empty_document`, as an empty upload does.
    content = serializers.CharField(allow_blank=True, trim_whitespace=False)
    content_type = serializers.CharField(max_length=100, required=False, allow_blank=True, default="text/plain")


class DocumentUploadSerializer(serializers.Serializer):
    file = serializers.FileField(allow_empty_file=True, help_text="Text, Markdown, HTML or PDF.")


class SearchInputSerializer(serializers.Serializer):
    # Not trimmed: the length checked is the length sent (a trimmed query passed a limit the schema states).
    query = serializers.CharField(max_length=MAX_QUERY_CHARS, trim_whitespace=False)
    topK = serializers.IntegerField(min_value=1, max_value=50, default=5)  # noqa: N815 - the wire name
    mode = serializers.ChoiceField(choices=MODES, default=DEFAULT_MODE,
                                   help_text="hybrid: the vector and lexical rankings fused (reciprocal rank fusion); "
                                             "lexical: BM25 alone; vector: cosine similarity alone; dense: the "
                                             "dense model alone (only when installed, and then also in hybrid).")


class SearchChunkSerializer(serializers.Serializer):
    text = serializers.CharField()
    index = serializers.IntegerField()


class SearchDocumentSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="document_id")
    filename = serializers.CharField()


class SearchResultSerializer(serializers.Serializer):
    chunk = SearchChunkSerializer(source="*")
    score = serializers.FloatField(help_text="The cosine similarity of the query's and the chunk's word-hash vectors.")
    rank_score = serializers.FloatField(help_text="What the results are ordered by: hybrid, the fused score (sum of "
                                                  "1/(60 + rank) over the rankers); lexical, BM25; vector, the cosine.")
    document = SearchDocumentSerializer(source="*")


class SearchOutputSerializer(serializers.Serializer):
    results = SearchResultSerializer(many=True)


class ContextInputSerializer(serializers.Serializer):
    # Not trimmed: the length checked is the length sent (a trimmed query passed a limit the schema states).
    query = serializers.CharField(max_length=MAX_QUERY_CHARS, trim_whitespace=False)
    maxChars = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False,  # noqa: N815
                                        help_text="Defaults to the config's kb_max_chars.")
    topK = serializers.IntegerField(min_value=1, max_value=50, required=False,  # noqa: N815
                                    help_text="Defaults to the config's kb_top_k.")
    mode = serializers.ChoiceField(choices=MODES, default=DEFAULT_MODE, help_text="As in /api/kb/search.")


class ContextOutputSerializer(serializers.Serializer):
    context = serializers.CharField()


# --- views ------------------------------------------------------------------------------------------

class DocumentListView(GenericAPIView):
    serializer_class = DocumentSerializer
    parser_classes = [BoundedJSONParser, MultiPartParser]  # JSON text, or an uploaded file

    @extend_schema(responses={200: DocumentSerializer(many=True)})
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(document_list_for(owner_id=request.user.pk))
        return self.get_paginated_response(DocumentSerializer(page, many=True).data)

    @extend_schema(
        request={"application/json": DocumentTextSerializer, "multipart/form-data": DocumentUploadSerializer},
        responses={
            201: DocumentCreatedSerializer,
            400: OpenApiResponse(description="`invalid`, `empty_document` or `unreadable_document`; nothing stored."),
            413: OpenApiResponse(description="`payload_too_large` (the body), or `quota_exceeded`: the document does "
                                             "not fit in the caller's AGENTSITE_KB_QUOTA_MB (details: used_bytes, "
                                             "quota_bytes, size, as stored). Nothing stored."),
            507: OpenApiResponse(description="`insufficient_storage`: the data directory's disk has less than "
                                             "AGENTSITE_MIN_FREE_MB free. Nothing stored."),
            415: OpenApiResponse(description="`unsupported_media_type`: not text, Markdown, HTML or PDF."),
        },
        description="Add a document as JSON text, or upload a file (text, Markdown, HTML, PDF).",
    )
    def post(self, request: Request) -> Response:
        if request.content_type.startswith("multipart/"):
            upload = _valid(DocumentUploadSerializer, request.data)["file"]
            document = services.document_ingest_upload(owner_id=request.user.pk, filename=upload.name or "",
                                                        content_type=_declared_type(upload), data=upload.read())
        else:
            data = _valid(DocumentTextSerializer, request.data)
            document = services.document_ingest(owner_id=request.user.pk, filename=data["filename"],
                                                content=data["content"], content_type=data["content_type"])
        return Response(DocumentCreatedSerializer(document).data, status=status.HTTP_201_CREATED)


class DocumentDetailView(APIView):
    @extend_schema(responses={204: None, 404: OpenApiResponse(description="No such document of the caller's.")})
    def delete(self, request: Request, pk: uuid.UUID) -> Response:
        services.document_delete(owner_id=request.user.pk, document_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SearchModesSerializer(serializers.Serializer):
    modes = serializers.ListField(child=serializers.CharField(),
                                  help_text="The modes offered: `dense` only with the dense model installed and on.")
    default = serializers.CharField()


class SearchView(APIView):
    @extend_schema(responses={200: SearchModesSerializer})
    def get(self, request: Request) -> Response:
        """The search modes to offer (the Knowledge page's selector, the kb_search tool's enum), the default first."""
        return Response(SearchModesSerializer({"modes": offered_modes(), "default": DEFAULT_MODE}).data)

    @extend_schema(request=SearchInputSerializer, responses={200: SearchOutputSerializer})
    def post(self, request: Request) -> Response:
        data = _valid(SearchInputSerializer, request.data)
        hits = chunk_search(owner_id=request.user.pk, query=data["query"], top_k=data["topK"], mode=data["mode"])
        return Response(SearchOutputSerializer({"results": hits}).data)


class ContextView(APIView):
    @extend_schema(request=ContextInputSerializer, responses={200: ContextOutputSerializer})
    def post(self, request: Request) -> Response:
        data = _valid(ContextInputSerializer, request.data)
        settings = get_settings()
        context = context_build(owner_id=request.user.pk, query=data["query"],
                                max_chars=data.get("maxChars", settings.kb_max_chars),
                                top_k=data.get("topK", settings.kb_top_k), mode=data["mode"])
        return Response(ContextOutputSerializer({"context": context.text}).data)


class ClearView(APIView):
    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request) -> Response:
        services.documents_clear(owner_id=request.user.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _declared_type(upload: UploadedFile) -> str:
    charset = upload.charset
    if isinstance(charset, bytes):  # Django's multipart parser hands the parameter over undecoded
        charset = charset.decode("ascii", "replace")
    return f"{upload.content_type or ''}; charset={charset}" if charset else upload.content_type or ""



def _valid(serializer_class: type[serializers.Serializer], data) -> dict:
    if not hasattr(data, "get"):
        raise AppError("invalid", "Send a JSON object.", 400)
    return validated(serializer_class, data)
