"""agentsite as an OAuth client of a remote MCP server, live: agentsite A (`serve`, several workers) connects
with `auth: "oauth"` to agentsite B's /mcp (B as the protected server, its own authorization server), the admin
consents at B (through B's consent API with B's admin token), A's callback completes, A lists B's tools and A's
agent calls one; an expired token is refreshed; B revokes the grant and A's server goes to
`needs_authorization`, its tools dropping out, until a reconnect."""

from __future__ import annotations

import sqlite3
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from tests.e2e import UPSTREAM_KEY, sse_events
from tests.fakes.llm import Call, Text, ToolCalls
from tests.mcpbridge.conftest import LIVE_ENV, Api
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

NAME = "remote"
TOOL = "kb_search"


@pytest.fixture(scope="module")
def b() -> LiveServer:
    server = LiveServer(env=LIVE_ENV).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def a(fake_openai_server) -> LiveServer:
    server = LiveServer(env=LIVE_ENV).start()
    api = Api(server.base_url, server.login()["token"])
    response = api.patch("/api/config", {"provider": "openai", "base_url": fake_openai_server.base_url,
                                         "api_key": UPSTREAM_KEY, "model": "fake-model"})
    assert response.status_code == 200, response.text
    yield server
    server.stop()


@pytest.fixture(scope="module")
def a_admin(a) -> Api:
    return Api(a.base_url, a.login()["token"])


@pytest.fixture(scope="module")
def b_admin(b) -> Api:
    return Api(b.base_url, b.login()["token"])


def sql(server: LiveServer, statement: str, params: tuple = ()) -> list[tuple]:
    """A statement on the server's own database (PostgreSQL or its data directory's SQLite)."""
    if server.database_url:
        import psycopg

        with psycopg.connect(server.database_url, autocommit=True) as conn:
            cursor = conn.execute(statement.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []
    with sqlite3.connect(server.data_dir / "db.sqlite3") as conn:
        return conn.execute(statement, params).fetchall()


def grant_row(a: LiveServer) -> tuple:
    rows = sql(a, "SELECT g.access_token, g.refresh_token, g.generation, g.status FROM mcpbridge_mcpserveroauth g "
                  "JOIN mcpbridge_mcpserver s ON s.id = g.server_id WHERE s.name = ?", (NAME,))
    assert len(rows) == 1, rows
    return rows[0]


def consent(b_admin: Api, authorization_url: str) -> str:
    """The admin allows at B what A asked; the redirect back to A's callback (with the code) is returned."""
    at_b = requests.get(authorization_url, allow_redirects=False, timeout=30)
    assert at_b.status_code == 302, at_b.text
    consent_id = at_b.headers["location"].rsplit("/", 1)[1]
    shown = b_admin.get(f"/api/oauth/consents/{consent_id}")
    assert shown.status_code == 200, shown.text
    assert shown.json()["client"]["name"] == "agentsite" and shown.json()["resource"] == f"{b_admin.base_url}/mcp"
    decided = b_admin.post(f"/api/oauth/consents/{consent_id}", {"allow": True})
    assert decided.status_code == 200, decided.text
    return decided.json()["redirect_to"]


def back_at_a(a: LiveServer, redirect_to: str) -> dict[str, list[str]]:
    """The browser back at A's callback: where A sends it (the dashboard's MCP page and its query)."""
    response = requests.get(redirect_to, allow_redirects=False, timeout=60)
    assert response.status_code == 302, f"{response.text}\n{a.log()[-5000:]}"
    location = response.headers["location"]
    assert location.startswith("/#/mcp?"), location
    return parse_qs(location.split("?", 1)[1])


def listed(a_admin: Api) -> dict:
    servers = a_admin.get("/api/mcp/servers").json()["servers"]
    return next(server for server in servers if server["name"] == NAME)


def tools_of_b(a_admin: Api) -> set[str]:
    return {item["tool"]["name"] for item in a_admin.get("/api/mcp/tools").json()["tools"] if item["server"] == NAME}


def b_client_id(b_admin: Api) -> str:
    apps = b_admin.get("/api/oauth/apps").json()["results"]
    assert [app["name"] for app in apps] == ["agentsite"], apps
    return apps[0]["client_id"]


def test_a_connects_to_b_with_oauth_uses_its_tools_refreshes_and_loses_them_when_b_revokes(a, b, a_admin, b_admin,
                                                                                           fake_openai):
    connected = a_admin.post("/api/mcp/connect", {"name": NAME, "url": f"{b.base_url}/mcp", "auth": "oauth"})
    assert connected.status_code == 202, connected.text
    body = connected.json()
    assert body["status"] == "needs_authorization" and body["server"]["status"] == "needs_authorization"
    assert body["server"]["auth"] == "oauth" and body["server"]["oauth"]["status"] == "needs_authorization"
    asked = parse_qs(urlsplit(body["authorization_url"]).query)
    assert body["authorization_url"].startswith(f"{b.base_url}/oauth/authorize?")
    assert asked["code_challenge_method"] == ["S256"] and asked["resource"] == [f"{b.base_url}/mcp"]
    assert asked["scope"] == ["mcp"] and asked["redirect_uri"] == [f"{a.base_url}/api/mcp/oauth/callback"]
    assert tools_of_b(a_admin) == set()

    redirect_to = consent(b_admin, body["authorization_url"])
    assert back_at_a(a, redirect_to) == {"connected": [NAME]}
    # The state is used once: the same callback again is refused, and the server stays connected.
    assert back_at_a(a, redirect_to) == {"oauth_error": ["invalid_state"]}

    server = listed(a_admin)
    assert (server["status"], server["auth"], server["oauth"]["status"]) == ("connected", "oauth", "authorized")
    assert server["oauth"]["scopes"] == ["mcp"] and server["oauth"]["expires_at"] and server["tools"] > 0
    access, refresh, generation, _status = grant_row(a)
    assert access and refresh and not access.startswith("asa-") and not refresh.startswith("asr-")  # sealed
    assert "asa-" not in str(a_admin.get("/api/mcp/servers").json())
    assert TOOL in tools_of_b(a_admin)

    # A's agent calls B's tool (the fake model asks for it).
    fake_openai.script(ToolCalls([Call(f"{NAME}__{TOOL}", {"query": "heron"}, id="call_b")]), Text("Found."))
    session = a_admin.post("/api/sessions", {"name": "remote"}).json()["id"]
    with requests.post(f"{a.base_url}/api/sessions/{session}/chat", json={"message": "Search B."},
                       headers=a_admin.headers, stream=True, timeout=90) as response:
        assert response.status_code == 200, response.text
        events = [(name, data) for name, data in sse_events(response) if name != "comment"]
    assert events[-1][0] == "done", events
    result = next(data for name, data in events if name == "tool_result")
    assert result["is_error"] is False, result
    assert f"{NAME}__{TOOL}" in {tool["function"]["name"] for tool in fake_openai.bodies()[0]["tools"]}

    # An access token about to end is refreshed before use (B rotates the refresh token too).
    sql(a, "UPDATE mcpbridge_mcpserveroauth SET expires_at = ? WHERE server_id = (SELECT id FROM "
           "mcpbridge_mcpserver WHERE name = ?)", ("2000-01-01 00:00:00+00:00", NAME))
    called = a_admin.post("/api/mcp/call", {"server": NAME, "tool": TOOL, "arguments": {"query": "heron"}})
    assert called.status_code == 200, called.text
    new_access, new_refresh, new_generation, status = grant_row(a)
    assert (new_generation, status) == (generation + 1, "authorized")
    assert new_access != access and new_refresh != refresh
    assert listed(a_admin)["oauth"]["expires_at"] > "2001"

    # B revokes the grant: A's next request meets a 401, its refresh is refused, and the server needs
    # authorization; its tools leave every listing.
    revoked = requests.delete(f"{b.base_url}/api/oauth/apps/{b_client_id(b_admin)}", headers=b_admin.headers,
                              timeout=30)
    assert revoked.status_code == 204, revoked.text
    refused = a_admin.post("/api/mcp/call", {"server": NAME, "tool": TOOL, "arguments": {"query": "heron"}})
    assert refused.status_code == 502, refused.text
    server = listed(a_admin)
    assert (server["status"], server["oauth"]["status"], server["tools"]) == (
        "needs_authorization", "needs_authorization", 0)
    assert tools_of_b(a_admin) == set()
    assert grant_row(a)[3] == "needs_authorization"

    # Reconnect: a new consent brings the tools back.
    again = a_admin.post(f"/api/mcp/servers/{NAME}/reconnect", {})
    assert again.status_code == 202, again.text
    assert back_at_a(a, consent(b_admin, again.json()["authorization_url"])) == {"connected": [NAME]}
    assert listed(a_admin)["status"] == "connected" and TOOL in tools_of_b(a_admin)

    # A refresh the authorization server refuses: the token ended, and B no longer knows the grant.
    requests.delete(f"{b.base_url}/api/oauth/apps/{b_client_id(b_admin)}", headers=b_admin.headers, timeout=30)
    sql(a, "UPDATE mcpbridge_mcpserveroauth SET expires_at = ? WHERE server_id = (SELECT id FROM "
           "mcpbridge_mcpserver WHERE name = ?)", ("2000-01-01 00:00:00+00:00", NAME))
    refused = a_admin.post("/api/mcp/call", {"server": NAME, "tool": TOOL, "arguments": {"query": "heron"}})
    assert refused.status_code == 502, refused.text
    assert listed(a_admin)["status"] == "needs_authorization" and tools_of_b(a_admin) == set()

    disconnected = a_admin.post("/api/mcp/disconnect", {"name": NAME})
    assert disconnected.status_code == 200, disconnected.text
