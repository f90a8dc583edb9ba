"""A connection's provider and an alias's strategy are checked against their registries (the provider registry
in agentsite/agent/providers/__init__.py, the router's STRATEGIES), not against `choices` copied into the model:
a name the registry lacks is refused naming the field at every door (the model, the services, the admin form),
and a provider added to the registry is taken with no migration."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from agentsite.agent.providers import PROVIDERS, OfflineProvider
from agentsite.core.errors import AppError
from catalogue import services
from catalogue.admin import AgentConfigForm, ConnectionForm
from catalogue.models import Connection, ModelAlias

pytestmark = pytest.mark.django_db


def _form(provider: str) -> ConnectionForm:
    return ConnectionForm(data={"name": "gw", "provider": provider, "base_url": "", "api_key": "", "models": '["m"]',
                                "headers": "", "timeout_s": "30"})


def test_the_fields_carry_no_choices():
    assert Connection._meta.get_field("provider").choices is None
    assert ModelAlias._meta.get_field("strategy").choices is None


def test_a_provider_the_registry_lacks_is_refused_naming_the_field(monkeypatch):
    with pytest.raises(ValidationError) as raised:
        Connection(name="gw", provider="gemini").full_clean()
    assert list(raised.value.message_dict) == ["provider"] and "gemini" in raised.value.messages[0]
    for call in (lambda: services.connection_create(data={"name": "gw", "provider": "gemini"}),
                 lambda: services.config_update(changes={"provider": "gemini"})):
        with pytest.raises(AppError) as refused:
            call()
        assert refused.value.code == "invalid" and list(refused.value.details) == ["provider"]
        assert refused.value.message.startswith("provider:")
    assert not Connection.objects.filter(provider="gemini").exists()
    form = _form("gemini")
    assert not form.is_valid() and list(form.errors) == ["provider"]


def test_a_provider_added_to_the_registry_is_taken_without_a_migration(monkeypatch):
    monkeypatch.setitem(PROVIDERS, "echo", OfflineProvider)
    Connection(name="gw", provider="echo", models=["m"]).full_clean()
    assert _form("echo").is_valid(), _form("echo").errors
    made = services.connection_create(data={"name": "gw", "provider": "echo", "models": ["m"]})
    assert Connection.objects.get(pk=made.pk).provider == "echo"


def test_a_strategy_the_router_lacks_is_refused_naming_the_field():
    with pytest.raises(ValidationError) as raised:
        ModelAlias(name="fast", strategy="random", targets=[{"model": "gw/m"}]).full_clean()
    assert list(raised.value.message_dict) == ["strategy"]


def test_the_admin_edits_the_apis_config_fields_with_the_connection_in_place_of_its_own():
    assert AgentConfigForm._meta.fields == [
        "connection", "model", "system_prompt", "temperature", "max_tokens", "tools", "kb_enabled", "kb_top_k",
        "kb_max_chars", "stt_provider", "tts_provider", "tts_voice", "allow_registration", "compat_auth"]
