"""The access-rule routes' own edges: a path that names nothing (a NUL, which PostgreSQL refuses in a query, an
unknown id) is a 404 like any object the caller may not see, and a rule's bad grants are each named."""

from __future__ import annotations

import pytest

from mcpbridge.models import McpServer
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", ["%00", "a%00b", "nobody"])
def test_a_name_that_names_nothing_is_a_404(admin, name):
    McpServer.objects.create(name="ruled", transport="stdio", command="true")
    client = client_for(admin)
    for response in (client.get(f"/api/mcp/servers/{name}/access"),
                     client.put(f"/api/mcp/servers/{name}/access", {"visibility": "private", "grants": []},
                                format="json")):
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found", response.content


def test_each_bad_grant_is_named(admin, owner):
    McpServer.objects.create(name="ruled", transport="stdio", command="true")
    response = client_for(admin).put("/api/mcp/servers/ruled/access", {"visibility": "shared", "grants": [
        {"user": owner.pk, "role": "viewer"}, {"group": 999999, "role": "viewer"}, {"user": owner.pk, "role": "viewer"},
        {"user": 999999, "role": "viewer"}]}, format="json")
    assert response.status_code == 400
    assert set(response.json()["error"]["details"]) == {"grants.1.group", "grants.2.user", "grants.3.user"}
