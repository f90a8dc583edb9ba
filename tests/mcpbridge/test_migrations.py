"""The access-rule migrations: servers stored before rules existed become admin-only (the safe default), which
the organisation's rule calls `private`."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from mcpbridge.models import McpServer
from organisation.models import PRIVATE

BEFORE_RULES = [("mcpbridge", "0001_initial")]


@pytest.mark.django_db(transaction=True)
def test_a_server_stored_before_access_rules_existed_becomes_visible_to_admins_only():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_RULES)
    old_server = executor.loader.project_state(BEFORE_RULES).apps.get_model("mcpbridge", "McpServer")
    old_server.objects.create(name="legacy", transport="stdio", command="mcp-server-time", args=["--token=x"])

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes("mcpbridge"))

    server = McpServer.objects.get(name="legacy")
    assert server.visibility == PRIVATE and server.owner_id is None and list(server.grants.all()) == []
