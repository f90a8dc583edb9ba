"""A connection's base URL may hold credentials: only administrators see connection details, always masked; a
masked URL sent back keeps the stored one; a `user:password@` beside an openai key is a 400 at save (never a
500 at call time); an anonymous /v1 caller's 502 names no credential, and neither do the logs."""

from __future__ import annotations

import logging

import pytest
from django.test import Client

from catalogue.models import Connection
from catalogue.selectors import config_cache_clear
from catalogue.services import config_update
from tests.fakes.llm import Error, Text
from tests.server import refusing_port

pytestmark = pytest.mark.django_db

PASSWORD = "pw-Secret-7781"
QUERY_KEY = "qk-Secret-5512"
API_KEY = "sk-Secret-9931"


def credentialed(url: str, *, user: str = "bob") -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{user}:{PASSWORD}@{rest}?key={QUERY_KEY}"


def assert_no_secret(text: str) -> None:
    for secret in (PASSWORD, QUERY_KEY, API_KEY):
        assert secret not in text, f"{secret!r} shown"


def configure(**changes) -> None:
    config_update(changes=changes)
    config_cache_clear()  # the update's on_commit never fires inside a test's transaction


def test_a_user_who_is_not_an_admin_sees_no_connection_details_in_the_config(owner_client):
    configure(provider="openai", base_url=credentialed("http://gw.example/v1"))
    body = owner_client.get("/api/config").json()
    assert not {"provider", "base_url", "api_key_set", "connection"} & set(body)
    assert {"model", "system_prompt", "tools", "compat_auth"} <= set(body)
    assert_no_secret(str(body))


def test_an_admin_sees_the_configs_base_url_with_its_credentials_masked(admin_client):
    configure(provider="anthropic", base_url=credentialed("http://gw.example/v1"), api_key=API_KEY)
    response = admin_client.get("/api/config")
    body = response.json()
    assert body["base_url"] == "http://bob:***@gw.example/v1?key=***"
    assert (body["provider"], body["api_key_set"]) == ("anthropic", True)
    assert_no_secret(response.content.decode())


def test_connections_show_their_base_url_masked_and_a_masked_one_sent_back_keeps_the_stored(admin_client):
    url = credentialed("http://gw.example/v1")
    created = admin_client.post("/api/connections", {"name": "gw", "provider": "openai", "base_url": url,
                                                     "models": ["m"]}, format="json")
    assert created.status_code == 201, created.content
    shown = created.json()["base_url"]
    assert shown == "http://bob:***@gw.example/v1?key=***"
    path = f"/api/connections/{created.json()['id']}"
    for response in (admin_client.get("/api/connections"), admin_client.get(path)):
        assert_no_secret(response.content.decode())

    patched = admin_client.patch(path, {"base_url": shown, "timeout_s": 9}, format="json")
    assert patched.status_code == 200, patched.content
    assert Connection.objects.get(name="gw").base_url == url  # not "***"

    moved = admin_client.patch(path, {"base_url": "http://bob:***@gw2.example/v2?key=***"}, format="json")
    assert moved.status_code == 200, moved.content  # edited around its masked parts: the credentials stay
    assert Connection.objects.get(name="gw").base_url == credentialed("http://gw2.example/v2")

    admin_client.patch(path, {"base_url": "http://gw3.example/v1"}, format="json")
    assert Connection.objects.get(name="gw").base_url == "http://gw3.example/v1"


def test_the_admin_site_shows_base_urls_masked(admin):
    Connection.objects.create(name="gw", provider="openai", base_url=credentialed("http://gw.example/v1"))
    client = Client()
    client.force_login(admin)
    listing = client.get("/admin/catalogue/connection/")
    change = client.get(f"/admin/catalogue/connection/{Connection.objects.get(name='gw').pk}/change/")
    assert listing.status_code == 200 and change.status_code == 200
    assert "bob:***@gw.example" in listing.content.decode()
    assert_no_secret(listing.content.decode() + change.content.decode())


@pytest.mark.parametrize("body", [
    {"name": "gw", "provider": "openai", "base_url": credentialed("http://gw.example/v1"), "api_key": API_KEY},
])
def test_userinfo_beside_an_openai_key_is_a_400_naming_both(admin_client, body):
    response = admin_client.post("/api/connections", body, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid" and {"base_url", "api_key"} <= set(error["details"])
    assert_no_secret(response.content.decode())


def test_adding_a_key_to_an_openai_connection_with_userinfo_is_a_400_and_anthropic_takes_both(admin_client):
    created = admin_client.post("/api/connections", {"name": "gw", "provider": "openai", "models": ["m"],
                                                     "base_url": credentialed("http://gw.example/v1")}, format="json")
    assert created.status_code == 201, created.content
    path = f"/api/connections/{created.json()['id']}"
    assert admin_client.patch(path, {"api_key": API_KEY}, format="json").status_code == 400
    switched = admin_client.patch(path, {"provider": "anthropic", "api_key": API_KEY}, format="json")
    assert switched.status_code == 200, switched.content
    configured = admin_client.patch("/api/config", {"provider": "openai", "api_key": API_KEY,
                                                    "base_url": credentialed("http://gw.example/v1")}, format="json")
    assert configured.status_code == 400 and configured.json()["error"]["code"] == "invalid"


def test_an_anonymous_v1_callers_502_names_no_credential_when_the_upstream_is_down(anon_client, caplog):
    configure(provider="openai", base_url=credentialed(f"http://127.0.0.1:{refusing_port()}/v1"), model="m")
    with caplog.at_level(logging.DEBUG):
        response = anon_client.post("/v1/chat/completions", {"model": "m", "messages": [
            {"role": "user", "content": "hi"}]}, format="json")
    assert response.status_code == 502, response.content
    assert "key=***" in response.json()["error"]["message"]
    assert_no_secret(response.content.decode())
    assert_no_secret(caplog.text)


def test_an_anonymous_v1_callers_502_names_no_credential_an_upstream_echoed(anon_client, fake_openai, caplog):
    fake_openai.script(lambda request: Error(500, f"cannot serve {request.target} for "
                                                  f"{request.headers.get('authorization')}"))
    configure(provider="openai", base_url=credentialed(fake_openai.base_url), model="m")
    with caplog.at_level(logging.DEBUG):
        response = anon_client.post("/v1/chat/completions", {"model": "m", "stream": True, "messages": [
            {"role": "user", "content": "hi"}]}, format="json")
    text = b"".join(response.streaming_content).decode() if response.streaming else response.content.decode()
    assert "cannot serve" in text and "[redacted]" in text
    assert_no_secret(text)
    assert_no_secret(caplog.text)


def test_a_stored_openai_connection_with_userinfo_and_a_key_answers_v1_with_the_key(anon_client, fake_openai):
    """Stored before the 400 existed (or outside the API): aiohttp refused the pair, and every call was a 500."""
    fake_openai.script(Text("hello"))
    configure(provider="openai", base_url=credentialed(fake_openai.base_url), api_key=API_KEY, model="m")
    response = anon_client.post("/v1/chat/completions", {"model": "m", "messages": [
        {"role": "user", "content": "hi"}]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["choices"][0]["message"]["content"] == "hello"
    assert fake_openai.requests[-1].headers["authorization"] == f"Bearer {API_KEY}"
