"""GET /api/auth/options: what the log-in form needs to know before anyone logs in, read without a token."""

import pytest

from catalogue.services import config_update

pytestmark = pytest.mark.django_db


def test_anyone_reads_whether_registration_is_open(anon_client):
    response = anon_client.get("/api/auth/options")
    assert response.status_code == 200
    assert response.json() == {"registration_open": True, "password_login": True, "sso": []}

    config_update(changes={"allow_registration": False})
    assert anon_client.get("/api/auth/options").json() == {"registration_open": False, "password_login": True,
                                                             "sso": []}


def test_a_bad_token_does_not_stop_the_options_read(anon_client):
    anon_client.credentials(HTTP_AUTHORIZATION="Bearer not-a-token")
    response = anon_client.get("/api/auth/options")
    assert response.status_code == 200, response.content


def test_the_options_are_read_only(anon_client, admin_client):
    for client in (anon_client, admin_client):
        for method in ("post", "put", "patch", "delete"):
            response = getattr(client, method)("/api/auth/options", {}, format="json")
            assert response.status_code == 405, (method, response.content)
            assert response.json()["error"]["code"] == "method_not_allowed"
