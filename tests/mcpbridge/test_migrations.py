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


BEFORE_ORGANISATION = [("mcpbridge", "0003_http_sessions")]


def _servers_under_each_older_rule(apps) -> None:
    user_model = apps.get_model("auth", "User")
    alice, bob = (user_model.objects.create(username=name, password="!") for name in ("alice", "bob"))
    user_model.objects.create(username="carol", password="!")
    server_model = apps.get_model("mcpbridge", "McpServer")
    server_model.objects.create(name="closed", transport="stdio", command="x", visibility="admins")
    server_model.objects.create(name="open", transport="stdio", command="x", visibility="everyone")
    named = server_model.objects.create(name="named", transport="stdio", command="x", visibility="users")
    named.users.set([alice, bob])


def _rules() -> dict:
    return {server.name: (server.visibility, server.owner_id,
                          sorted((grant.user.username, grant.role) for grant in server.grants.select_related("user")))
            for server in McpServer.objects.all()}


@pytest.mark.django_db(transaction=True)
def test_each_older_rule_becomes_the_organisations_and_back():
    """The fast half of tests/mcpbridge/test_upgrade_access.py (which runs the previous release's own code): the
    migrations alone, on the historical models, both ways."""
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_ORGANISATION)
    _servers_under_each_older_rule(executor.loader.project_state(BEFORE_ORGANISATION).apps)

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes("mcpbridge"))

    assert _rules() == {"closed": (PRIVATE, None, []), "open": ("everyone", None, []),
                        "named": ("shared", None, [("alice", "viewer"), ("bob", "viewer")])}

    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_ORGANISATION)
    old = executor.loader.project_state(BEFORE_ORGANISATION).apps.get_model("mcpbridge", "McpServer")
    assert {server.name: (server.visibility, sorted(user.username for user in server.users.all()))
            for server in old.objects.all()} == {"closed": ("admins", []), "open": ("everyone", []),
                                                 "named": ("users", ["alice", "bob"])}
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
