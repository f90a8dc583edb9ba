"""Registration is rate limited per client address (AGENTSITE_REGISTER_RATE_LIMIT accounts an hour)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.server import LiveServer

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
GOOD_PASSWORD = "a-long-fine-password"


def _register(client, username: str, password: str = GOOD_PASSWORD, **headers):
    return client.post("/api/auth/register", {"username": username, "password": password}, format="json", **headers)


def _assert_rate_limited(response) -> None:
    assert response.status_code == 429, response.content
    error = response.json()["error"]
    assert error["code"] == "rate_limited"
    assert 1 <= int(response["Retry-After"]) <= 3601
    assert error["details"]["retry_after"] == int(response["Retry-After"])


def test_registrations_past_the_limit_from_one_address_are_429_and_make_no_account(
        anon_client, settings, django_user_model):
    settings.REGISTER_RATE_LIMIT = 3
    for number in range(3):
        assert _register(anon_client, f"user{number}").status_code == 201
    _assert_rate_limited(_register(anon_client, "user3"))
    assert not django_user_model.objects.filter(username="user3").exists()


def test_failed_registrations_do_not_use_up_the_limit(anon_client, settings, owner):
    settings.REGISTER_RATE_LIMIT = 2
    for _ in range(5):
        assert _register(anon_client, "weakling", password="short").status_code == 400
        assert _register(anon_client, "owner").status_code == 400  # taken
    assert _register(anon_client, "first").status_code == 201
    assert _register(anon_client, "second").status_code == 201
    _assert_rate_limited(_register(anon_client, "third"))


def test_the_limit_counts_the_client_address_the_trusted_proxy_saw(anon_client, settings):
    settings.REGISTER_RATE_LIMIT = 1
    settings.TRUSTED_PROXY_COUNT = 1
    assert _register(anon_client, "alice", HTTP_X_FORWARDED_FOR="203.0.113.1").status_code == 201
    _assert_rate_limited(_register(anon_client, "alice2", HTTP_X_FORWARDED_FOR="203.0.113.1"))
    assert _register(anon_client, "bob", HTTP_X_FORWARDED_FOR="203.0.113.2").status_code == 201


def test_x_forwarded_for_does_not_dodge_the_limit_without_a_trusted_proxy(anon_client, settings):
    settings.REGISTER_RATE_LIMIT = 1
    settings.TRUSTED_PROXY_COUNT = 0
    assert _register(anon_client, "alice", HTTP_X_FORWARDED_FOR="203.0.113.1").status_code == 201
    _assert_rate_limited(_register(anon_client, "bob", HTTP_X_FORWARDED_FOR="203.0.113.2"))


@pytest.mark.e2e
def test_the_default_limit_is_ten_registrations_an_hour(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "AGENTSITE_REGISTER_RATE_LIMIT"}
    code = ("import json, django; from django.conf import settings; from accounts import ratelimit; django.setup();"
            "print(json.dumps([settings.REGISTER_RATE_LIMIT, ratelimit.REGISTER_RATE_WINDOW_S]))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**env, "DJANGO_SETTINGS_MODULE": "agentsite.settings",
                                 "AGENTSITE_DATA_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [10, 3600]


@pytest.fixture
def register_limited_server():
    server = LiveServer(command="daphne", env={"AGENTSITE_REGISTER_RATE_LIMIT": "2"}).start()
    yield server
    server.stop()


@pytest.mark.e2e
def test_a_live_server_answers_429_with_retry_after_past_the_limit(register_limited_server):
    url = f"{register_limited_server.base_url}/api/auth/register"
    for number in range(2):
        response = requests.post(url, json={"username": f"live{number}", "password": GOOD_PASSWORD}, timeout=10)
        assert response.status_code == 201, response.text
    response = requests.post(url, json={"username": "live2", "password": GOOD_PASSWORD}, timeout=10,
                             headers={"X-Forwarded-For": "198.51.100.7"})
    assert response.status_code == 429, response.text
    assert response.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(response.headers["Retry-After"]) <= 3601
    login = requests.post(f"{register_limited_server.base_url}/api/auth/login", timeout=10,
                          json={"username": "live2", "password": GOOD_PASSWORD})
    assert login.status_code == 401, "the refused registration made an account"
