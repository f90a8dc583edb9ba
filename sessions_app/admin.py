from django.contrib import admin

from sessions_app.models import ChatMessage, ChatSession


class ChatMessageInline(admin.TabularInline):
    model = ChatMessage
    fields = ["seq", "role", "status", "content", "created_at"]
    readonly_fields = ["seq", "role", "status", "content", "created_at"]
    extra = 0
    can_delete = False


@admin.register(ChatSession)
class ChatSessionAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "model", "created_at", "updated_at"]
    list_filter = ["owner"]
    search_fields = ["name", "owner__username"]
    inlines = [ChatMessageInline]


@admin.register(ChatMessage)
class ChatMessageAdmin(admin.ModelAdmin):
    list_display = ["session", "seq", "role", "status", "created_at"]
    list_filter = ["role", "status"]
    search_fields = ["content"]
    readonly_fields = ["created_at"]
