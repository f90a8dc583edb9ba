"""Who a verified sign-in becomes (sso.accounts.sign_in), driven with claim dicts and the OIDC settings overridden:
the account made or linked, the profile kept current, the `oidc` groups replaced from the claim, admin from the
admin groups, and every refusal (no_account, account_conflict, not_allowed, deactivated) changing nothing."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from accounts.models import AuditEvent
from organisation.models import MANUAL, OIDC, Group, Membership
from organisation.services import claim_group_name
from sso import accounts
from sso.accounts import sign_in
from sso.models import Identity
from sso.provider import SsoFailure
from tests.conftest import client_for
from tests.dbthreads import on_threads

pytestmark = pytest.mark.django_db

ISSUER = "https://idp.example.com/realms/acme"
User = get_user_model()


@pytest.fixture
def oidc(settings):
    """Set OIDC settings for the test: oidc(LINK_BY_EMAIL=True, ...)."""
    settings.OIDC = {**settings.OIDC, "ISSUER": ISSUER, "CREATE_USERS": True, "LINK_BY_EMAIL": False,
                     "GROUPS_CLAIM": "groups", "CREATE_GROUPS": False, "ADMIN_GROUPS": [], "ALLOWED_GROUPS": []}

    def change(**values: Any) -> None:
        settings.OIDC = {**settings.OIDC, **values}

    return change


def login(sub: str, issuer: str = ISSUER, **claims: Any) -> tuple[Any, dict[str, Any]]:
    return sign_in(issuer=issuer, claims={"sub": sub, **claims})


def refused(reason: str, sub: str, **claims: Any) -> SsoFailure:
    with pytest.raises(SsoFailure) as caught:
        login(sub, **claims)
    assert caught.value.reason == reason, caught.value
    return caught.value


def oidc_groups(user: Any) -> list[str]:
    return sorted(Membership.objects.filter(user=user, group__source=OIDC).values_list("group__name", flat=True))


def all_groups(user: Any) -> list[str]:
    return sorted(Membership.objects.filter(user=user).values_list("group__name", flat=True))


def state() -> tuple[list, list, list, list]:
    """Everything a refused sign-in must leave as it was."""
    users = list(User.objects.order_by("pk").values_list("username", "email", "first_name", "last_name",
                                                          "is_active", "is_staff", "is_superuser"))
    return (users, list(Identity.objects.order_by("pk").values_list("user_id", "issuer", "subject", "email")),
            list(Group.objects.order_by("pk").values_list("name", "source")),
            list(Membership.objects.order_by("pk").values_list("user_id", "group_id", "role")))


# --- the account -------------------------------------------------------------------------------------------------

def test_the_first_sign_in_creates_the_user_with_an_unusable_password_and_the_claims_profile(oidc):
    user, changes = login("s-1", preferred_username="alice", email="alice@example.com", given_name="Alice",
                          family_name="Liddell")
    user.refresh_from_db()
    assert (user.username, user.email, user.first_name, user.last_name) == ("alice", "alice@example.com", "Alice",
                                                                           "Liddell")
    assert not user.has_usable_password() and user.is_active and not user.is_staff and not user.is_superuser
    assert changes["created"] is True and changes["linked"] is False
    assert list(Identity.objects.values_list("user_id", "issuer", "subject", "email")) == [
        (user.pk, ISSUER, "s-1", "alice@example.com")]


def test_the_name_claim_is_the_first_name_when_there_are_no_given_and_family_names(oidc):
    user, _ = login("s-1", preferred_username="alice", name="Alice Liddell")
    assert (user.first_name, user.last_name) == ("Alice Liddell", "")


def test_a_taken_username_gets_the_next_free_number_compared_without_case(oidc, django_user_model):
    django_user_model.objects.create_user("Alice", password="x-correct-horse-1")
    assert login("s-1", preferred_username="alice")[0].username == "alice-2"
    assert login("s-2", preferred_username="alice")[0].username == "alice-3"
    assert login("s-3", preferred_username="ALICE")[0].username == "ALICE-4"


@pytest.mark.parametrize(("preferred", "username"), [
    ("Ann Lee/ops", "Ann_Lee_ops"), ("josé.o'neil+x@corp", "josé.o_neil+x@corp"), ("  ben  ", "ben"),
    ("__x__", "x"), ("dan-the_man.1", "dan-the_man.1")])
def test_characters_outside_djangos_username_set_are_replaced(oidc, preferred, username):
    user, _ = login("s-1", preferred_username=preferred)
    assert user.username == username
    user.full_clean(exclude=["password"])  # what Django's username validator accepts


def test_without_a_preferred_username_the_emails_local_part_is_the_name_and_then_user(oidc):
    assert login("s-1", email="carol.smith@example.com")[0].username == "carol.smith"
    assert login("s-2", preferred_username="???", email="dave@example.com")[0].username == "dave"
    assert login("s-3")[0].username == "user"
    assert login("s-4", preferred_username="")[0].username == "user-2"


def test_a_long_username_is_cut_to_leave_room_for_a_number(oidc):
    at_limit = "a" * 142
    assert login("s-1", preferred_username=at_limit)[0].username == at_limit
    assert login("s-2", preferred_username=at_limit + "b")[0].username == at_limit + "-2"
    third = login("s-3", preferred_username="c" * 400)[0]
    assert third.username == "c" * 142 and len(third.username) <= 150


def test_a_second_sign_in_keeps_email_and_names_current_but_never_the_username(oidc):
    first, _ = login("s-1", preferred_username="alice", email="alice@example.com", given_name="Alice")
    again, changes = login("s-1", preferred_username="alice.renamed", email="alice@new.example.com",
                           given_name="Alicia", family_name="Liddell")
    again.refresh_from_db()
    assert again.pk == first.pk and changes["created"] is False and changes["linked"] is False
    assert (again.username, again.email, again.first_name, again.last_name) == (
        "alice", "alice@new.example.com", "Alicia", "Liddell")
    assert Identity.objects.get(subject="s-1").email == "alice@new.example.com"
    assert User.objects.count() == 1


def test_a_new_subject_named_like_an_existing_user_gets_a_new_account_never_that_one(oidc, django_user_model):
    local = django_user_model.objects.create_user("alice", email="alice@example.com", password="x-correct-horse-1")
    user, changes = login("s-1", preferred_username="alice", email="alice@example.com", email_verified=True)
    assert user.pk != local.pk and user.username == "alice-2" and changes["created"] is True
    local.refresh_from_db()
    assert local.check_password("x-correct-horse-1") and not local.sso_identities.exists()


def test_the_link_is_issuer_and_subject(oidc):
    first, _ = login("s-1", preferred_username="alice")
    assert login("s-1", preferred_username="alice")[0].pk == first.pk
    elsewhere, changes = login("s-1", issuer="https://other.example.com", preferred_username="alice")
    assert elsewhere.pk != first.pk and changes["created"] is True and elsewhere.username == "alice-2"
    assert login("s-2", preferred_username="alice")[0].pk not in (first.pk, elsewhere.pk)


def test_without_create_users_a_new_subject_is_refused_and_nothing_is_made(oidc, django_user_model):
    known, _ = login("s-known", preferred_username="known")
    oidc(CREATE_USERS=False, CREATE_GROUPS=True)
    before = state()
    failure = refused("no_account", "s-new", preferred_username="new", groups=["eng"])
    assert failure.status == 403 and state() == before
    assert login("s-known", preferred_username="known")[0].pk == known.pk  # a linked subject still signs in


def test_a_token_without_a_subject_is_refused(oidc):
    refused("missing_claim", "", preferred_username="x")
    assert not User.objects.exists()


# --- linking by a verified e-mail --------------------------------------------------------------------------------

@pytest.fixture
def local_alice(django_user_model):
    return django_user_model.objects.create_user("alice", email="Alice@Example.com", password="x-correct-horse-1")


@pytest.mark.parametrize("verified", [True, "true", "TRUE", " true "])
def test_with_link_by_email_a_verified_email_links_the_existing_account_whatever_its_case(oidc, local_alice,
                                                                                         verified):
    oidc(LINK_BY_EMAIL=True)
    user, changes = login("s-1", preferred_username="alice.sso", email="alice@EXAMPLE.com", email_verified=verified)
    assert user.pk == local_alice.pk and changes == {**changes, "created": False, "linked": True}
    assert user.username == "alice" and User.objects.count() == 1
    # The link holds from now on, whatever the e-mail becomes.
    assert login("s-1", email="alice@elsewhere.example", email_verified=False)[0].pk == local_alice.pk


@pytest.mark.parametrize("verified", [False, "false", None, 1, "yes", "1"])
def test_an_unverified_email_links_nothing_and_makes_a_new_account(oidc, local_alice, verified):
    oidc(LINK_BY_EMAIL=True)
    claims = {"preferred_username": "alice", "email": "alice@example.com"}
    if verified is not None:
        claims["email_verified"] = verified
    user, changes = login("s-1", **claims)
    assert user.pk != local_alice.pk and changes["created"] is True and changes["linked"] is False
    assert not local_alice.sso_identities.exists()


def test_an_unverified_email_without_create_users_is_no_account(oidc, local_alice):
    oidc(LINK_BY_EMAIL=True, CREATE_USERS=False)
    before = state()
    refused("no_account", "s-1", email="alice@example.com", email_verified=False)
    assert state() == before
    assert login("s-1", email="alice@example.com", email_verified=True)[0].pk == local_alice.pk


def test_two_accounts_with_the_email_are_a_conflict_and_nothing_is_made(oidc, local_alice, django_user_model):
    django_user_model.objects.create_user("alice2", email="alice@example.com", password="x-correct-horse-1")
    oidc(LINK_BY_EMAIL=True, CREATE_GROUPS=True)
    before = state()
    failure = refused("account_conflict", "s-1", email="alice@example.com", email_verified=True, groups=["eng"])
    assert failure.status == 409 and state() == before


def test_a_deactivated_account_is_never_linked_nor_passed_over_for_a_new_one(oidc, local_alice):
    local_alice.is_active = False
    local_alice.save()
    oidc(LINK_BY_EMAIL=True, CREATE_GROUPS=True)
    before = state()
    failure = refused("deactivated", "s-1", email="alice@example.com", email_verified=True, groups=["eng"])
    assert failure.status == 403 and state() == before


def test_an_account_linked_to_another_subject_of_the_issuer_is_not_linked_again(oidc, local_alice):
    oidc(LINK_BY_EMAIL=True)
    assert login("s-1", email="alice@example.com", email_verified=True)[0].pk == local_alice.pk
    other, changes = login("s-2", preferred_username="alice", email="alice@example.com", email_verified=True)
    assert other.pk != local_alice.pk and changes["created"] is True


def test_link_by_email_is_off_by_default(oidc, local_alice, settings):
    from agentsite import settings as configured

    assert configured.OIDC["LINK_BY_EMAIL"] is False  # the default, as the environment left it
    user, changes = login("s-1", preferred_username="alice", email="alice@example.com", email_verified=True)
    assert user.pk != local_alice.pk and changes["created"] is True and user.username == "alice-2"


# --- groups from the claim ---------------------------------------------------------------------------------------

@pytest.fixture
def groups(db):
    """oidc groups eng, sales, ops; manual groups hr and eng-manual."""
    made = {name: Group.objects.create(name=name, source=OIDC) for name in ("eng", "sales", "ops")}
    made.update({name: Group.objects.create(name=name, source=MANUAL) for name in ("hr", "eng-manual")})
    return made


def test_the_claims_groups_become_the_users_oidc_memberships_and_a_second_sign_in_replaces_them(oidc, groups):
    user, changes = login("s-1", preferred_username="alice", groups=["eng", "ops"])
    assert oidc_groups(user) == ["eng", "ops"] and changes["groups"] == {"added": ["eng", "ops"], "removed": []}
    user, changes = login("s-1", groups=["sales", "ops"])
    assert oidc_groups(user) == ["ops", "sales"]
    assert changes["groups"] == {"added": ["sales"], "removed": ["eng"]}
    assert Membership.objects.get(user=user, group=groups["ops"]).role == "member"


def test_manual_groups_are_left_alone_even_when_the_claim_names_them(oidc, groups, django_user_model):
    user, _ = login("s-1", preferred_username="alice", groups=["eng"])
    Membership.objects.create(user=user, group=groups["eng-manual"], role="manager")
    oidc(CREATE_GROUPS=True)
    login("s-1", groups=["hr", "sales"])
    assert all_groups(user) == ["eng-manual", "sales"]
    assert Group.objects.get(name="hr").source == MANUAL and not groups["hr"].memberships.exists()
    login("s-1")
    assert all_groups(user) == ["eng-manual"]


@pytest.mark.parametrize(("value", "expected"), [
    (["eng", "sales"], ["eng", "sales"]), ("eng", ["eng"]), ("  ", []), ([], []), (None, []),
    (["eng", 7, None, {"x": 1}, "", "sales"], ["eng", "sales"]), ({"eng": True}, []), (42, [])])
def test_the_groups_claim_is_a_list_or_a_single_string_and_anything_else_is_no_groups(oidc, groups, value,
                                                                                        expected):
    user, _ = login("s-1", preferred_username="alice", groups=["ops"])
    claims = {} if value is None else {"groups": value}
    login("s-1", **claims)
    assert oidc_groups(user) == expected


def test_an_absent_groups_claim_removes_every_oidc_membership(oidc, groups):
    user, _ = login("s-1", preferred_username="alice", groups=["eng", "sales"])
    assert login("s-1")[1]["groups"] == {"added": [], "removed": ["eng", "sales"]}
    assert oidc_groups(user) == []


def test_a_dotted_groups_claim_is_a_path_into_the_claims(oidc, groups):
    oidc(GROUPS_CLAIM="realm_access.roles")
    user, _ = login("s-1", preferred_username="alice", realm_access={"roles": ["eng", "sales"]}, groups=["ops"])
    assert oidc_groups(user) == ["eng", "sales"]
    login("s-1", realm_access={"roles": "ops"})
    assert oidc_groups(user) == ["ops"]
    login("s-1", realm_access=["eng"])  # not an object: no groups
    assert oidc_groups(user) == []


def test_a_claim_named_with_dots_is_found_whole_before_any_path(oidc, groups):
    oidc(GROUPS_CLAIM="https://example.com/groups")
    user, _ = login("s-1", preferred_username="alice", **{"https://example.com/groups": ["eng"]})
    assert oidc_groups(user) == ["eng"]
    assert accounts.claim_at({"a.b": 1, "a": {"b": 2}}, "a.b") == 1
    assert accounts.claim_at({"a": {"b": 2}}, "a.b") == 2
    assert accounts.claim_at({"a": {"c": 2}}, "a.b") is None


def test_create_groups_makes_the_missing_ones_as_oidc_groups_and_off_skips_them(oidc, groups):
    user, changes = login("s-1", preferred_username="alice", groups=["eng", "new-team"])
    assert oidc_groups(user) == ["eng"] and not Group.objects.filter(name="new-team").exists()
    assert changes["groups"] == {"added": ["eng"], "removed": []}
    oidc(CREATE_GROUPS=True)
    login("s-1", groups=["eng", "new-team"])
    made = Group.objects.get(name="new-team")
    assert made.source == OIDC and oidc_groups(user) == ["eng", "new-team"]
    assert AuditEvent.objects.filter(action="group.create", target=f"group:{made.pk}").count() == 1


@pytest.mark.parametrize(("value", "name"), [
    ("/eng", "eng"), ("/eng/backend", "eng_backend"), ("Ops Team!", "Ops_Team_"), ("  sales  ", "sales"),
    ("grüppe", "gr_ppe"), ("a" * 64, "a" * 64), ("a" * 65, "a" * 64), ("b" * 63 + "/c", "b" * 63 + "_"),
    ("/", None), ("", None), ("   ", None), ("//x", "x")])
def test_claim_group_names_are_normalised(value, name):
    assert claim_group_name(value) == name


def test_normalised_names_reach_the_groups_at_64_and_65_characters(oidc):
    oidc(CREATE_GROUPS=True)
    at_limit, past = "g" * 64, "h" * 65
    user, _ = login("s-1", preferred_username="alice", groups=["/eng/backend", at_limit, past, "/"])
    assert oidc_groups(user) == sorted(["eng_backend", at_limit, "h" * 64])


def test_each_membership_change_is_audited_by_oidc(oidc, groups):
    user, _ = login("s-1", preferred_username="alice", groups=["eng"])
    login("s-1", groups=["sales"])
    rows = {(row.action, row.target): row for row in AuditEvent.objects.filter(action__startswith="group.member_")}
    assert set(rows) == {("group.member_add", f"group:{groups['eng'].pk}"),
                         ("group.member_add", f"group:{groups['sales'].pk}"),
                         ("group.member_remove", f"group:{groups['eng'].pk}")}
    added = rows[("group.member_add", f"group:{groups['sales'].pk}")]
    assert added.details == {"user": user.pk, "before": None, "after": {"role": "member"}, "by": "oidc"}
    assert added.actor_id == user.pk
    removed = rows[("group.member_remove", f"group:{groups['eng'].pk}")]
    assert removed.details == {"user": user.pk, "before": {"role": "member"}, "after": None, "by": "oidc"}
    login("s-1", groups=["sales"])  # nothing changed: nothing audited
    assert AuditEvent.objects.filter(action__startswith="group.member_").count() == 3


def test_a_membership_change_reaches_me_and_model_access_on_the_next_request(oidc, groups):
    Group.objects.filter(pk=groups["eng"].pk).update(allowed_models=["no-such-model"])
    user, _ = login("s-1", preferred_username="alice")
    client = client_for(user)
    everything = client.get("/api/models").json()["models"]
    assert everything, "the stored catalogue lists nothing to pick"
    assert client.get("/api/auth/me").json()["groups"] == []
    login("s-1", groups=["eng"])
    assert client.get("/api/models").json()["models"] == []
    assert [group["name"] for group in client.get("/api/auth/me").json()["groups"]] == ["eng"]
    login("s-1", groups=["sales"])
    assert client.get("/api/models").json()["models"] == everything
    assert [group["name"] for group in client.get("/api/auth/me").json()["groups"]] == ["sales"]


# --- admin and allowed groups ------------------------------------------------------------------------------------

def test_admin_groups_grant_admin_and_take_it_back_when_the_user_leaves(oidc, groups):
    oidc(ADMIN_GROUPS=["platform-admins", "root"])
    user, changes = login("s-1", preferred_username="alice", groups=["eng", "platform-admins"])
    user.refresh_from_db()
    assert user.is_staff and user.is_superuser and changes["admin"] is True
    user, changes = login("s-1", groups=["eng", "root"])
    assert "admin" not in changes  # still an admin: nothing changed
    user, changes = login("s-1", groups=["eng"])
    user.refresh_from_db()
    assert not user.is_staff and not user.is_superuser and changes["admin"] is False
    assert client_for(user).get("/api/auth/me").json()["is_admin"] is False


def test_admin_groups_match_the_claims_values_as_sent(oidc):
    oidc(ADMIN_GROUPS=["admins"])
    user, _ = login("s-1", preferred_username="alice", groups=["/admins", "Admins"])
    assert not user.is_staff


def test_without_admin_groups_admin_is_left_as_it_is(oidc, groups):
    staff, _ = login("s-1", preferred_username="alice", groups=["admins"])
    User.objects.filter(pk=staff.pk).update(is_staff=True, is_superuser=True)
    user, changes = login("s-1", groups=[])
    user.refresh_from_db()
    assert user.is_staff and user.is_superuser and "admin" not in changes
    plain, _ = login("s-2", preferred_username="bob", groups=["admins"])
    assert not plain.is_staff and not plain.is_superuser


def test_allowed_groups_refuse_everyone_else_before_anything_is_made_or_changed(oidc, groups):
    oidc(ALLOWED_GROUPS=["staff", "contractors"], CREATE_GROUPS=True, ADMIN_GROUPS=["root"])
    member, _ = login("s-1", preferred_username="alice", email="alice@example.com", groups=["staff", "eng"])
    assert oidc_groups(member) == ["eng", "staff"]
    before = state()
    failure = refused("not_allowed", "s-1", email="changed@example.com", groups=["eng", "root", "new"])
    assert failure.status == 403 and "staff" in failure.detail and state() == before
    refused("not_allowed", "s-2", preferred_username="bob", groups=["eng", "new"])
    refused("not_allowed", "s-3", preferred_username="carol")
    assert state() == before
    assert login("s-4", preferred_username="dan", groups="contractors")[0].username == "dan"


def test_a_deactivated_user_is_refused_and_nothing_changes(oidc, groups):
    oidc(ADMIN_GROUPS=["root"])
    user, _ = login("s-1", preferred_username="alice", email="alice@example.com", groups=["eng"])
    User.objects.filter(pk=user.pk).update(is_active=False)
    oidc(CREATE_GROUPS=True)
    audited = AuditEvent.objects.count()
    before = state()
    failure = refused("deactivated", "s-1", email="new@example.com", given_name="New", groups=["sales", "root", "x"])
    assert failure.status == 403 and state() == before and AuditEvent.objects.count() == audited


def test_a_refusal_after_the_groups_were_synced_undoes_everything(oidc, groups, monkeypatch):
    user, _ = login("s-1", preferred_username="alice", email="alice@example.com", groups=["eng"])
    oidc(CREATE_GROUPS=True)
    synced = accounts.memberships_sync

    def sync_then_fail(**kwargs: Any) -> Any:
        result = synced(**kwargs)
        assert result["added"], "the sync changed nothing: the test would prove nothing"
        raise SsoFailure("provider_invalid", "refused after the sync", 502)

    monkeypatch.setattr(accounts, "memberships_sync", sync_then_fail)
    before = state()
    refused("provider_invalid", "s-1", email="new@example.com", groups=["sales", "new-team"])
    refused("provider_invalid", "s-2", preferred_username="bob", groups=["sales"])
    assert state() == before and oidc_groups(user) == ["eng"]


# --- two first sign-ins of one subject at once -------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_two_first_sign_ins_of_one_subject_at_once_end_with_one_account(oidc, monkeypatch):
    oidc(CREATE_GROUPS=True)
    # Both threads pass the identity lookup (nobody has made it) before either makes the user. On SQLite the
    # first writer holds the database until it commits, so the second waits at BEGIN and the meeting times out.
    meet = threading.Barrier(2)
    pick = accounts.unique_username

    def both_looked(base: str) -> str:
        try:
            meet.wait(timeout=2)
        except threading.BrokenBarrierError:
            pass
        return pick(base)

    monkeypatch.setattr(accounts, "unique_username", both_looked)
    results = on_threads(lambda _: login("s-1", preferred_username="alice", groups=["eng"])[0].pk, 2)
    assert list(User.objects.values_list("username", flat=True)) == ["alice"]
    assert len(results) == 2 and set(results) == {User.objects.get().pk}
    assert Identity.objects.count() == 1 and oidc_groups(User.objects.get()) == ["eng"]
    assert Group.objects.filter(name="eng").count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_first_sign_ins_making_one_group_at_once_share_it(oidc, monkeypatch):
    from organisation import services

    oidc(CREATE_GROUPS=True)
    # Both sign-ins saw `eng` missing before either makes it (on SQLite the second waits at BEGIN instead).
    meet = threading.Barrier(2)
    make = services.group_create

    def both_saw_it_missing(**kwargs: Any) -> Any:
        try:
            meet.wait(timeout=2)
        except threading.BrokenBarrierError:
            pass
        return make(**kwargs)

    monkeypatch.setattr(services, "group_create", both_saw_it_missing)
    subjects = ("alice", "bob")
    on_threads(lambda index: login(subjects[index], preferred_username=subjects[index], groups=["eng"]), 2)
    eng = Group.objects.get(name="eng")
    assert eng.source == OIDC and sorted(eng.memberships.values_list("user__username", flat=True)) == ["alice", "bob"]
