"""The two halves of the MCP access-rule upgrade test (tests/mcpbridge/test_upgrade_access.py), each run as its
own process on the same fresh database and printing one line of JSON.

`old` runs inside a checkout of the previous release, with its code (this file is run by path there): it
migrates, stores a server under each older rule (`admins`, `everyone`, `users` naming two users) through its
own models, and asks its own `mcp_servers_visible_to` what each user sees. `new` runs in this tree: it migrates
(the upgrade), then reads each server's rule back and asks the new selectors and organisation.policy what each
user sees.
"""

from __future__ import annotations

import json
import os
import sys

import django

USERS = (("boss", True), ("alice", False), ("bob", False), ("carol", False))  # (username, is_staff)


def _seen_by(visible_to, context) -> dict[str, list[str]]:
    from django.contrib.auth import get_user_model

    seen = {}
    for user in get_user_model().objects.order_by("username"):
        caller = context(user_id=user.pk, is_admin=user.is_staff)
        seen[user.username] = sorted(server.name for server in visible_to(caller))
    return seen


def old() -> dict:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    import mcpbridge.models
    from agentsite.agent.tools import ToolContext
    from mcpbridge.models import McpServer
    from mcpbridge.selectors import mcp_servers_visible_to

    call_command("migrate", verbosity=0)
    users = {name: get_user_model().objects.create_user(name, password=None, is_staff=staff) for name, staff in USERS}
    McpServer.objects.create(name="closed", transport="stdio", command="closed-server", visibility="admins")
    McpServer.objects.create(name="open", transport="stdio", command="open-server", visibility="everyone")
    named = McpServer.objects.create(name="named", transport="streamable-http", url="http://127.0.0.1:9/mcp",
                                     visibility="users")
    named.users.set([users["alice"], users["bob"]])
    return {"code": mcpbridge.models.__file__, "seen": _seen_by(mcp_servers_visible_to, ToolContext)}


def new() -> dict:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from agentsite.agent.tools import ToolContext
    from mcpbridge.models import McpServer
    from mcpbridge.selectors import mcp_servers_visible_to
    from organisation.policy import USE, can

    call_command("migrate", verbosity=0)
    rules = {server.name: [server.visibility, server.owner_id,
                           sorted([grant.user.username if grant.user_id else None, grant.group_id, grant.role]
                                  for grant in server.grants.select_related("user"))]
             for server in McpServer.objects.all()}
    usable = {user.username: sorted(server.name for server in McpServer.objects.all() if can(user, USE, server))
              for user in get_user_model().objects.order_by("username")}
    return {"rules": rules, "seen": _seen_by(mcp_servers_visible_to, ToolContext), "usable": usable}


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    django.setup()
    print(json.dumps({"old": old, "new": new}[sys.argv[1]]()))
