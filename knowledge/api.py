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
from knowledge.models import NAME_MAX, Collection, Document
from knowledge.selectors import (
    DEFAULT_MODE,
    MAX_COLLECTIONS,
    MODES,
    chunk_search,
    collection_get_for,
    collection_list_for,
    collections_readable,
    context_build,
    document_list_for,
    offered_modes,
    roles_of,
    with_counts,
)
from organisation.policy import EDIT, MANAGE, USE, require

MAX_QUERY_CHARS = 32_000


# --- serializers ------------------------------------------------------------------------------------

class CollectionInSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=NAME_MAX, help_text="1-100 characters, unique among the owner's.")
    description = serializers.CharField(required=False, allow_blank=True, max_length=10_000, default="")


class CollectionPatchSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=NAME_MAX, required=False)
    description = serializers.CharField(required=False, allow_blank=True, max_length=10_000)


class CollectionOwnerSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()


class CollectionAccessSummarySerializer(serializers.Serializer):
    visibility = serializers.CharField()
    grants_count = serializers.IntegerField()


class CollectionSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    description = serializers.CharField()
    owner = CollectionOwnerSerializer()
    personal = serializers.BooleanField(help_text="The owner's personal collection (where documents go when no "
                                                  "collection is named).")
    documents = serializers.IntegerField(source="document_count")
    chunks = serializers.IntegerField(source="chunk_count")
    access = CollectionAccessSummarySerializer(source="*")
    role = serializers.CharField(help_text="The caller's role: owner (admins too), editor or viewer.")
    created_at = serializers.DateTimeField()


def _collection_out(collection: Collection, role: str) -> dict:
    collection.role = role
    return CollectionSerializer(collection).data


class CollectionRefSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="collection_id")
    name = serializers.CharField(source="collection_name")

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
    collection = serializers.UUIDField(required=False, help_text="Default: the caller's personal collection.")
    filename = serializers.CharField(max_length=255)
    # Blank passes here so that an empty document answers `empty_document`, as an empty upload does.
    content = serializers.CharField(allow_blank=True, trim_whitespace=False)
    content_type = serializers.CharField(max_length=100, required=False, allow_blank=True, default="text/plain")


class DocumentUploadSerializer(serializers.Serializer):
    file = serializers.FileField(allow_empty_file=True, help_text="Text, Markdown, HTML or PDF.")
    collection = serializers.UUIDField(required=False, help_text="Default: the caller's personal collection.")


class CollectionsField(serializers.ListField):
    child = serializers.UUIDField()

    def __init__(self, **kwargs) -> None:
        super().__init__(required=False, max_length=MAX_COLLECTIONS, allow_empty=False,
                         help_text=f"Collection ids to search (at most {MAX_COLLECTIONS}; each one the caller may "
                                   "read). Default: the caller's personal collection.", **kwargs)


class SearchInputSerializer(serializers.Serializer):
    # Not trimmed: the length checked is the length sent (a trimmed query passed a limit the schema states).
    query = serializers.CharField(max_length=MAX_QUERY_CHARS, trim_whitespace=False)
    topK = serializers.IntegerField(min_value=1, max_value=50, default=5)  # noqa: N815 - the wire name
    collections = CollectionsField()
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
    collection = CollectionRefSerializer(source="*")


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
    collections = CollectionsField()


class ContextOutputSerializer(serializers.Serializer):
    context = serializers.CharField()


# --- views ------------------------------------------------------------------------------------------

class CollectionListView(GenericAPIView):
    serializer_class = CollectionSerializer

    @extend_schema(responses={200: CollectionSerializer(many=True)})
    def get(self, request: Request) -> Response:
        """The collections the caller may read: owned, visible to everyone, granted (to them or a group of
        theirs); personal first, then by name."""
        page = self.paginate_queryset(collection_list_for(request.user))
        roles = roles_of(request.user, page)
        return self.get_paginated_response([_collection_out(collection, roles.get(collection.pk, "viewer"))
                                            for collection in page])

    @extend_schema(request=CollectionInSerializer,
                   responses={201: CollectionSerializer, 409: OpenApiResponse(description="`conflict`: the caller "
                                                                              "has a collection of that name.")})
    def post(self, request: Request) -> Response:
        data = _valid(CollectionInSerializer, request.data)
        collection = services.collection_create(owner_id=request.user.pk, name=data["name"],
                                                description=data["description"])
        return Response(_collection_out(_counted(collection), "owner"), status=status.HTTP_201_CREATED)


class CollectionDetailView(APIView):
    @extend_schema(responses={200: CollectionSerializer})
    def get(self, request: Request, pk: uuid.UUID) -> Response:
        collection = collection_get_for(request.user, pk)
        role = require(request.user, USE, collection)
        return Response(_collection_out(_counted(collection), role))

    @extend_schema(request=CollectionPatchSerializer, responses={200: CollectionSerializer})
    def patch(self, request: Request, pk: uuid.UUID) -> Response:
        collection = collection_get_for(request.user, pk)
        role = require(request.user, EDIT, collection)
        data = _valid(CollectionPatchSerializer, request.data)
        services.collection_update(collection, name=data.get("name"), description=data.get("description"))
        return Response(_collection_out(_counted(collection), role))

    @extend_schema(responses={204: None, 409: OpenApiResponse(description="`conflict`: a personal collection.")})
    def delete(self, request: Request, pk: uuid.UUID) -> Response:
        collection = collection_get_for(request.user, pk)
        require(request.user, MANAGE, collection)
        services.collection_delete(collection)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _counted(collection: Collection) -> Collection:
    return with_counts(Collection.objects.filter(pk=collection.pk)).get()


def _target_collection(request: Request, collection_id: uuid.UUID | None, action: str) -> Collection | None:
    """The collection a document call names, checked for `action`; None: the caller's personal collection."""
    if collection_id is None:
        return None
    collection = collection_get_for(request.user, collection_id)
    require(request.user, action, collection)
    return collection


class DocumentQuerySerializer(serializers.Serializer):
    collection = serializers.UUIDField(required=False, help_text="Default: the caller's personal collection.")


class DocumentListView(GenericAPIView):
    serializer_class = DocumentSerializer
    parser_classes = [BoundedJSONParser, MultiPartParser]  # JSON text, or an uploaded file

    @extend_schema(parameters=[DocumentQuerySerializer], responses={
        200: DocumentSerializer(many=True), 404: OpenApiResponse(description="No collection of that id the caller "
                                                                             "may read.")})
    def get(self, request: Request) -> Response:
        collection = _target_collection(request, _valid(DocumentQuerySerializer, request.query_params)
                                        .get("collection"), USE)
        documents = document_list_for(collection=collection, owner_id=request.user.pk)
        page = self.paginate_queryset(documents)
        return self.get_paginated_response(DocumentSerializer(page, many=True).data)

    @extend_schema(
        request={"application/json": DocumentTextSerializer, "multipart/form-data": DocumentUploadSerializer},
        responses={
            201: DocumentCreatedSerializer,
            400: OpenApiResponse(description="`invalid`, `empty_document` or `unreadable_document`; nothing stored."),
            404: OpenApiResponse(description="`not_found`: no collection of that id the caller may read."),
            413: OpenApiResponse(description="`payload_too_large` (the body), or `quota_exceeded`: the document does "
                                             "not fit in the collection owner's AGENTSITE_KB_QUOTA_MB (details: "
                                             "used_bytes, quota_bytes, size, as stored). Nothing stored."),
            507: OpenApiResponse(description="`insufficient_storage`: the data directory's disk has less than "
                                             "AGENTSITE_MIN_FREE_MB free. Nothing stored."),
            415: OpenApiResponse(description="`unsupported_media_type`: not text, Markdown, HTML or PDF."),
        },
        description="Add a document as JSON text, or upload a file (text, Markdown, HTML, PDF), to a collection "
                    "(default: the caller's personal one).",
    )
    def post(self, request: Request) -> Response:
        if request.content_type.startswith("multipart/"):
            data = _valid(DocumentUploadSerializer, request.data)
            collection = _target_collection(request, data.get("collection"), EDIT)
            upload = data["file"]
            document = services.document_ingest_upload(owner_id=request.user.pk, filename=upload.name or "",
                                                        content_type=_declared_type(upload), data=upload.read(),
                                                        collection=collection)
        else:
            data = _valid(DocumentTextSerializer, request.data)
            collection = _target_collection(request, data.get("collection"), EDIT)
            document = services.document_ingest(owner_id=request.user.pk, filename=data["filename"],
                                                content=data["content"], content_type=data["content_type"],
                                                collection=collection)
        return Response(DocumentCreatedSerializer(document).data, status=status.HTTP_201_CREATED)


class DocumentDetailView(APIView):
    @extend_schema(responses={204: None, 404: OpenApiResponse(description="No such document in a collection the "
                                                                          "caller may read (a viewer: 403).")})
    def delete(self, request: Request, pk: uuid.UUID) -> Response:
        document = Document.objects.filter(pk=pk).select_related("collection").only("id", "collection").first()
        if document is None:
            raise AppError("not_found", "No such document.", 404)
        try:
            require(request.user, EDIT, document.collection)
        except AppError as error:
            if error.status == 404:  # as a missing document: never tell an outsider it exists
                raise AppError("not_found", "No such document.", 404) from None
            raise
        services.document_delete(document_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SearchModesSerializer(serializers.Serializer):
    modes = serializers.ListField(child=serializers.CharField(),
                                  help_text="The modes offered: `dense` only with the dense model installed and on.")
    default = serializers.CharField()


_UNREADABLE = OpenApiResponse(description="`not_found`: a collection of `collections` the caller may not read (or "
                                          "none of that id), named in the message.")


def _searched(request: Request, data: dict) -> list[Collection] | None:
    ids = data.get("collections")
    return None if ids is None else collections_readable(request.user, ids)


class SearchView(APIView):
    @extend_schema(responses={200: SearchModesSerializer})
    def get(self, request: Request) -> Response:
        """The search modes to offer (the Knowledge page's selector, the kb_search tool's enum), the default first."""
        return Response(SearchModesSerializer({"modes": offered_modes(), "default": DEFAULT_MODE}).data)

    @extend_schema(request=SearchInputSerializer, responses={200: SearchOutputSerializer, 404: _UNREADABLE})
    def post(self, request: Request) -> Response:
        data = _valid(SearchInputSerializer, request.data)
        hits = chunk_search(owner_id=request.user.pk, query=data["query"], top_k=data["topK"], mode=data["mode"],
                            collections=_searched(request, data))
        return Response(SearchOutputSerializer({"results": hits}).data)


class ContextView(APIView):
    @extend_schema(request=ContextInputSerializer, responses={200: ContextOutputSerializer, 404: _UNREADABLE})
    def post(self, request: Request) -> Response:
        data = _valid(ContextInputSerializer, request.data)
        settings = get_settings()
        context = context_build(owner_id=request.user.pk, query=data["query"],
                                max_chars=data.get("maxChars", settings.kb_max_chars),
                                top_k=data.get("topK", settings.kb_top_k), mode=data["mode"],
                                collections=_searched(request, data))
        return Response(ContextOutputSerializer({"context": context.text}).data)


class ClearView(APIView):
    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request) -> Response:
        """Delete every document of the caller's personal collection (other collections: delete them, or their
        documents one by one)."""
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
