"""The agent `default` (issue 45, item 3): the deployment's (no owner), visible to everyone, edited by admins
only, never deleted, renamed or handed over; /api/config's agent fields are its fields, both ways: a config save
is a version of it, and a PATCH of it shows in /api/config."""

from __future__ import annotations

import pytest

from agents_app.models import Agent, AgentVersion
from agents_app.services import default_ensure
from agentsite.agent import agents as runtime
from catalogue.models import AgentConfig
from tests.agents_app.conftest import error
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def default(db) -> Agent:
    return default_ensure()


def test_everyone_sees_it_without_an_owner_and_only_admins_hold_the_owner_role(default, owner_client, admin_client):
    for client, role in ((owner_client, "viewer"), (admin_client, "owner")):
        listed = {item["slug"]: item for item in client.get("/api/agents").json()["results"]}
        assert listed["default"]["owner"] is None and listed["default"]["access"] == {"visibility": "everyone",
                                                                                        "role": role}
        assert client.get(f"/api/agents/{default.pk}").json()["access"]["role"] == role


def test_a_user_may_not_change_delete_share_or_restore_it(default, owner_client, owner):
    pk = default.pk
    for method, path, body in (("patch", f"/api/agents/{pk}", {"instructions": "mine"}),
                               ("delete", f"/api/agents/{pk}", {}),
                               ("put", f"/api/agents/{pk}/access", {"visibility": "private"}),
                               ("post", f"/api/agents/{pk}/transfer", {"user": owner.pk}),
                               ("post", f"/api/agents/{pk}/versions/1/restore", {}),
                               ("get", f"/api/agents/{pk}/access", {})):
        response = getattr(owner_client, method)(path, body, format="json")
        assert error(response)[:2] == (403, "forbidden"), (method, path, response.content)
    assert owner_client.get(f"/api/agents/{pk}/versions").status_code == 200
    assert Agent.objects.get(pk=pk).instructions == default.instructions


def test_an_admin_edits_it_but_cannot_delete_rename_or_hand_it_over(default, admin_client, owner):
    pk = default.pk
    deleted = admin_client.delete(f"/api/agents/{pk}")
    assert error(deleted)[:2] == (409, "conflict"), deleted.content
    renamed = admin_client.patch(f"/api/agents/{pk}", {"slug": "mine"}, format="json")
    assert error(renamed)[:2] == (400, "invalid") and "slug" in error(renamed)[2]
    moved = admin_client.post(f"/api/agents/{pk}/transfer", {"user": owner.pk}, format="json")
    assert error(moved)[:2] == (409, "conflict"), moved.content
    same = admin_client.patch(f"/api/agents/{pk}", {"slug": "default", "name": "Deployment"}, format="json")
    assert same.status_code == 200 and same.json()["name"] == "Deployment"
    agent = Agent.objects.get(pk=pk)
    assert (agent.slug, agent.owner_id) == ("default", None)


def test_a_patch_of_it_shows_in_the_config_and_a_config_save_is_a_version_of_it(default, admin_client, local):
    before = default.version
    patched = admin_client.patch(f"/api/agents/{default.pk}", {
        "instructions": "Answer briefly.", "model": "fast", "temperature": 0.3, "max_tokens": 77,
        "tools": ["web_search"]}, format="json")
    assert patched.status_code == 200 and patched.json()["version"] == before + 1, patched.content
    config = admin_client.get("/api/config").json()
    assert (config["system_prompt"], config["model"], config["temperature"], config["max_tokens"],
            config["tools"]) == ("Answer briefly.", "fast", 0.3, 77, ["web_search"])
    assert AgentVersion.objects.filter(agent=default).count() == before + 1  # the mirror made no second version

    saved = admin_client.put("/api/config", {"system_prompt": "Be kind.", "temperature": 1.1, "max_tokens": 99,
                                             "tools": ["*"], "model": "local/big"}, format="json")
    assert saved.status_code == 200, saved.content
    agent = admin_client.get(f"/api/agents/{default.pk}").json()
    assert (agent["instructions"], agent["temperature"], agent["max_tokens"], agent["tools"], agent["model"],
            agent["version"]) == ("Be kind.", 1.1, 99, ["*"], "local/big", before + 2)
    latest = admin_client.get(f"/api/agents/{default.pk}/versions").json()["results"][0]
    assert (latest["number"], latest["note"], latest["author"]) == (before + 2, "config", None)
    # A config save that changes none of the agent's fields makes no version.
    assert admin_client.patch("/api/config", {"kb_top_k": 7}, format="json").status_code == 200
    assert admin_client.get(f"/api/agents/{default.pk}").json()["version"] == before + 2
    assert runtime.resolve_now(None, "agent").settings.system_prompt == "Be kind."


def test_a_patch_of_it_before_any_config_row_exists_is_not_overwritten_by_the_first_run_values(admin_client, local):
    AgentConfig.objects.all().delete()
    default = default_ensure()
    AgentConfig.objects.all().delete()  # a database the config row is missing from
    patched = admin_client.patch(f"/api/agents/{default.pk}", {"instructions": "Kept."}, format="json")
    assert patched.status_code == 200 and patched.json()["instructions"] == "Kept.", patched.content
    assert AgentConfig.objects.get(pk=1).system_prompt == "Kept."
    assert Agent.objects.get(pk=default.pk).instructions == "Kept."
    assert admin_client.get("/api/config").json()["system_prompt"] == "Kept."


def test_it_serves_anyone_the_door_lets_in_and_searches_the_callers_personal_collection(default, owner):
    for user in (owner, None):
        for name in ("agent", "agent:default"):
            resolved = runtime.resolve_now(user, name)
            assert (resolved.slug, resolved.owner_id) == ("default", None)
            settings = resolved.settings
            assert (settings.kb_personal, settings.knowledge, settings.knowledge_reader) == (True, (), None)
    assert "agent:default" in runtime.names_now(owner)


def test_an_admin_names_tools_with_an_admins_rights_and_collections_as_anyone(default, admin_client, owner):
    from knowledge import services as kb

    theirs = kb.collection_create(owner_id=owner.pk, name="private notes")
    # An admin acts on any collection by its id, but an agent hands its collections to whoever chats with it:
    # another user's private collection is not the admin's to give away.
    refused = admin_client.patch(f"/api/agents/{default.pk}", {"knowledge": [str(theirs.pk)]}, format="json")
    assert error(refused)[:2] == (400, "invalid") and "knowledge.0" in error(refused)[2]
    theirs.visibility = "everyone"
    theirs.save(update_fields=["visibility"])
    patched = admin_client.patch(f"/api/agents/{default.pk}", {"tools": ["web_search", "*"],
                                                               "knowledge": [str(theirs.pk)]}, format="json")
    assert patched.status_code == 200, patched.content
    refused = admin_client.patch(f"/api/agents/{default.pk}", {"tools": ["nope"]}, format="json")
    assert error(refused)[:2] == (400, "invalid") and "tools.0" in error(refused)[2]


def test_it_stays_everyones_though_grants_may_add_editors(default, admin_client, owner):
    for visibility in ("private", "shared"):
        refused = admin_client.put(f"/api/agents/{default.pk}/access", {"visibility": visibility, "grants": []},
                                   format="json")
        assert error(refused)[:2] == (400, "invalid") and "visibility" in error(refused)[2], visibility
    default.refresh_from_db()
    assert default.visibility == "everyone" and not default.grants.exists()
    granted = admin_client.put(f"/api/agents/{default.pk}/access", {
        "visibility": "everyone", "grants": [{"user": owner.pk, "role": "editor"}]}, format="json")
    assert granted.status_code == 200, granted.content
    assert client_for(owner).patch(f"/api/agents/{default.pk}", {"description": "edited"},
                                   format="json").status_code == 200
