"""The two halves of the catalogue's upgrade test, each run as its own process on a fresh database
(tests/catalogue/test_upgrade.py): `old` migrates to the previous release's migrations and fills the catalogue
through the historical models; `new` migrates to the latest and reads every row back through the catalogue's
models, printing what it found as one line of JSON."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import django

ROOT = Path(__file__).resolve().parents[2]
# The migration leaves of the project's apps at the previous release (main at 9efc1a8), before the catalogue app.
PREVIOUS_LEAVES = [
    ("accounts", "0011_connection_passthrough"), ("agentsite", "0002_service_process_plural"),
    ("compat", "0001_initial"), ("knowledge", "0007_lexical_postings"), ("mcpbridge", "0003_http_sessions"),
    ("scheduler", "0005_created_by_key"), ("sessions_app", "0003_chatsession_model"), ("usage", "0002_user_rollup"),
    ("voice", "0001_initial"), ("workflows", "0007_created_by_key"),
]
MODELS = ("agentconfig", "connection", "modelalias")


def previous_targets(loader) -> list[tuple[str, str]]:
    """The previous release's leaves, with the latest of every third-party app (those did not change)."""
    from django.apps import apps

    # The project's own apps: in the checkout, and not installed packages (CI's virtualenv lives inside it).
    project = {config.label for config in apps.get_app_configs()
               if Path(config.path).is_relative_to(ROOT) and "site-packages" not in Path(config.path).parts}
    return PREVIOUS_LEAVES + [leaf for leaf in loader.graph.leaf_nodes() if leaf[0] not in project]


def old() -> dict:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    executor = MigrationExecutor(connection)
    targets = previous_targets(executor.loader)
    executor.migrate(targets)
    state = MigrationExecutor(connection).loader.project_state(targets).apps
    content_type, permission = state.get_model("contenttypes", "ContentType"), state.get_model("auth", "Permission")
    types = {}
    for model in MODELS:  # what the previous release's post_migrate made
        types[model] = content_type.objects.create(app_label="accounts", model=model)
        for action in ("add", "change", "delete", "view"):
            permission.objects.create(content_type=types[model], codename=f"{action}_{model}",
                                      name=f"Can {action} {model}")
    connection_model = state.get_model("accounts", "Connection")
    gateway = connection_model.objects.create(
        name="gw", provider="openai", base_url="http://user:pw@127.0.0.1:9/v1", api_key="sk-old",
        headers={"X-Team": "red"}, timeout_s=33.0, models=["m1", "m2"], passthrough=True)
    discovering = connection_model.objects.create(name="disc", provider="anthropic", models="discover",
                                                  discovered=["c1"], enabled=False)
    state.get_model("accounts", "ModelAlias").objects.create(
        name="fast", strategy="balance", targets=[{"model": "gw/m1", "weight": 2}, {"model": "disc/c1", "weight": 1}],
        fallback_on=[429])
    state.get_model("accounts", "AgentConfig").objects.create(
        pk=1, connection=gateway, model="fast", temperature=0.25, tools=["web_search"], compat_auth="key",
        allow_registration=False)
    # What references the rows from outside: an editor's permission (through a group and directly) and the
    # admin's history entry of the gateway.
    user = state.get_model("auth", "User").objects.create(username="editor", password="!", is_staff=True)
    group = state.get_model("auth", "Group").objects.create(name="catalogue editors")
    group.permissions.add(permission.objects.get(codename="change_connection"))
    user.groups.add(group)
    user.user_permissions.add(permission.objects.get(codename="view_modelalias"))
    state.get_model("admin", "LogEntry").objects.create(
        action_time=timezone.now(), user=user, content_type=types["connection"], object_id=str(gateway.pk),
        object_repr="gw", action_flag=2, change_message="[]")
    return {"connections": [gateway.pk, discovering.pk], "types": {name: row.pk for name, row in types.items()}}


def new() -> dict:
    from django.contrib.admin.models import LogEntry
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType
    from django.core.management import call_command

    from catalogue import services
    from catalogue.models import AgentConfig, Connection, ModelAlias
    from catalogue.selectors import settings_get

    call_command("migrate", verbosity=0)
    config = AgentConfig.objects.get(pk=1)
    alias = ModelAlias.objects.get(name="fast")
    route = settings_get().catalogue.resolve("fast")
    editor = get_user_model().objects.get(username="editor")
    entry = LogEntry.objects.get(object_repr="gw")
    made = services.connection_create(data={"name": "after", "provider": "offline", "models": ["x"]})
    services.alias_update(alias=alias, changes={"targets": [*alias.targets, {"model": "after/x", "weight": 1}]})
    return {
        "connections": [[row.pk, row.name, row.provider, row.base_url, row.api_key, row.headers, row.timeout_s,
                         row.models, row.discovered, row.enabled, row.passthrough]
                        for row in Connection.objects.exclude(pk=made.pk)],
        "alias": [alias.name, alias.strategy, alias.fallback_on],
        "config": [config.connection.name, config.model, config.temperature, config.tools, config.compat_auth,
                   config.allow_registration],
        "route": [target.entry for target in route.targets],
        "types": {model: [row.app_label, row.pk, Permission.objects.filter(content_type=row).count()]
                  for model, row in ((name, ContentType.objects.get(model=name, app_label__in=("accounts",
                                                                                          "catalogue")))
                                     for name in MODELS)},
        "perms": [editor.has_perm("catalogue.change_connection"), editor.has_perm("catalogue.view_modelalias"),
                  editor.has_perm("catalogue.delete_connection")],
        "history": str(entry.get_edited_object()),
        "after": [made.pk > max(row.pk for row in Connection.objects.exclude(pk=made.pk)),
                  [target["model"] for target in ModelAlias.objects.get(name="fast").targets]],
    }


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    django.setup()
    print(json.dumps({"old": old, "new": new}[sys.argv[1]]()))
