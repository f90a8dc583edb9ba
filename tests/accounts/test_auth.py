import pytest

from catalogue.models import AgentConfig
from tests.conftest import PASSWORD, client_for

pytestmark = pytest.mark.django_db


def test_login_returns_tokens_and_user(anon_client, owner):
    response = anon_client.post("/api/auth/login", {"username": "owner", "password": PASSWORD}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"token", "refresh", "user"}
    assert body["user"]["username"] == "owner"
    assert body["user"]["is_admin"] is False
    me = anon_client.get("/api/auth/me", HTTP_AUTHORIZATION=f"Bearer {body['token']}")
    assert me.status_code == 200
    assert me.json()["id"] == str(owner.pk)


def test_login_with_a_wrong_password_is_invalid_credentials(anon_client, owner):
    response = anon_client.post("/api/auth/login", {"username": "owner", "password": "nope-nope"}, format="json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_credentials"


def test_login_without_fields_is_invalid_with_details(anon_client):
    response = anon_client.post("/api/auth/login", {}, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert set(error["details"]) == {"username", "password"}


def test_register_creates_a_user_with_a_pbkdf2_hash(anon_client, django_user_model):
    response = anon_client.post("/api/auth/register", {"username": "newbie", "password": "a-long-fine-password"},
                                format="json")
    assert response.status_code == 201
    assert response.json()["user"]["username"] == "newbie"
    user = django_user_model.objects.get(username="newbie")
    assert user.password.startswith("pbkdf2_sha256$")
    assert "a-long-fine-password" not in user.password


@pytest.mark.parametrize("password", ["short", "password123", "12345678901"])
def test_register_rejects_weak_passwords(anon_client, password):
    response = anon_client.post("/api/auth/register", {"username": "weakling", "password": password}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert "password" in response.json()["error"]["details"]


def test_register_rejects_a_taken_name_case_insensitively(anon_client, owner):
    response = anon_client.post("/api/auth/register", {"username": "OWNER", "password": "a-long-fine-password"},
                                format="json")
    assert response.status_code == 400
    assert "username" in response.json()["error"]["details"]


def test_register_is_refused_when_registration_is_closed(anon_client, django_user_model):
    AgentConfig.objects.update_or_create(pk=1, defaults={"allow_registration": False})
    response = anon_client.post("/api/auth/register", {"username": "late", "password": "a-long-fine-password"},
                                format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "registration_closed"
    assert not django_user_model.objects.filter(username="late").exists()


def test_refresh_rotates_and_blacklists_the_old_refresh_token(anon_client, owner):
    first = anon_client.post("/api/auth/login", {"username": "owner", "password": PASSWORD}, format="json").json()
    rotated = anon_client.post("/api/auth/refresh", {"refresh": first["refresh"]}, format="json")
    assert rotated.status_code == 200
    assert set(rotated.json()) == {"token", "refresh"}
    assert rotated.json()["refresh"] != first["refresh"]
    again = anon_client.post("/api/auth/refresh", {"refresh": first["refresh"]}, format="json")
    assert again.status_code == 401
    assert again.json()["error"]["code"] == "token_invalid"
    me = anon_client.get("/api/auth/me", HTTP_AUTHORIZATION=f"Bearer {rotated.json()['token']}")
    assert me.status_code == 200


def test_refresh_with_garbage_is_token_invalid(anon_client):
    response = anon_client.post("/api/auth/refresh", {"refresh": "not.a.jwt"}, format="json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "token_invalid"


def test_logout_blacklists_the_refresh_token(anon_client, owner):
    pair = anon_client.post("/api/auth/login", {"username": "owner", "password": PASSWORD}, format="json").json()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {pair['token']}"}
    assert anon_client.post("/api/auth/logout", {"refresh": pair["refresh"]}, format="json", **auth).status_code == 204
    assert anon_client.post("/api/auth/refresh", {"refresh": pair["refresh"]}, format="json").status_code == 401


def test_logout_refuses_another_users_refresh_token(anon_client, owner, other_user):
    theirs = anon_client.post("/api/auth/login", {"username": "other", "password": PASSWORD}, format="json").json()
    response = client_for(owner).post("/api/auth/logout", {"refresh": theirs["refresh"]}, format="json")
    assert response.status_code == 400
    assert anon_client.post("/api/auth/refresh", {"refresh": theirs["refresh"]}, format="json").status_code == 200


def test_change_password_revokes_every_earlier_token(anon_client, owner):
    old = anon_client.post("/api/auth/login", {"username": "owner", "password": PASSWORD}, format="json").json()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {old['token']}"}
    response = anon_client.post("/api/auth/change-password",
                                {"old_password": PASSWORD, "new_password": "another-fine-password"}, format="json",
                                **auth)
    assert response.status_code == 200
    fresh = response.json()
    old_access = anon_client.get("/api/auth/me", **auth)
    assert old_access.status_code == 401
    assert old_access.json()["error"]["code"] == "token_invalid"
    assert anon_client.post("/api/auth/refresh", {"refresh": old["refresh"]}, format="json").status_code == 401
    assert anon_client.get("/api/auth/me", HTTP_AUTHORIZATION=f"Bearer {fresh['token']}").status_code == 200
    assert anon_client.post("/api/auth/refresh", {"refresh": fresh["refresh"]}, format="json").status_code == 200
    relogin = anon_client.post("/api/auth/login", {"username": "owner", "password": "another-fine-password"},
                               format="json")
    assert relogin.status_code == 200


def test_change_password_with_a_wrong_old_password_changes_nothing(owner_client, owner):
    response = owner_client.post("/api/auth/change-password",
                                 {"old_password": "wrong-one", "new_password": "another-fine-password"}, format="json")
    assert response.status_code == 400
    owner.refresh_from_db()
    assert owner.check_password(PASSWORD)


def test_protected_paths_answer_401_without_a_token(anon_client):
    for path in ("/api/auth/me", "/api/config"):
        response = anon_client.get(path)
        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == "not_authenticated"


def test_a_malformed_bearer_token_is_token_invalid(anon_client):
    response = anon_client.get("/api/auth/me", HTTP_AUTHORIZATION="Bearer abc.def.ghi")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "token_invalid"
