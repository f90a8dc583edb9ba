from django import forms
from django.contrib import admin

from accounts.models import AgentConfig, ApiKey


class AgentConfigForm(forms.ModelForm):
    # The key is write-only here too: the field starts empty, and leaving it empty keeps the stored key.
    api_key = forms.CharField(required=False, widget=forms.PasswordInput(render_value=False),
                              help_text="Leave empty to keep the stored key.")

    class Meta:
        model = AgentConfig
        fields = [
            "provider", "base_url", "api_key", "model", "system_prompt", "temperature", "max_tokens", "tools",
            "kb_enabled", "kb_top_k", "kb_max_chars", "stt_provider", "tts_provider", "tts_voice",
            "allow_registration", "compat_auth",
        ]

    def clean_api_key(self) -> str:
        value = self.cleaned_data.get("api_key") or ""
        return value or (self.instance.api_key if self.instance and self.instance.pk else "")


@admin.register(AgentConfig)
class AgentConfigAdmin(admin.ModelAdmin):
    form = AgentConfigForm
    list_display = ["__str__", "provider", "model", "updated_at"]

    def has_add_permission(self, request) -> bool:
        return not AgentConfig.objects.exists()

    def has_delete_permission(self, request, obj=None) -> bool:
        return False



@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Operators see and revoke keys here too (the secret is never stored; `hash` is its SHA-256). A save or a
    deletion stops the key at once in every process, as DELETE /api/keys/:id does."""

    list_display = ["name", "user", "prefix", "scopes", "created_at", "expires_at", "last_used_at", "revoked"]
    list_filter = ["revoked"]
    search_fields = ["name", "prefix", "user__username"]
    fields = ["user", "name", "prefix", "scopes", "created_at", "expires_at", "last_used_at", "revoked",
              "revoked_at", "budget"]
    readonly_fields = ["user", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]

    def has_add_permission(self, request) -> bool:
        return False  # a key is made through the API, which shows its secret once

    def save_model(self, request, obj, form, change) -> None:
        from django.utils import timezone

        if obj.revoked and obj.revoked_at is None:
            obj.revoked_at = timezone.now()
        super().save_model(request, obj, form, change)
