from django import forms
from django.contrib import admin

from accounts.models import AgentConfig


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

