"""The audited admin actions test_audit.py leaves out: alias.create/update/delete, mcp.connect (success and
failure), mcp.disconnect, plugin.load, plugin.error and plugin.reload each leave one row with the actor, the
target, and details that hold no secret."""

from __future__ import annotations

import pytest

from accounts.models import AuditEvent
from mcpbridge import status as mcp_status
from mcpbridge.client import manager
from mcpbridge.models import McpServer
from tests.mcpbridge.conftest import TIME_SERVER
from tests.plugins.conftest import write

pytestmark = pytest.mark.django_db

MCP_ENV_SECRET = "mcp-env-value-5e5e5e-secret"


def rows(prefix: str) -> list[tuple[str, str, int | None, str]]:
    return [(e.action, e.outcome, e.actor_id, e.target)
            for e in AuditEvent.objects.filter(action__startswith=prefix).order_by("id")]


def test_alias_create_update_and_delete_are_audited_with_field_names(admin_client, admin):
    made = admin_client.post("/api/connections", {"name": "local", "provider": "openai",
                                                  "base_url": "http://127.0.0.1:9/v1", "models": ["llama3"]},
                             format="json")
    assert made.status_code == 201, made.content
    alias = admin_client.post("/api/aliases", {"name": "smart", "targets": [{"model": "local/llama3"}]},
                              format="json")
    assert alias.status_code == 201, alias.content
    alias_id = alias.json()["id"]
    assert admin_client.patch(f"/api/aliases/{alias_id}", {"strategy": "fallback"}, format="json").status_code == 200
    assert admin_client.delete(f"/api/aliases/{alias_id}").status_code == 204

    assert rows("alias.") == [("alias.create", "success", admin.pk, "alias:smart"),
                              ("alias.update", "success", admin.pk, "alias:smart"),
                              ("alias.delete", "success", admin.pk, "alias:smart")]
    assert AuditEvent.objects.get(action="alias.create").details == {"fields": ["name", "targets"]}


def test_a_failed_mcp_connect_is_audited_as_a_failure_with_its_code(admin_client, admin, settings):
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = True
    answer = admin_client.post("/api/mcp/connect", {"name": "nothing-there", "url": "http://127.0.0.1:9/mcp"},
                               format="json")
    assert answer.status_code == 502 and answer.json()["error"]["code"] == "mcp_connect_failed"
    assert rows("mcp.") == [("mcp.connect", "failure", admin.pk, "mcp:nothing-there")]
    assert AuditEvent.objects.get(action="mcp.connect").details == {"code": "mcp_connect_failed"}


def test_disconnecting_a_stored_mcp_server_is_audited(admin_client, admin):
    McpServer.objects.create(name="stale", transport="stdio", command="absent-mcp-server", status="error")
    answer = admin_client.post("/api/mcp/disconnect", {"name": "stale"}, format="json")
    assert answer.status_code == 200, answer.content
    assert rows("mcp.") == [("mcp.disconnect", "success", admin.pk, "mcp:stale")]
    missing = admin_client.post("/api/mcp/disconnect", {"name": "stale"}, format="json")
    assert missing.status_code == 404 and len(rows("mcp.")) == 1  # nothing disconnected, nothing recorded


@pytest.mark.e2e  # starts the reference MCP server over stdio
def test_a_successful_mcp_connect_is_audited_with_the_transport_only(admin_client, admin):
    try:
        answer = admin_client.post("/api/mcp/connect", {
            "name": "time", "command": TIME_SERVER[0], "args": TIME_SERVER[1:], "env": {"TZ_HINT": MCP_ENV_SECRET}},
            format="json")
        assert answer.status_code == 201, answer.content
        assert rows("mcp.") == [("mcp.connect", "success", admin.pk, "mcp:time")]
        event = AuditEvent.objects.get(action="mcp.connect")
        assert event.details == {"transport": "stdio"} and MCP_ENV_SECRET not in str(event.details)
    finally:
        manager.run_sync(manager.disconnect_all, timeout=30)
        mcp_status._recorded.clear()


@pytest.fixture
def plugin_dir(tmp_path, settings):
    """This process's loader (plugins.services) on an empty directory of the test's, unwatched."""
    from plugins import services as plugin_services

    directory = tmp_path / "plugins"
    directory.mkdir()
    settings.AGENTSITE_PLUGIN_DIR, settings.AGENTSITE_PLUGIN_WATCH = directory, False
    plugin_services.stop()
    yield directory
    plugin_services.stop()


def test_plugin_loads_failures_and_reloads_are_audited(admin_client, admin, plugin_dir):
    write(plugin_dir / "good.py", '''
        from plugins.sdk import tool

        @tool
        def shout(text: str) -> str:
            """Upper-case a text."""
            return text.upper()
    ''')
    write(plugin_dir / "broken.py", "raise RuntimeError('no')\n")
    assert admin_client.get("/api/plugins").status_code == 200  # the process's loader starts: loads both
    assert rows("plugin.") == [("plugin.error", "failure", None, "plugin:broken"),
                               ("plugin.load", "success", None, "plugin:good")]
    loaded = AuditEvent.objects.get(action="plugin.load")
    assert loaded.details == {"tools": ["shout"]} and loaded.door == "system"

    answer = admin_client.post("/api/plugins/reload", {"name": "good"}, format="json")
    assert answer.status_code == 200, answer.content
    assert rows("plugin.")[2:] == [("plugin.load", "success", None, "plugin:good"),
                                   ("plugin.reload", "success", admin.pk, "plugin:good")]
