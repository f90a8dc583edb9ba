"""A real `serve` with AGENTSITE_PASSWORD_LOGIN=0: on a first start its initial admin (break-glass) signs in and
nobody registers; on an install whose users signed in with passwords before, their passwords stop working and
their tokens and keys do not; the operator flags a user with `manage.py breakglass` while it runs; a value the
variable cannot take stops `serve` naming it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import requests

from tests.server import ROOT, LiveServer

pytestmark = pytest.mark.e2e

PASSWORD = "a-long-fine-password"


def _post(server: LiveServer, path: str, body: dict, token: str | None = None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=10)


def _me(server: LiveServer, credential: str) -> requests.Response:
    return requests.get(f"{server.base_url}/api/auth/me", headers={"Authorization": f"Bearer {credential}"},
                        timeout=10)


def _code(response: requests.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def _login(server: LiveServer, username: str, password: str) -> requests.Response:
    return _post(server, "/api/auth/login", {"username": username, "password": password})


def _breakglass(server: LiveServer, *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", "breakglass", *args], cwd=ROOT, env=server.env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_first_start_with_passwords_off_lets_in_its_initial_admin_and_nobody_registers(tmp_path):
    server = LiveServer(data_dir=str(tmp_path), env={"AGENTSITE_PASSWORD_LOGIN": "0"})
    try:
        server.start()
        log = server.log_path.read_text()
        assert "It is break-glass" in log and "no single sign-on is set up" in log, log
        pair = server.login()  # the password from initial_admin.txt
        me = _me(server, pair["token"])
        assert me.status_code == 200 and me.json()["is_admin"] is True, me.text
        assert _code(_login(server, "admin", "not-the-password")) == (403, "password_login_disabled")
        assert _code(_post(server, "/api/auth/register", {"username": "newbie", "password": PASSWORD})) == \
            (403, "registration_closed")
        options = requests.get(f"{server.base_url}/api/auth/options", timeout=10).json()
        assert (options["password_login"], options["registration_open"]) == (False, False)
        assert "admin" in _breakglass(server, "--list").split()
    finally:
        server.stop()


def _admin_form_login(server: LiveServer, username: str, password: str) -> requests.Session:
    browser = requests.Session()
    form = browser.get(f"{server.base_url}/admin/login/", timeout=10)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    answer = browser.post(f"{server.base_url}/admin/login/?next=/admin/", timeout=10, allow_redirects=False,
                          data={"username": username, "password": password, "csrfmiddlewaretoken": token,
                                "next": "/admin/"}, headers={"Referer": f"{server.base_url}/admin/login/"})
    assert answer.status_code in (200, 302), answer.text[:500]
    return browser


def test_turning_passwords_off_refuses_a_users_password_but_not_their_token_or_key_nor_the_admin():
    server = LiveServer()
    try:
        server.start()
        registered = _post(server, "/api/auth/register", {"username": "alice", "password": PASSWORD})
        assert registered.status_code == 201, registered.text
        pair = registered.json()
        key = _post(server, "/api/keys", {"name": "script", "scopes": ["api"]}, token=pair["token"])
        assert key.status_code == 201, key.text
        server.stop(drop_database=False)

        server.extra_env["AGENTSITE_PASSWORD_LOGIN"] = "0"
        server.start()
        assert _code(_login(server, "alice", PASSWORD)) == (403, "password_login_disabled")
        for credential in (pair["token"], key.json()["key"]):
            assert _me(server, credential).json()["username"] == "alice"
        assert _post(server, "/api/auth/refresh", {"refresh": pair["refresh"]}).status_code == 200
        assert _code(_post(server, "/api/auth/register", {"username": "bob", "password": PASSWORD})) == \
            (403, "registration_closed")
        assert server.login()["user"]["username"] == "admin"
        admin_site = _admin_form_login(server, "admin", server.admin_password)
        assert admin_site.get(f"{server.base_url}/admin/", timeout=10, allow_redirects=False).status_code == 200

        # The operator lets alice in from a shell, while the server runs, and takes it back.
        _breakglass(server, "alice")
        assert _login(server, "alice", PASSWORD).status_code == 200
        _breakglass(server, "alice", "--remove")
        assert _code(_login(server, "alice", PASSWORD)) == (403, "password_login_disabled")
    finally:
        server.stop()


def test_serve_will_not_start_on_a_value_it_cannot_read_and_names_the_variable(tmp_path):
    env = {**LiveServer(data_dir=str(tmp_path), database_url="").env(), "AGENTSITE_PASSWORD_LOGIN": "maybe"}
    done = subprocess.run([sys.executable, "manage.py", "serve", "--port", "0"], cwd=ROOT, env=env, timeout=60,
                          capture_output=True, text=True)
    assert done.returncode != 0
    assert "AGENTSITE_PASSWORD_LOGIN must be one of" in done.stderr and "'maybe'" in done.stderr, done.stderr
    assert "serving on" not in done.stdout
