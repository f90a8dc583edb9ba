"""Django admin for the catalogue: the config singleton, connections (write-only keys and header values, masked
base URLs) and aliases, checked by the same rules as the API."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from agentsite.agent.providers import PROVIDERS
from agentsite.agent.providers.urls import credentials_problem, mask_url, unmask_url
from agentsite.agent.routing import STRATEGIES
from agentsite.core.errors import AppError
from catalogue.models import AgentConfig, Connection, ModelAlias
from catalogue.services import CONFIG_FIELDS, CONNECTION_CONFIG_FIELDS, alias_check


class AgentConfigForm(forms.ModelForm):
    class Meta:
        model = AgentConfig
        # The API's config fields, with the connection itself in place of its provider, base URL and key.
        fields = ["connection", *(name for name in CONFIG_FIELDS if name not in CONNECTION_CONFIG_FIELDS)]


@admin.register(AgentConfig)
class AgentConfigAdmin(admin.ModelAdmin):
    form = AgentConfigForm
    list_display = ["__str__", "connection", "model", "updated_at"]

    def has_add_permission(self, request) -> bool:
        return not AgentConfig.objects.exists()

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ConnectionForm(forms.ModelForm):
    # The key and the header values are write-only here too: the fields start empty, and leaving them empty keeps
    # what is stored.
    api_key = forms.CharField(required=False, widget=forms.PasswordInput(render_value=False),
                              help_text="Leave empty to keep the stored key.")
    provider = forms.ChoiceField(choices=lambda: [(name, name) for name in PROVIDERS])
    headers = forms.JSONField(required=False, widget=forms.Textarea(attrs={"rows": 3}),
                              help_text='Extra HTTP headers, {"Name": "value"}. Leave empty to keep the stored ones '
                                        '(their names are listed below).')

    class Meta:
        model = Connection
        fields = ["name", "provider", "base_url", "api_key", "models", "headers", "timeout_s", "enabled"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.initial["headers"] = None
        if self.instance and self.instance.pk:  # its credentials (a password, query values) shown as ***
            self.initial["base_url"] = mask_url(self.instance.base_url)

    def clean_base_url(self) -> str:
        value = self.cleaned_data.get("base_url") or ""
        stored = self.instance.base_url if self.instance and self.instance.pk else ""
        return unmask_url(value, stored)  # sent back as shown (***): the stored credentials

    def clean(self) -> dict:
        data = super().clean()
        problem = credentials_problem(data.get("provider") or "", data.get("base_url") or "", data.get("api_key") or "")
        if problem:
            self.add_error("base_url", problem)
        return data

    def clean_api_key(self) -> str:
        value = self.cleaned_data.get("api_key") or ""
        return value or (self.instance.api_key if self.instance and self.instance.pk else "")

    def clean_headers(self) -> dict:
        value = self.cleaned_data.get("headers")
        if not value:
            return dict(self.instance.headers or {}) if self.instance and self.instance.pk else {}
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise forms.ValidationError('Give an object of header names to string values: {"X-Key": "..."}.')
        return value


@admin.register(Connection)
class ConnectionAdmin(admin.ModelAdmin):
    form = ConnectionForm
    list_display = ["name", "provider", "shown_base_url", "enabled", "discovery_error"]
    readonly_fields = ["header_names", "discovered", "discovery_error", "discovered_at"]

    @admin.display(description="Base URL")
    def shown_base_url(self, obj: Connection) -> str:
        return mask_url(obj.base_url)

    @admin.display(description="Header names")
    def header_names(self, obj: Connection) -> str:
        return ", ".join(sorted(obj.headers or {})) or "-"


class ModelAliasForm(forms.ModelForm):
    strategy = forms.ChoiceField(choices=lambda: [(name, name) for name in STRATEGIES], initial="fallback")

    class Meta:
        model = ModelAlias
        fields = ["name", "strategy", "targets"]
        help_texts = {"targets": '[{"model": "<connection>/<model>", "weight": 1}, ...] in the order to try them.'}

    def clean(self) -> dict:
        data = super().clean()
        targets = data.get("targets")
        if not isinstance(targets, list) or not targets or not all(
                isinstance(target, dict) and isinstance(target.get("model"), str) for target in targets):
            raise forms.ValidationError({"targets": 'Give a list of {"model": "<connection>/<model>", "weight": 1}.'})
        try:
            alias_check(name=data.get("name") or "", strategy=data.get("strategy") or "fallback", targets=targets)
        except AppError as exc:
            raise forms.ValidationError(exc.message) from None
        return data


@admin.register(ModelAlias)
class ModelAliasAdmin(admin.ModelAdmin):
    form = ModelAliasForm
    list_display = ["name", "strategy"]
