"""An MCP server's access rule is the organisation's (issue 44, item 2), over GET/PUT /api/mcp/servers/<name>/access
and the older PATCH /api/mcp/servers/<name>: who sees the server in the stored listing and may use it, grants to
groups, viewer grants only, and a membership's removal counting from the next request. No server is connected
here (no listing through /api/mcp/servers, which connects): what a caller may use is decided from the stored rows
(tests/mcpbridge/test_group_access.py runs the listing and the tools end to end)."""

from __future__ import annotations

import pytest

from accounts.models import AuditEvent
from agentsite.agent.tools import ToolContext
from mcpbridge.models import McpServer, McpServerGrant
from mcpbridge.selectors import mcp_server_usable, mcp_servers_visible_to
from organisation.models import Group, Membership
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def org(django_user_model, admin):
    member = django_user_model.objects.create_user("member", password="x-correct-horse-1")
    outsider = django_user_model.objects.create_user("outsider", password="x-correct-horse-1")
    group = Group.objects.create(name="support")
    Membership.objects.create(group=group, user=member)
    server = McpServer.objects.create(name="vault", transport="stdio", command="vault-server")
    return {"admin": admin, "member": member, "outsider": outsider, "group": group, "server": server}


def visible(user, *, admin: bool = False) -> list[str]:
    return [server.name for server in mcp_servers_visible_to(ToolContext(user_id=user.pk, is_admin=admin))]


def usable(user, name: str = "vault", *, admin: bool = False) -> bool:
    return mcp_server_usable(ToolContext(user_id=user.pk, is_admin=admin), name) is not None


def share_with_group(org, role: str = "viewer"):
    return client_for(org["admin"]).put("/api/mcp/servers/vault/access", {
        "visibility": "shared", "grants": [{"group": org["group"].pk, "role": role}]}, format="json")


def test_a_new_server_is_private_to_the_admins(org):
    assert org["server"].visibility == "private" and org["server"].owner_id is None
    assert visible(org["admin"], admin=True) == ["vault"] and usable(org["admin"], admin=True)
    for user in (org["member"], org["outsider"]):
        assert visible(user) == [] and not usable(user)


def test_a_group_granted_viewer_lets_its_members_in_and_no_one_else(org):
    response = share_with_group(org)

    assert response.status_code == 200, response.content
    assert response.json() == {"visibility": "shared", "grants": [
        {"group": org["group"].pk, "name": "support", "role": "viewer"}]}
    assert visible(org["member"]) == ["vault"] and usable(org["member"])
    assert visible(org["outsider"]) == [] and not usable(org["outsider"])
    assert not usable(org["member"], "no-vault")


def test_removal_from_the_group_counts_from_the_next_request(org):
    assert share_with_group(org).status_code == 200
    assert visible(org["member"]) == ["vault"]

    Membership.objects.filter(user=org["member"]).delete()

    assert visible(org["member"]) == [] and not usable(org["member"])


def test_an_editor_grant_is_refused_naming_the_role_a_server_takes(org):
    response = share_with_group(org, role="editor")

    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid"
    assert "viewer only" in response.json()["error"]["message"]
    assert "grants.0.role" in response.json()["error"]["details"]
    assert McpServer.objects.get(name="vault").visibility == "private" and not McpServerGrant.objects.exists()


def test_the_rule_is_read_by_admins_a_viewer_is_refused_and_an_outsider_finds_nothing(org):
    assert share_with_group(org).status_code == 200
    assert client_for(org["admin"]).get("/api/mcp/servers/vault/access").json()["visibility"] == "shared"
    as_member = client_for(org["member"]).get("/api/mcp/servers/vault/access")
    assert as_member.status_code == 403 and as_member.json()["error"]["code"] == "forbidden"
    for response in (client_for(org["outsider"]).get("/api/mcp/servers/vault/access"),
                     client_for(org["admin"]).get("/api/mcp/servers/no-vault/access")):
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    changed = client_for(org["member"]).put("/api/mcp/servers/vault/access", {"visibility": "everyone"},
                                            format="json")
    assert changed.status_code == 403
    # A server has no owner but the deployment: nothing to hand over.
    assert client_for(org["admin"]).post("/api/mcp/servers/vault/transfer", {"user": org["member"].pk},
                                         format="json").status_code == 404


def test_an_admins_key_without_the_admin_scope_sees_only_what_is_shared_with_them(org):
    assert visible(org["admin"], admin=False) == [] and not usable(org["admin"], admin=False)
    McpServer.objects.filter(name="vault").update(visibility="everyone")
    assert visible(org["admin"], admin=False) == ["vault"] and visible(org["outsider"]) == ["vault"]


def test_a_caller_with_no_user_or_an_inactive_user_sees_no_server(org):
    McpServer.objects.filter(name="vault").update(visibility="everyone")
    assert list(mcp_servers_visible_to(ToolContext(user_id=None, is_admin=False))) == []
    org["outsider"].is_active = False
    org["outsider"].save()
    assert visible(org["outsider"]) == [] and not usable(org["outsider"])


@pytest.mark.parametrize(("body", "visibility", "users"), [
    ({"visibility": "users", "users": ["member"]}, "shared", ["member"]),
    ({"visibility": "shared", "users": ["member", "outsider"]}, "shared", ["member", "outsider"]),
    ({"visibility": "everyone"}, "everyone", []),
    ({"visibility": "admins"}, "private", []),
    ({"visibility": "private"}, "private", []),
])
def test_the_older_patch_maps_its_values_onto_the_rule_and_is_audited(org, body, visibility, users):
    McpServerGrant.objects.create(resource=org["server"], group=org["group"], role="viewer")

    response = client_for(org["admin"]).patch("/api/mcp/servers/vault", body, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["visibility"] == visibility
    assert [grant["name"] for grant in response.json()["grants"]] == users  # the whole rule: the group's went
    assert all(grant["role"] == "viewer" for grant in response.json()["grants"])
    event = AuditEvent.objects.get(action="access.change")
    assert event.target == f"mcp_server:{org['server'].pk}"
    assert event.details["after"]["visibility"] == visibility


@pytest.mark.parametrize(("body", "field"), [({"visibility": "users"}, "users"),
                                              ({"visibility": "everyone", "users": ["member"]}, "users"),
                                              ({"visibility": "shared", "users": ["nobody"]}, "users"),
                                              ({"visibility": "friends"}, "visibility")])
def test_an_older_patch_that_makes_no_sense_answers_400_naming_the_field(org, body, field):
    response = client_for(org["admin"]).patch("/api/mcp/servers/vault", body, format="json")
    assert response.status_code == 400 and field in response.json()["error"]["details"]
    assert McpServer.objects.get(name="vault").visibility == "private"
