"""/api/connections, /api/aliases and /api/models: admin-only config, write-only secrets, discovery that never
500s, the catalogue /v1 lists, and /api/config still editing the default connection."""

from __future__ import annotations

import pytest

from catalogue.models import AgentConfig, Connection
from catalogue.selectors import config_cache_clear
from tests.fakes.llm import Error

pytestmark = pytest.mark.django_db(transaction=True)  # the catalogue cache is dropped on commit


def create(client, **body):
    data = {"name": "local", "provider": "openai", "base_url": "http://127.0.0.1:11434/v1", "models": ["llama3"]}
    data.update(body)
    return client.post("/api/connections", data, format="json")


def test_an_admin_creates_a_connection_whose_key_and_header_values_are_write_only(admin_client):
    response = create(admin_client, api_key="sk-very-secret", headers={"X-Gateway-Key": "gw-secret"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["api_key_set"] is True and body["header_names"] == ["X-Gateway-Key"]
    assert body["models"] == ["llama3"] and body["enabled"] is True and body["timeout_s"] == 120.0
    for shown in (response, admin_client.get("/api/connections"), admin_client.get(f"/api/connections/{body['id']}")):
        assert "sk-very-secret" not in shown.content.decode() and "gw-secret" not in shown.content.decode()
    stored = Connection.objects.get(name="local")
    assert stored.api_key == "sk-very-secret" and stored.headers == {"X-Gateway-Key": "gw-secret"}


def test_a_patch_of_headers_sets_and_removes_only_the_named_ones(admin_client):
    connection = create(admin_client, headers={"X-A": "1", "X-B": "2"}).json()
    response = admin_client.patch(f"/api/connections/{connection['id']}", {"headers": {"X-A": None, "X-C": "3"}},
                                  format="json")
    assert response.status_code == 200 and response.json()["header_names"] == ["X-B", "X-C"]


@pytest.mark.parametrize("body, field", [
    ({"name": "Has Space"}, "name"), ({"name": "UPPER"}, "name"), ({"provider": "gemini"}, "provider"),
    ({"models": "all"}, "models"), ({"models": [1, 2]}, "models"), ({"timeout_s": 0}, "timeout_s"),
    ({"headers": {"bad header": "x"}}, "headers"), ({"base_url": "not a url"}, "base_url"),
])
def test_bad_connection_fields_are_a_400_naming_the_field(admin_client, body, field):
    response = create(admin_client, **body)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid" and field in response.json()["error"]["details"]


def test_a_taken_name_is_a_409(admin_client):
    assert create(admin_client).status_code == 201
    response = create(admin_client)
    assert response.status_code == 409 and response.json()["error"]["code"] == "conflict"


def test_users_may_not_see_or_change_connections_but_may_list_models(owner_client, admin_client):
    assert create(admin_client).status_code == 201
    assert owner_client.get("/api/connections").status_code == 403
    assert create(owner_client, name="mine").status_code == 403
    assert owner_client.post("/api/aliases", {"name": "x", "targets": [{"model": "local/llama3"}]},
                             format="json").status_code == 403
    response = owner_client.get("/api/models")
    assert response.status_code == 200
    assert "local/llama3" in [entry["name"] for entry in response.json()["models"]]


def test_discovery_reads_the_upstream_list_and_a_failure_is_stored_not_raised(admin_client, fake_openai):
    fake_openai.models = ["m-one", "m-two"]
    response = create(admin_client, name="hosted", base_url=fake_openai.base_url, models="discover")
    assert response.status_code == 201
    body = response.json()
    assert body["models"] == "discover" and body["discovered"] == ["m-one", "m-two"] and body["discovery_error"] == ""
    names = [entry["name"] for entry in admin_client.get("/api/models").json()["models"]]
    assert {"hosted/m-one", "hosted/m-two"} <= set(names)

    fake_openai.models_error = Error(401, "Incorrect API key provided: sk-wrong.", "invalid_request_error")
    response = admin_client.post(f"/api/connections/{body['id']}/discover")
    assert response.status_code == 200
    assert "Incorrect API key provided" in response.json()["discovery_error"]
    assert response.json()["discovered"] == ["m-one", "m-two"]  # the last good list stays

    dead = create(admin_client, name="dead", base_url="http://127.0.0.1:9/v1", models="discover").json()
    assert "could not connect" in dead["discovery_error"] and dead["discovered"] == []


def test_aliases_are_validated_against_the_catalogue(admin_client):
    create(admin_client)
    create(admin_client, name="other", models=["big"])
    ok = admin_client.post("/api/aliases", {"name": "smart", "strategy": "fallback",
                                            "targets": [{"model": "other/big"}, {"model": "local/llama3"}]},
                           format="json")
    assert ok.status_code == 201, ok.content
    assert ok.json()["targets"] == [{"model": "other/big", "weight": 1.0}, {"model": "local/llama3", "weight": 1.0}]
    for body, field in [({"name": "bad", "targets": [{"model": "local/nope"}]}, "targets[0].model"),
                        ({"name": "bad", "targets": [{"model": "llama3"}]}, "targets[0].model"),
                        ({"name": "agent", "targets": [{"model": "local/llama3"}]}, "name"),
                        ({"name": "a/b", "targets": [{"model": "local/llama3"}]}, "name"),
                        ({"name": "bad", "strategy": "random", "targets": [{"model": "local/llama3"}]}, "strategy"),
                        ({"name": "bad", "targets": []}, "targets")]:
        response = admin_client.post("/api/aliases", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert field in response.json()["error"]["details"], (body, response.json())
    assert admin_client.post("/api/aliases", {"name": "smart", "targets": [{"model": "local/llama3"}]},
                             format="json").status_code == 409
    alias_id = ok.json()["id"]
    patched = admin_client.patch(f"/api/aliases/{alias_id}", {"strategy": "balance"}, format="json")
    assert patched.status_code == 200 and patched.json()["strategy"] == "balance"
    assert admin_client.delete(f"/api/aliases/{alias_id}").status_code == 204
    assert admin_client.get(f"/api/aliases/{alias_id}").status_code == 404


def test_v1_models_lists_aliases_and_entries_and_drops_a_disabled_connections(admin_client, anon_client):
    local = create(admin_client).json()
    admin_client.post("/api/aliases", {"name": "smart", "targets": [{"model": "local/llama3"}]}, format="json")
    ids = [model["id"] for model in anon_client.get("/v1/models").json()["data"]]
    assert ids[0] == "smart" and "local/llama3" in ids and ids[-3:] == ["agent", "agent:default", "hash-256"]
    assert admin_client.patch(f"/api/connections/{local['id']}", {"enabled": False}, format="json").status_code == 200
    ids = [model["id"] for model in anon_client.get("/v1/models").json()["data"]]
    assert "local/llama3" not in ids
    states = {entry["name"]: entry["state"] for entry in admin_client.get("/api/models").json()["models"]}
    assert states["smart"] == "no_target"


def test_patch_config_keeps_editing_the_default_connection(admin_client):
    response = admin_client.patch("/api/config", {"provider": "openai", "base_url": "http://127.0.0.1:8000/v1",
                                                  "api_key": "sk-x", "model": "fake-model"}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["provider"], body["base_url"], body["api_key_set"], body["model"]) == (
        "openai", "http://127.0.0.1:8000/v1", True, "fake-model")
    config = AgentConfig.objects.select_related("connection").get(pk=1)
    assert config.connection.name == "default" and config.connection.models == ["fake-model"]
    assert (config.connection.provider, config.connection.api_key) == ("openai", "sk-x")
    # Another bare model replaces the old one in the connection's list; a qualified unknown one is refused.
    admin_client.patch("/api/config", {"model": "other-model"}, format="json")
    config.connection.refresh_from_db()
    assert config.connection.models == ["other-model"]
    response = admin_client.patch("/api/config", {"model": "ghost/model"}, format="json")
    assert response.status_code == 400 and "model" in response.json()["error"]["details"]


def test_the_catalogue_is_cached_and_a_change_drops_it(admin_client, django_assert_num_queries):
    from agentsite.agent.config import get_settings
    from agentsite.agent.routing import resolve

    create(admin_client)
    config_cache_clear()
    get_settings()
    with django_assert_num_queries(0):
        for _ in range(10):
            resolve("local/llama3", get_settings())
    create(admin_client, name="second", models=["m"])  # committed: the cache is dropped, the new one resolves
    assert resolve("second/m").targets[0].connection.name == "second"


def test_a_changed_or_recreated_connection_starts_without_the_old_cool_down(admin_client):
    """The router's cool-downs are keyed by entry name: a connection fixed, or deleted and made anew under the
    same name, is tried at once instead of after what is left of the old one's cool-down."""
    from agentsite.agent import routing

    router = routing.reset_router(cooldown_s=300)
    try:
        connection = create(admin_client).json()
        router._cool_until["local/llama3"] = router.clock() + 300  # as _failed() leaves it
        router._cool_until["other/llama3"] = router.clock() + 300
        assert router.cooling("local/llama3")
        response = admin_client.patch(f"/api/connections/{connection['id']}", {"base_url": "http://127.0.0.1:9/v1"},
                                      format="json")
        assert response.status_code == 200
        assert not router.cooling("local/llama3") and router.cooling("other/llama3")
        router._cool_until["local/llama3"] = router.clock() + 300
        assert admin_client.delete(f"/api/connections/{connection['id']}").status_code == 204
        assert not router.cooling("local/llama3")
    finally:
        routing.reset_router()


def test_an_aliases_fallback_on_takes_upstream_4xx_statuses_and_reaches_the_router(admin_client):
    from agentsite.agent.routing import resolve

    create(admin_client)
    made = admin_client.post("/api/aliases", {"name": "roomy", "targets": [{"model": "local/llama3"}],
                                              "fallback_on": [400, 413]}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["fallback_on"] == [400, 413]
    assert resolve("roomy").fallback_on == frozenset({400, 413})
    plain = admin_client.post("/api/aliases", {"name": "plain", "targets": [{"model": "local/llama3"}]}, format="json")
    assert plain.json()["fallback_on"] == [] and resolve("plain").fallback_on == frozenset()
    for statuses in ([399], [500], ["x"], 400):
        response = admin_client.post("/api/aliases", {"name": "bad", "targets": [{"model": "local/llama3"}],
                                                      "fallback_on": statuses}, format="json")
        assert response.status_code == 400, (statuses, response.content)
        assert any(key.startswith("fallback_on") for key in response.json()["error"]["details"]), response.json()
