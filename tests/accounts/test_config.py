import pytest

from agentsite.agent.config import get_settings
from catalogue.models import AgentConfig
from catalogue.services import config_update

pytestmark = pytest.mark.django_db


def test_config_is_readable_by_any_user_and_hides_the_api_key(owner_client, admin_client):
    config_update(changes={"api_key": "sk-secret-value"})  # the config's connection's key
    response = owner_client.get("/api/config")
    assert response.status_code == 200
    body = response.json()
    assert "api_key" not in body and "api_key_set" not in body  # the connection's details: admins' only
    assert "sk-secret-value" not in response.content.decode()
    assert body["compat_auth"] == "local"
    assert body["allow_registration"] is True
    shown = admin_client.get("/api/config")
    assert (shown.json()["api_key_set"], shown.json()["provider"]) == (True, "offline")
    assert "sk-secret-value" not in shown.content.decode()


def test_admin_can_patch_and_put_config_fields(admin_client):
    response = admin_client.patch("/api/config", {"temperature": 1.5, "tools": ["web_fetch"]}, format="json")
    assert response.status_code == 200
    assert response.json()["temperature"] == 1.5
    response = admin_client.put("/api/config", {"provider": "anthropic", "api_key": "sk-ant"}, format="json")
    assert response.status_code == 200
    assert response.json()["provider"] == "anthropic"
    assert response.json()["api_key_set"] is True
    assert response.json()["tools"] == ["web_fetch"]
    assert AgentConfig.objects.get(pk=1).connection.api_key == "sk-ant"  # the config's connection holds it


def test_a_config_change_reaches_the_agent_runtime(admin_client):
    admin_client.patch("/api/config", {"model": "llama3", "max_tokens": 77}, format="json")
    settings = get_settings()
    assert settings.model == "llama3"
    assert settings.max_tokens == 77


def test_an_unknown_field_rejects_the_whole_update(admin_client):
    before = admin_client.get("/api/config").json()
    response = admin_client.patch("/api/config", {"temperature": 0.1, "secret_backdoor": 1}, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unknown_field"
    assert error["details"]["fields"] == ["secret_backdoor"]
    assert admin_client.get("/api/config").json() == before


@pytest.mark.parametrize("changes", [
    {"temperature": 2.5}, {"temperature": -0.1}, {"max_tokens": 0}, {"provider": "gpt"},
    {"stt_provider": "cloud"}, {"tts_provider": "x"}, {"compat_auth": "open"}, {"kb_top_k": 0},
    {"tools": "web_fetch"}, {"base_url": "not a url"}, {"allow_registration": "maybe"},
])
def test_invalid_config_values_are_rejected_and_nothing_changes(admin_client, changes):
    before = admin_client.get("/api/config").json()
    response = admin_client.patch("/api/config", changes, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert set(response.json()["error"]["details"]) == set(changes)
    assert admin_client.get("/api/config").json() == before


def test_a_non_admin_cannot_write_config(owner_client):
    response = owner_client.patch("/api/config", {"temperature": 1.0}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


def test_api_key_can_be_cleared(admin_client):
    admin_client.patch("/api/config", {"api_key": "sk-1"}, format="json")
    response = admin_client.patch("/api/config", {"api_key": ""}, format="json")
    assert response.json()["api_key_set"] is False


def test_first_run_config_takes_the_provider_key_from_the_environment(monkeypatch):
    from catalogue.services import config_create_default

    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    config = config_create_default()
    assert (config.connection.name, config.connection.provider, config.connection.api_key) == (
        "default", "openai", "sk-from-env")


@pytest.mark.django_db(transaction=True)
def test_the_first_config_made_by_many_at_once_is_made_once_and_every_one_gets_it():
    # A new server whose first 20 scheduled runs started together made the connection `default` twice: all but
    # one run failed on the unique name (found by tests/scheduler/test_e2e.py on PostgreSQL).
    import threading

    from django.db import connection as db_connection

    from catalogue.models import Connection
    from catalogue.services import config_create_default

    start, results, failures = threading.Barrier(8), [], []

    def make() -> None:
        try:
            start.wait()
            results.append(config_create_default().connection_id)
        except Exception as exc:  # noqa: BLE001 - the test reports what each thread met
            failures.append(repr(exc))
        finally:
            db_connection.close()

    threads = [threading.Thread(target=make) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert Connection.objects.filter(name="default").count() == 1 and AgentConfig.objects.count() == 1
    assert set(results) == {Connection.objects.get(name="default").pk}
