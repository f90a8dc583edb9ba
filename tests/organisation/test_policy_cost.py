"""What an access decision costs (issue 44, item 7): no query for the owner, an admin or `everyone`, one indexed
query for a grant (to the user, or to a group through a membership), one query for a listing whatever its size;
and the query plans use the grants' and memberships' indexes."""

from __future__ import annotations

import pytest
from django.db import connection

from knowledge.models import Collection, CollectionGrant
from knowledge.services import collection_create
from organisation.models import EVERYONE, SHARED, VIEWER, Group, Membership
from organisation.policy import USE, can, role_of, visible_q

pytestmark = pytest.mark.django_db


def _made(owner, name: str, visibility: str) -> Collection:
    collection = collection_create(owner_id=owner.pk, name=name)
    Collection.objects.filter(pk=collection.pk).update(visibility=visibility)
    collection.refresh_from_db()
    return collection


@pytest.fixture
def world(django_user_model, admin):
    owner = django_user_model.objects.create_user("owner-x", password="x-correct-horse-1")
    member = django_user_model.objects.create_user("member-x", password="x-correct-horse-1")
    direct = django_user_model.objects.create_user("direct-x", password="x-correct-horse-1")
    team = Group.objects.create(name="team-x")
    Membership.objects.create(group=team, user=member)
    shared = _made(owner, "shared", SHARED)
    CollectionGrant.objects.create(resource=shared, group=team, role=VIEWER)
    CollectionGrant.objects.create(resource=shared, user=direct, role=VIEWER)
    public = _made(owner, "public", EVERYONE)
    for n in range(30):  # a listing's cost does not grow with what it lists
        extra = _made(owner, f"more{n}", SHARED)
        CollectionGrant.objects.create(resource=extra, group=team, role=VIEWER)
    return {"owner": owner, "member": member, "direct": direct, "admin": admin, "shared": shared, "public": public}


def test_the_owner_an_admin_and_everyone_cost_no_query(world, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert role_of(world["owner"], world["shared"]) == "owner"
        assert role_of(world["admin"], world["shared"]) == "owner"
        assert can(world["member"], USE, world["public"])


@pytest.mark.parametrize("who", ["member", "direct"])
def test_a_grant_costs_one_query(world, who, django_assert_num_queries):
    with django_assert_num_queries(1):
        assert role_of(world[who], world["shared"]) == VIEWER


def test_a_listing_costs_one_query_whatever_it_lists(world, django_assert_num_queries):
    with django_assert_num_queries(1):
        names = list(Collection.objects.filter(visible_q(world["member"], Collection)).values_list("name", flat=True))
    assert len(names) == 32 and "shared" in names and "public" in names


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the plan's wording is SQLite's (EXPLAIN QUERY PLAN)")
def test_a_grant_decision_searches_by_index_never_scans(world):
    grants = world["shared"].grants.filter(
        **{"group__memberships__user_id": world["member"].pk}).values_list("role", flat=True)
    sql, params = grants.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "SCAN" not in plan.replace("SCAN CONSTANT", ""), plan
