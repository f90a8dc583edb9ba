"""AGENTSITE_PASSWORD_LOGIN=0: every password door (POST /api/auth/login, registration, the Django admin's form,
a password change) refuses everyone but the users `manage.py breakglass` flagged, with one answer that tells a
caller nothing; tokens and API keys already issued keep working. With it on, the flag changes nothing."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import AuditEvent, BreakGlass
from accounts.services import key_create
from accounts.tokens import token_pair_for
from agentsite.core.env import env_bool
from tests.conftest import PASSWORD, client_for

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "another-fine-password"


@pytest.fixture
def off(settings):
    settings.PASSWORD_LOGIN = False


@pytest.fixture
def operator(django_user_model):
    """A break-glass admin, as `manage.py breakglass operator` leaves it."""
    user = django_user_model.objects.create_superuser(username="operator", password=PASSWORD, email="")
    BreakGlass.objects.create(user=user)
    return user


def _login(username: str, password: str, address: str = "127.0.0.1"):
    return APIClient().post("/api/auth/login", {"username": username, "password": password}, format="json",
                            REMOTE_ADDR=address)


def _refused(response) -> None:
    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "password_login_disabled"


# --- POST /api/auth/login -----------------------------------------------------------------------------------

def test_a_normal_user_with_the_right_password_is_refused(off, owner):
    _refused(_login("owner", PASSWORD))


def test_every_refusal_is_the_same_answer_so_it_tells_nobody_who_is_break_glass(off, owner, operator):
    answers = {
        "right password, not break-glass": _login("owner", PASSWORD, "10.0.0.1"),
        "wrong password, not break-glass": _login("owner", "wrong-password", "10.0.0.2"),
        "wrong password, break-glass": _login("operator", "wrong-password", "10.0.0.3"),
        "unknown user": _login("nobody", PASSWORD, "10.0.0.4"),
    }
    for answer in answers.values():
        _refused(answer)
    # Byte for byte, once each request's own id is taken out (it is in the body and a header).
    bodies = {answer.content.replace(answer.json()["error"]["request_id"].encode(), b"<id>")
              for answer in answers.values()}
    assert len(bodies) == 1, bodies
    headers = {tuple(sorted((name, value) for name, value in answer.headers.items() if name.lower() != "x-request-id"))
               for answer in answers.values()}
    assert len(headers) == 1, [dict(header) for header in headers]


def test_a_break_glass_user_signs_in_with_their_password_and_the_tokens_work(off, operator):
    answer = _login("operator", PASSWORD)
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["user"]["username"] == "operator" and body["user"]["is_admin"] is True
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {body['token']}")
    assert client.get("/api/auth/me").json()["username"] == "operator"
    rotated = APIClient().post("/api/auth/refresh", {"refresh": body["refresh"]}, format="json")
    assert rotated.status_code == 200, rotated.content


def test_a_deactivated_break_glass_user_is_refused(off, operator):
    operator.is_active = False
    operator.save(update_fields=["is_active"])
    _refused(_login("operator", PASSWORD))


def test_the_refusals_are_audited_as_refused_and_counted_in_one_row(off, owner, operator):
    for _ in range(3):
        _refused(_login("owner", PASSWORD))
        _refused(_login("operator", "wrong-password"))
    rows = list(AuditEvent.objects.filter(action="auth.login"))
    assert [(row.outcome, row.details, row.count) for row in rows] == [
        ("refused", {"reason": "password_login_disabled"}, 6)]
    assert rows[0].actor_id is None and rows[0].actor_name == "owner"


def test_a_break_glass_sign_in_is_audited_as_one(off, operator):
    assert _login("operator", PASSWORD).status_code == 200
    row = AuditEvent.objects.get(action="auth.login")
    assert (row.outcome, row.actor_id, row.details) == ("success", operator.pk,
                                                       {"method": "password", "break_glass": True})


def test_the_login_rate_limit_still_applies_to_break_glass_users(off, settings, owner, operator):
    for attempt in range(settings.LOGIN_RATE_LIMIT):
        _refused(_login("owner", PASSWORD)) if attempt % 2 else _refused(_login("operator", "wrong"))
    limited = _login("operator", PASSWORD)
    assert limited.status_code == 429, limited.content
    assert limited.json()["error"]["code"] == "rate_limited"
    assert _login("operator", PASSWORD, address="10.9.9.9").status_code == 200  # another address: its own budget


# --- registration, the options, change-password -------------------------------------------------------------

def test_registration_is_closed(off, django_user_model):
    for body in ({"username": "newbie", "password": "a-long-fine-password"}, {}):
        answer = APIClient().post("/api/auth/register", body, format="json")
        assert answer.status_code == 403, answer.content
        assert answer.json()["error"]["code"] == "registration_closed"
    assert not django_user_model.objects.filter(username="newbie").exists()


def test_the_options_say_password_login_and_registration_are_off(off):
    options = APIClient().get("/api/auth/options").json()
    assert (options["password_login"], options["registration_open"]) == (False, False)


def test_tokens_and_api_keys_issued_before_keep_working(owner, settings):
    pair = token_pair_for(owner)
    _, secret = key_create(user=owner, name="script", scopes=["api"])
    settings.PASSWORD_LOGIN = False
    for credential in (pair["token"], secret):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
        answer = client.get("/api/auth/me")
        assert answer.status_code == 200, answer.content
        assert answer.json()["username"] == "owner"
    rotated = APIClient().post("/api/auth/refresh", {"refresh": pair["refresh"]}, format="json")
    assert rotated.status_code == 200, rotated.content


def _change(user, old: str):
    return client_for(user).post("/api/auth/change-password", {"old_password": old, "new_password": NEW_PASSWORD},
                                 format="json")


def test_a_password_change_is_refused_to_a_user_who_is_not_break_glass(off, owner):
    _refused(_change(owner, PASSWORD))
    owner.refresh_from_db()
    assert owner.check_password(PASSWORD)
    row = AuditEvent.objects.get(action="auth.password_change")
    assert (row.outcome, row.details) == ("refused", {"code": "password_login_disabled"})


def test_a_break_glass_user_changes_their_password_and_signs_in_with_the_new_one(off, operator):
    assert _change(operator, PASSWORD).status_code == 200
    _refused(_login("operator", PASSWORD))
    assert _login("operator", NEW_PASSWORD).status_code == 200


# --- the Django admin's log-in form --------------------------------------------------------------------------

def _admin_login(username: str, password: str) -> tuple[Client, object]:
    """The admin's form as a browser posts it: its CSRF cookie and the form's hidden token."""
    browser = Client(enforce_csrf_checks=True)
    form = browser.get("/admin/login/?next=/admin/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.content.decode()).group(1)
    answer = browser.post("/admin/login/?next=/admin/", {"username": username, "password": password,
                                                         "csrfmiddlewaretoken": token, "next": "/admin/"})
    return browser, answer


def test_the_admin_form_refuses_an_admin_who_is_not_break_glass(off, admin):
    browser, answer = _admin_login("root", PASSWORD)
    assert answer.status_code == 200  # the form again, with its error
    assert b"errornote" in answer.content
    assert browser.get("/admin/").status_code == 302


def test_the_admin_form_admits_a_break_glass_admin(off, operator):
    browser, answer = _admin_login("operator", PASSWORD)
    assert answer.status_code == 302 and answer["Location"] == "/admin/"
    assert browser.get("/admin/").status_code == 200


def test_turning_passwords_off_ends_the_admin_sessions_of_everyone_but_break_glass_users(settings, admin, operator):
    browsers = {}
    for name in ("root", "operator"):
        browsers[name], answer = _admin_login(name, PASSWORD)
        assert answer.status_code == 302, name
    settings.PASSWORD_LOGIN = False
    assert browsers["root"].get("/admin/").status_code == 302
    assert browsers["operator"].get("/admin/").status_code == 200


def test_the_admin_shows_the_break_glass_users_but_cannot_add_one(operator):
    browser, _ = _admin_login("operator", PASSWORD)
    assert b"operator" in browser.get("/admin/accounts/breakglass/").content
    assert browser.get("/admin/accounts/breakglass/add/").status_code == 403


# --- with it on (the default) --------------------------------------------------------------------------------

def test_with_password_login_on_the_break_glass_flag_changes_nothing(settings, owner, operator, admin):
    assert settings.PASSWORD_LOGIN is True
    for name in ("owner", "operator"):
        answer = _login(name, PASSWORD)
        assert answer.status_code == 200, answer.content
        wrong = _login(name, "wrong-password")
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_credentials"
    assert {tuple(row.details.items()) for row in AuditEvent.objects.filter(action="auth.login", outcome="success")} \
        == {(("method", "password"),)}
    assert _change(owner, PASSWORD).status_code == 200
    assert _admin_login("root", PASSWORD)[1].status_code == 302
    options = APIClient().get("/api/auth/options").json()
    assert (options["password_login"], options["registration_open"]) == (True, True)
    registered = APIClient().post("/api/auth/register", {"username": "newbie", "password": "a-long-fine-password"},
                                  format="json")
    assert registered.status_code == 201, registered.content


# --- the variable ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "expected"), [("0", False), ("false", False), ("off", False), ("no", False),
                                               ("1", True), ("true", True), (" On ", True), ("yes", True)])
def test_the_variable_reads_the_usual_words(monkeypatch, raw, expected):
    monkeypatch.setenv("AGENTSITE_PASSWORD_LOGIN", raw)
    assert env_bool("AGENTSITE_PASSWORD_LOGIN", True) is expected


def test_the_variable_is_on_when_unset(monkeypatch):
    monkeypatch.delenv("AGENTSITE_PASSWORD_LOGIN", raising=False)
    assert env_bool("AGENTSITE_PASSWORD_LOGIN", True) is True


@pytest.mark.parametrize("raw", ["maybe", "2", "disabled"])
def test_a_value_it_cannot_read_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("AGENTSITE_PASSWORD_LOGIN", raw)
    with pytest.raises(ImproperlyConfigured, match="AGENTSITE_PASSWORD_LOGIN"):
        env_bool("AGENTSITE_PASSWORD_LOGIN", True)
