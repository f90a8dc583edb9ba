"""The two halves of the agents' upgrade test, each run as its own process on a fresh database
(tests/agents_app/test_upgrade.py): `old` migrates every app but agents_app (the release before agents) and
fills the config through the historical models, then reads /api/config; `new` migrates to the latest and reads
the agent `default`, its versions, what the runtime resolves `agent` to, and /api/config again, printing what it
found as one line of JSON."""

from __future__ import annotations

import json
import os
import sys

import django

USERNAME = "upgrader"


def _config_read() -> dict:
    """GET /api/config as an admin, through the whole request stack."""
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    from accounts.tokens import token_pair_for

    admin = get_user_model().objects.filter(username=USERNAME).first()
    if admin is None:
        admin = get_user_model().objects.create_superuser(username=USERNAME, password="x-upgrade-12345", email="")
    client = APIClient(HTTP_HOST="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_pair_for(admin)['token']}")
    response = client.get("/api/config")
    assert response.status_code == 200, response.content
    return response.json()


def before_agents(graph) -> list[tuple[str, str]]:
    """Each app's latest migration that needs no agents_app migration (a session's and a task's `agent` do): the
    schema of the release before agents."""
    targets = []
    for leaf in graph.leaf_nodes():
        node = leaf
        while node is not None and any(app == "agents_app" for app, _name in graph.forwards_plan(node)):
            node = next((parent for parent in graph.node_map[node].parents if parent[0] == node[0]), None)
        if node is not None and node[0] != "agents_app":
            targets.append(node)
    return targets


def old(filled: bool) -> dict:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    targets = before_agents(executor.loader.graph)
    executor.migrate(targets)
    state = MigrationExecutor(connection).loader.project_state(targets).apps
    if filled:
        gateway = state.get_model("catalogue", "Connection").objects.create(
            name="gw", provider="openai", base_url="http://127.0.0.1:9/v1", models=["m1", "m2"])
        state.get_model("catalogue", "ModelAlias").objects.create(
            name="fast", strategy="fallback", targets=[{"model": "gw/m1", "weight": 1}])
        state.get_model("catalogue", "AgentConfig").objects.create(
            pk=1, connection=gateway, model="fast", system_prompt="Answer in French.\n  Briefly.", temperature=0.25,
            max_tokens=321, tools=["web_search", "kb_search"], kb_top_k=3)
    applied = sorted(app for app, _name in MigrationExecutor(connection).loader.applied_migrations)
    return {"agents_migrated": "agents_app" in applied, "config": _config_read() if filled else None}


def new() -> dict:
    from django.core.management import call_command

    from agents_app.models import Agent, AgentVersion
    from agentsite.agent import agents as runtime

    call_command("migrate", verbosity=0)
    default = Agent.objects.get(slug="default")
    versions = list(AgentVersion.objects.filter(agent=default).values_list("number", "note", "author_id", "data"))
    resolved = runtime.resolve_now(None, "agent").settings
    return {
        "agent": {name: getattr(default, name) for name in (
            "name", "instructions", "model", "temperature", "max_tokens", "tools", "knowledge", "starters",
            "visibility", "owner_id", "version")},
        "versions": versions,
        "resolved": [resolved.system_prompt, resolved.model, resolved.temperature, resolved.max_tokens,
                     list(resolved.tools), resolved.agent, resolved.kb_personal],
        "config": _config_read(),
    }


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    django.setup()
    step = sys.argv[1]
    print(json.dumps(new() if step == "new" else old(step == "old-filled"), default=str))
