"""The admin's view of the uploads store: read-only rows, a download link, and each uploader's space used."""

from django.contrib import admin
from django.db.models import Count, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html

from uploads import selectors, services
from uploads.api import upload_response
from uploads.models import Upload, UploadQuota


@admin.register(Upload)
class UploadAdmin(admin.ModelAdmin):
    """Read-only: what a file is was decided from its bytes at upload. Deleting removes the file too."""

    list_display = ["filename", "owner", "content_type", "size", "is_image", "created_at"]
    list_filter = ["is_image", "content_type", "created_at"]
    search_fields = ["filename", "owner__username", "sha256", "id"]
    list_select_related = ["owner"]
    readonly_fields = ["id", "owner", "filename", "content_type", "size", "sha256", "is_image", "stored_as",
                       "created_at", "download"]
    fields = readonly_fields

    def get_urls(self):
        download = self.admin_site.admin_view(self.download_view)
        return [path("<uuid:object_id>/download/", download, name="uploads_upload_download"), *super().get_urls()]

    def download_view(self, request: HttpRequest, object_id) -> HttpResponse:
        upload = get_object_or_404(Upload, pk=object_id)
        if not self.has_view_permission(request, upload):
            return HttpResponse(status=403)
        # Always an attachment here: the admin's origin holds a session, so nothing uploaded is shown inline.
        return upload_response(upload, selectors.upload_read(upload=upload), as_attachment=True)

    @admin.display(description="file")
    def download(self, upload: Upload) -> str:
        return format_html('<a href="{}">download</a>', reverse("admin:uploads_upload_download", args=[upload.pk]))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Upload | None = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: Upload) -> None:
        services.upload_delete(owner_id=obj.owner_id, upload_id=obj.pk)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Upload]) -> None:
        for owner_id, upload_id in queryset.values_list("owner_id", "id"):
            services.upload_delete(owner_id=owner_id, upload_id=upload_id)


@admin.register(UploadQuota)
class UploadQuotaAdmin(admin.ModelAdmin):
    """Each uploader's space used; the quota itself is the AGENTSITE_UPLOAD_QUOTA_MB setting."""

    list_display = ["owner", "uploads", "used_bytes"]
    search_fields = ["owner__username"]
    list_select_related = ["owner"]
    readonly_fields = ["owner", "uploads", "used_bytes"]
    fields = readonly_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[UploadQuota]:
        return super().get_queryset(request).annotate(upload_count=Count("owner__uploads"),
                                                      used=Sum("owner__uploads__size"))

    @admin.display(description="uploads", ordering="upload_count")
    def uploads(self, quota: UploadQuota) -> int:
        return quota.upload_count

    @admin.display(description="bytes used", ordering="used")
    def used_bytes(self, quota: UploadQuota) -> int:
        return quota.used or 0

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: UploadQuota | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: UploadQuota | None = None) -> bool:
        return False
