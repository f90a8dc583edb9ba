"""/api/a2a/remotes: registering a remote A2A agent (its card fetched through the address guard and read with the
SDK's types), its errors field by field, header values that are sent but never shown, refresh, delete, and who
may see what (admins, a granted viewer, an outsider)."""

from __future__ import annotations

import pytest

from a2a_app.cards import MAX_CARD_BYTES
from a2a_app.models import A2ARemote
from accounts.models import AuditEvent
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

SECRET = "Bearer remote-s3cret-9f2c"


def register(client, url: str, name: str = "echo", **extra):
    return client.post("/api/a2a/remotes", {"name": name, "url": url, **extra}, format="json")


def error_of(response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def test_an_admin_registers_a_remote_by_its_base_url_and_the_card_is_fetched(admin_client, echo_agent,
                                                                             loopback_allowed):
    response = register(admin_client, echo_agent.base_url, headers={"Authorization": SECRET})
    assert response.status_code == 201, response.content
    body = response.json()
    assert {key: body[key] for key in ("name", "tool", "url", "description", "version", "streaming")} == {
        "name": "echo", "tool": "a2a_echo", "url": echo_agent.base_url, "description": "Echoes what it is sent.",
        "version": "1.2.3", "streaming": False}
    assert body["skills"] == [{"id": "echo", "name": "Echo", "description": "Says it back.", "tags": ["test", "echo"]}]
    assert (body["visibility"], body["grants"], body["header_names"]) == ("private", [], ["Authorization"])
    assert SECRET not in response.content.decode()
    # The card was read at the well-known path, with the remote's headers.
    [seen] = echo_agent.headers
    assert seen["authorization"] == SECRET
    stored = A2ARemote.objects.get(name="echo")
    assert SECRET not in str(stored.headers) and stored.card["name"] == "Echo agent"
    assert AuditEvent.objects.filter(action="a2a_remote.create", outcome="success").count() == 1


def test_a_card_url_is_read_as_it_is(admin_client, streaming_agent, loopback_allowed):
    response = register(admin_client, streaming_agent.card_url, name="streamer")
    assert response.status_code == 201, response.content
    assert response.json()["streaming"] is True


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "", "url": "http://127.0.0.1:1/"}, "name"),
    ({"name": "-dash", "url": "http://127.0.0.1:1/"}, "name"),
    ({"name": "x" * 49, "url": "http://127.0.0.1:1/"}, "name"),
    ({"name": "ok", "url": "ftp://127.0.0.1/card.json"}, "url"),
    ({"name": "ok", "url": "not a url"}, "url"),
    ({"name": "ok", "url": "http://127.0.0.1:1/", "headers": {"Bad Name": "v"}}, "headers.Bad Name"),
    ({"name": "ok", "url": "http://127.0.0.1:1/", "headers": {"Host": "evil"}}, "headers.Host"),
    ({"name": "ok", "url": "http://127.0.0.1:1/", "headers": {"X-Key": "a\r\nb"}}, "headers.X-Key"),
    ({"name": "ok", "url": "http://127.0.0.1:1/", "access": {"visibility": "world"}}, "access.visibility"),
])
def test_bad_input_is_refused_naming_the_field(admin_client, loopback_allowed, body, field):
    response = admin_client.post("/api/a2a/remotes", body, format="json")
    assert error_of(response) == (400, "invalid")
    assert field in response.json()["error"]["details"], response.json()
    assert not A2ARemote.objects.exists()


def test_a_name_of_48_characters_is_taken_and_a_taken_name_is_a_conflict(admin_client, echo_agent, loopback_allowed):
    assert register(admin_client, echo_agent.base_url, name="n" * 48).status_code == 201
    assert error_of(register(admin_client, echo_agent.base_url, name="n" * 48)) == (409, "conflict")


def test_a_private_address_is_refused_by_the_guard_unless_the_setting_allows_it(admin_client, echo_agent):
    response = register(admin_client, echo_agent.base_url)
    assert error_of(response) == (400, "invalid") and "url" in response.json()["error"]["details"]
    assert "AGENTSITE_ALLOW_PRIVATE_FETCH" in response.json()["error"]["message"]
    assert echo_agent.headers == [] and not A2ARemote.objects.exists()


def test_an_unreachable_remote_is_a_502_and_nothing_is_stored(admin_client, echo_agent, loopback_allowed):
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    assert error_of(register(admin_client, f"http://127.0.0.1:{closed}/")) == (502, "remote_unreachable")
    assert error_of(register(admin_client, f"{echo_agent.base_url}/gone.json")) == (502, "remote_unreachable")
    assert not A2ARemote.objects.exists()
    assert AuditEvent.objects.filter(action="a2a_remote.create", outcome="failure").count() == 2


@pytest.mark.parametrize("path", ["/not-a-card.json", "/broken.json"])
def test_what_is_not_an_agent_card_is_card_invalid(admin_client, echo_agent, loopback_allowed, path):
    assert error_of(register(admin_client, echo_agent.base_url + path)) == (422, "card_invalid")


def test_a_card_larger_than_the_cap_is_not_read(admin_client, echo_agent, loopback_allowed):
    assert len(b"[" + b"0," * 600_000 + b"0]") > MAX_CARD_BYTES
    assert error_of(register(admin_client, echo_agent.base_url + "/huge.json")) == (502, "remote_unreachable")


def test_a_non_admin_may_not_register_refresh_or_delete(owner_client, admin_client, echo_agent, loopback_allowed):
    assert error_of(register(owner_client, echo_agent.base_url)) == (403, "forbidden")
    remote_id = register(admin_client, echo_agent.base_url).json()["id"]
    # A remote the caller may not see does not exist for them (the organisation's rule) ...
    assert error_of(owner_client.post(f"/api/a2a/remotes/{remote_id}/refresh")) == (404, "not_found")
    assert error_of(owner_client.delete(f"/api/a2a/remotes/{remote_id}")) == (404, "not_found")
    # ... and one they may use is not theirs to change.
    everyone = {"visibility": "everyone", "grants": []}
    assert admin_client.put(f"/api/a2a/remotes/{remote_id}/access", everyone, format="json").status_code == 200
    assert error_of(owner_client.post(f"/api/a2a/remotes/{remote_id}/refresh")) == (403, "forbidden")
    assert error_of(owner_client.delete(f"/api/a2a/remotes/{remote_id}")) == (403, "forbidden")
    assert A2ARemote.objects.filter(pk=remote_id).exists()


def test_refresh_fetches_the_card_again_and_delete_removes_the_remote(admin_client, echo_agent, loopback_allowed):
    remote_id = register(admin_client, echo_agent.base_url, headers={"X-Key": "k-1"}).json()["id"]
    A2ARemote.objects.filter(pk=remote_id).update(card={**A2ARemote.objects.get(pk=remote_id).card, "version": "0"})
    refreshed = admin_client.post(f"/api/a2a/remotes/{remote_id}/refresh")
    assert refreshed.status_code == 200 and refreshed.json()["version"] == "1.2.3"
    assert [seen["x-key"] for seen in echo_agent.headers] == ["k-1", "k-1"]
    assert AuditEvent.objects.filter(action="a2a_remote.refresh", outcome="success").count() == 1
    assert admin_client.delete(f"/api/a2a/remotes/{remote_id}").status_code == 204
    assert error_of(admin_client.get(f"/api/a2a/remotes/{remote_id}")) == (404, "not_found")
    assert AuditEvent.objects.filter(action="a2a_remote.delete").count() == 1


def test_who_sees_a_remote_follows_its_access_rule(admin_client, owner, other_user, echo_agent, loopback_allowed):
    shared = register(admin_client, echo_agent.base_url, name="shared", headers={"X-Key": "k"},
                      access={"visibility": "shared", "grants": [{"user": owner.pk, "role": "viewer"}]})
    assert shared.status_code == 201, shared.content
    private_id = register(admin_client, echo_agent.base_url, name="private").json()["id"]
    viewer, outsider = client_for(owner), client_for(other_user)

    listed = viewer.get("/api/a2a/remotes").json()["remotes"]
    assert [remote["name"] for remote in listed] == ["shared"]
    assert not {"visibility", "grants", "header_names"} & set(listed[0])  # admins only
    assert viewer.get(f"/api/a2a/remotes/{shared.json()['id']}").status_code == 200
    assert error_of(viewer.get(f"/api/a2a/remotes/{private_id}")) == (404, "not_found")
    assert outsider.get("/api/a2a/remotes").json() == {"remotes": []}
    assert error_of(outsider.get(f"/api/a2a/remotes/{shared.json()['id']}")) == (404, "not_found")
    assert [remote["name"] for remote in admin_client.get("/api/a2a/remotes").json()["remotes"]] == [
        "private", "shared"]


@pytest.mark.parametrize(("url", "card"), [
    ("https://a.example/agents/x", "https://a.example/agents/x/.well-known/agent-card.json"),
    ("https://a.example/agents/x/", "https://a.example/agents/x/.well-known/agent-card.json"),
    ("https://a.example", "https://a.example/.well-known/agent-card.json"),
    ("https://a.example/?tenant=1", "https://a.example/.well-known/agent-card.json?tenant=1"),
    ("https://a.example/x?tenant=1#top", "https://a.example/x/.well-known/agent-card.json?tenant=1"),
    ("https://a.example/card.json?v=2", "https://a.example/card.json?v=2"),
    ("https://a.example/card.json#top", "https://a.example/card.json"),
])
def test_the_card_is_read_under_a_base_urls_path_with_its_query_kept(url, card):
    from a2a_app.cards import card_url_for

    assert card_url_for(url) == card
