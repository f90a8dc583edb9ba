from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from knowledge import services
from knowledge.models import Chunk, Collection, Document


class ChunkInline(admin.TabularInline):
    model = Chunk
    fields = ["index", "text"]
    readonly_fields = ["index", "text"]
    extra = 0
    can_delete = False
    show_change_link = True
    max_num = 0


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    """Read-only: chunks and vectors are made at ingest, so an edited document would no longer match them."""

    list_display = ["filename", "collection", "owner", "content_type", "size", "stored_bytes", "chunk_count",
                    "created_at"]
    list_filter = ["content_type", "created_at"]
    search_fields = ["filename", "owner__username", "collection__name"]
    list_select_related = ["owner", "collection"]
    readonly_fields = ["id", "collection", "owner", "filename", "content_type", "size", "stored_bytes", "chunk_count",
                       "created_at", "content"]
    fields = readonly_fields
    inlines = [ChunkInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Document]:
        return super().get_queryset(request).annotate(chunk_count=Count("chunks"))

    @admin.display(description="chunks", ordering="chunk_count")
    def chunk_count(self, document: Document) -> int:
        return document.chunk_count

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Document | None = None) -> bool:
        return False

    def get_deleted_objects(self, objs, request: HttpRequest):
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        # Chunks cannot be deleted on their own, but they do go with their document.
        return deleted, counts, perms_needed - {Chunk._meta.verbose_name}, protected

    # Deleting goes through the service so that every process's search matrix learns of it.
    def delete_model(self, request: HttpRequest, obj: Document) -> None:
        services.document_delete(document_id=obj.pk)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        for document_id in queryset.values_list("id", flat=True):
            services.document_delete(document_id=document_id)


@admin.register(Collection)
class CollectionAdmin(admin.ModelAdmin):
    """Names and descriptions only; sharing and handing over go through /api/kb/collections/:id/access and
    /transfer (audited), deleting through the service (every process's matrices learn of it)."""

    list_display = ["name", "owner", "personal", "visibility", "key", "created_at"]
    list_filter = ["personal", "visibility"]
    search_fields = ["name", "owner__username"]
    list_select_related = ["owner"]
    readonly_fields = ["id", "owner", "personal", "visibility", "key", "created_at"]
    fields = ["id", "name", "description", "owner", "personal", "visibility", "key", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: Collection) -> None:
        services.collection_delete(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Collection]) -> None:
        for collection in queryset:
            services.collection_delete(collection)


@admin.register(Chunk)
class ChunkAdmin(admin.ModelAdmin):
    """Read-only; a chunk goes away with its document."""

    list_display = ["document", "index", "preview"]
    list_select_related = ["document"]
    search_fields = ["text", "document__filename"]
    readonly_fields = ["document", "index", "text"]
    fields = readonly_fields

    @admin.display(description="text")
    def preview(self, chunk: Chunk) -> str:
        return chunk.text[:80]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Chunk | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Chunk | None = None) -> bool:
        return False
