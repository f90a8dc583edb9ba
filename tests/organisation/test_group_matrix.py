"""Every group route, for every method it takes, as an admin, the group's manager, a member and an outsider.

The routes come from the URL conf (every path under /api/groups, whichever app serves it: the group budget is
usage's) and the methods from each view, so a route added later is held to the rule below without being
listed: reading a group is its members' (an outsider: 404, as for no group); changing the group itself (its
budget included) is the admins' (a member or manager: 403 `forbidden`); changing its members is the admins'
and its managers' (a member: 403).
"""

from __future__ import annotations

import pytest

from organisation.models import Group
from tests.conftest import client_for
from tests.security.conftest import url_routes

pytestmark = pytest.mark.django_db

ROLES = ("admin", "manager", "member", "outsider")
MEMBER_ROUTES = {"group-members", "group-member"}  # what changes the group's members rather than the group


def expected(name: str, method: str, role: str) -> int:
    """The status each role gets: 2xx as success, else the refusal."""
    if name == "groups":  # the list: anyone reads it (filtered); only admins create
        return 200 if method == "get" else (201 if role == "admin" else 403)
    if role == "outsider":
        return 404
    if method == "get":
        return 200
    allowed = role == "admin" or (role == "manager" and name in MEMBER_ROUTES)
    if not allowed:
        return 403
    return {"post": 201, "delete": 204}.get(method, 200)


NAMES = {"/api/groups": "groups", "/api/groups/{group_id}": "group", "/api/groups/{group_id}/members": "group-members",
         "/api/groups/{group_id}/members/{user_id}": "group-member", "/api/groups/{group_id}/budget": "group-budget"}


def operations():
    for route in url_routes(("/api/groups",)):
        for method in ("get", "post", "put", "patch", "delete"):
            if hasattr(route.view_class, method):
                yield NAMES.get(route.template, route.template), method


@pytest.fixture
def people(django_user_model, admin):
    made = {"admin": admin}
    for role in ("manager", "member", "outsider", "joiner"):
        made[role] = django_user_model.objects.create_user(role, password="x-correct-horse-1")
    return made


def _request(people, name: str, method: str, role: str):
    group = Group.objects.create(name=f"g{Group.objects.count()}")
    group.memberships.create(user=people["manager"], role="manager")
    group.memberships.create(user=people["member"], role="member")
    group.memberships.create(user=people["joiner"], role="member")
    client = client_for(people[role])
    joiner = people["joiner"].pk
    path = {"groups": "/api/groups", "group": f"/api/groups/{group.pk}",
            "group-members": f"/api/groups/{group.pk}/members",
            "group-member": f"/api/groups/{group.pk}/members/{joiner}",
            "group-budget": f"/api/groups/{group.pk}/budget"}[name]
    body = {("groups", "post"): {"name": f"new-{role}"}, ("group", "patch"): {"description": "changed"},
            ("group-members", "post"): {"user": people["outsider"].pk},
            ("group-member", "patch"): {"role": "manager"},
            ("group-budget", "put"): {"tokens_per_day": 1000}}.get((name, method))
    return getattr(client, method)(path, body, format="json") if body is not None else getattr(client, method)(path)


def test_the_matrix_covers_every_group_route():
    assert {name for name, _method in operations()} == set(NAMES.values()), "name the new route in NAMES"
    assert len(list(operations())) == 11


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("name", "method"), list(operations()))
def test_each_role_gets_what_the_rule_says(people, name, method, role):
    response = _request(people, name, method, role)
    want = expected(name, method, role)
    assert response.status_code == want, f"{method.upper()} {name} as {role}: {response.content[:200]!r}"
    if want in (403, 404):
        assert response.json()["error"]["code"] == {403: "forbidden", 404: "not_found"}[want]
