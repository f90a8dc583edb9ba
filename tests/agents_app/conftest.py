"""Fixtures of the agents tests: a catalogue the checks resolve models against (one connection `local` with the
models `small` and `big`, an alias `fast`), people who hold each role on an agent, and small helpers."""

from __future__ import annotations

from typing import Any

import pytest

from organisation.models import EDITOR, SHARED, VIEWER, Group, Membership
from tests.conftest import client_for


@pytest.fixture
def local(db):
    """The rows check_model resolves against (catalogue_now: the database, not the cached settings)."""
    from catalogue import services

    connection = services.connection_create(data={"name": "local", "provider": "offline", "models": ["small", "big"]})
    services.alias_create(data={"name": "fast", "strategy": "fallback", "targets": [{"model": "local/small"}]})
    return connection


def make(client, **fields: Any) -> dict:
    """POST /api/agents with the given fields (a slug and a name by default); the 201 answer."""
    body = {"slug": "helper", "name": "Helper", **fields}
    made = client.post("/api/agents", body, format="json")
    assert made.status_code == 201, made.content
    return made.json()


def error(response) -> tuple[int, str, dict]:
    body = response.json()["error"]
    return response.status_code, body["code"], body.get("details") or {}


@pytest.fixture
def people(owner, django_user_model) -> dict[str, Any]:
    """owner (made the agent), editor (a user grant), viewer (through a group), outsider (nothing); the agent is
    `shared`."""
    editor = django_user_model.objects.create_user(username="editor", password="x-pass-1234567")
    viewer = django_user_model.objects.create_user(username="viewer", password="x-pass-1234567")
    outsider = django_user_model.objects.create_user(username="outsider", password="x-pass-1234567")
    team = Group.objects.create(name="team")
    Membership.objects.create(group=team, user=viewer)
    agent = make(client_for(owner), slug="shared-one", name="Shared")
    rule = client_for(owner).put(f"/api/agents/{agent['id']}/access", {"visibility": SHARED, "grants": [
        {"user": editor.pk, "role": EDITOR}, {"group": team.pk, "role": VIEWER}]}, format="json")
    assert rule.status_code == 200, rule.content
    return {"owner": owner, "editor": editor, "viewer": viewer, "outsider": outsider, "agent": agent, "team": team}
