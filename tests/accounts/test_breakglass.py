"""`manage.py breakglass` sets, clears and lists who may sign in with a password while AGENTSITE_PASSWORD_LOGIN=0,
and says what would stop a flagged user anyway; the initial admin is break-glass from the first start, and
`initadmin` (run by every `serve`) says so, and warns when nobody could sign in should single sign-on fail."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from accounts.models import BreakGlass
from accounts.services import admin_bootstrap
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def _run(*args: str) -> str:
    out = StringIO()
    call_command("breakglass", *args, stdout=out)
    return out.getvalue()


def _flagged() -> list[str]:
    return sorted(BreakGlass.objects.values_list("user__username", flat=True))


def _login(username: str):
    return APIClient().post("/api/auth/login", {"username": username, "password": PASSWORD}, format="json")


def test_the_command_flags_a_user_who_then_signs_in_with_passwords_off(settings, owner):
    settings.PASSWORD_LOGIN = False
    assert _login("owner").status_code == 403
    out = _run("owner")
    assert "owner may sign in with a password" in out
    assert "changes nothing" not in out  # passwords are off: the flag matters now
    assert _flagged() == ["owner"]
    assert _login("owner").status_code == 200


def test_flagging_twice_keeps_one_flag_and_says_so(owner):
    _run("owner")
    assert "already" in _run("owner")
    assert _flagged() == ["owner"]


def test_with_passwords_on_the_command_says_the_flag_changes_nothing_yet(owner):
    assert "changes nothing until it is turned off" in _run("owner")


def test_remove_takes_the_flag_away_and_the_password_stops_working(settings, owner):
    settings.PASSWORD_LOGIN = False
    _run("owner")
    assert "may no longer sign in" in _run("owner", "--remove")
    assert _flagged() == []
    assert _login("owner").status_code == 403
    assert "was not break-glass" in _run("owner", "--remove")


def test_list_names_the_flagged_users_in_order_and_what_stops_them(owner, other_user, admin, django_user_model):
    assert _run("--list").strip() == "No break-glass users."
    sso_made = django_user_model.objects.create_user(username="carol")  # as single sign-on makes them: no password
    for user in (other_user, owner, sso_made):
        BreakGlass.objects.create(user=user)
    owner.is_active = False
    owner.save(update_fields=["is_active"])
    lines = _run("--list").splitlines()
    assert [line.split(" ")[0] for line in lines] == ["carol", "other", "owner"]
    assert "no usable password" in lines[0] and "`manage.py changepassword carol`" in lines[0]
    assert lines[1] == "other"
    assert "deactivated" in lines[2]


def test_flagging_a_user_without_a_password_says_how_to_set_one(django_user_model):
    django_user_model.objects.create_user(username="carol")
    out = _run("carol")
    assert "carol has no usable password" in out and "`manage.py changepassword carol`" in out
    assert _flagged() == ["carol"]


def test_an_unknown_user_is_a_command_error_naming_them(owner):
    with pytest.raises(CommandError, match="No user named 'ghost'"):
        _run("ghost")
    with pytest.raises(CommandError, match="No user named 'Owner'"):  # names are not matched loosely
        _run("Owner")
    assert _flagged() == []


@pytest.mark.parametrize("args", [(), ("--remove",), ("owner", "--list"), ("--list", "--remove")])
def test_a_command_without_a_user_or_with_list_and_more_is_an_error(owner, args):
    with pytest.raises(CommandError):
        _run(*args)
    assert _flagged() == []


# --- the first start --------------------------------------------------------------------------------------

def test_the_initial_admin_is_break_glass(tmp_path):
    username, _ = admin_bootstrap(data_dir=tmp_path)
    assert _flagged() == [username]


def test_an_existing_admin_is_not_made_break_glass(tmp_path, admin):
    assert admin_bootstrap(data_dir=tmp_path) is None
    assert _flagged() == []


def _initadmin(settings, tmp_path) -> tuple[str, str]:
    settings.DATA_DIR = tmp_path
    out, err = StringIO(), StringIO()
    call_command("initadmin", stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_initadmin_says_the_admin_it_made_is_break_glass(settings, tmp_path):
    out, err = _initadmin(settings, tmp_path)
    assert "It is break-glass" in out and "`manage.py breakglass admin --remove`" in out
    assert err == ""


def test_initadmin_warns_when_passwords_are_off_without_single_sign_on_or_a_break_glass_password(
        settings, tmp_path, admin):
    settings.PASSWORD_LOGIN = False
    out, err = _initadmin(settings, tmp_path)
    assert "password sign-in is off" in out
    assert "no single sign-on is set up" in err
    assert "no active break-glass user has a password" in err


def test_initadmin_is_quiet_once_single_sign_on_and_a_break_glass_password_are_there(settings, tmp_path, admin):
    settings.PASSWORD_LOGIN = False
    settings.OIDC = {**settings.OIDC, "ISSUER": "https://id.example.com", "CLIENT_ID": "agentsite"}
    BreakGlass.objects.create(user=admin)
    assert _initadmin(settings, tmp_path)[1] == ""
    admin.set_unusable_password()
    admin.save(update_fields=["password"])
    assert "no active break-glass user has a password" in _initadmin(settings, tmp_path)[1]


def test_initadmin_with_the_first_admin_and_passwords_off_does_not_warn_about_break_glass(settings, tmp_path):
    settings.PASSWORD_LOGIN = False
    out, err = _initadmin(settings, tmp_path)
    assert "It is break-glass" in out
    assert "no active break-glass user" not in err
