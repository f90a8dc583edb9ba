"""The test OpenID provider (tests/oidc/provider.mjs, npm's oidc-provider) in a subprocess, and a sign-in driven
through it without a browser.

- `OidcProvider().start()`: installs the npm package on first use (`npm ci` into tests/oidc/node_modules, from the
  lock file), starts Node on a socket this process holds, and waits for its issuer line. Without Node or npm, or
  when the install or the start fails, `unavailable()` (a skip; under CI=true a failure).
- `provider.account(id, **claims)`, `provider.mode(name)`, `provider.log()`: the control API (provider.mjs).
- `oidc_env(provider, **overrides)`: the AGENTSITE_OIDC_* environment for a server that signs in through it.
- `sign_in(base_url, login)`: what a browser does, with requests: the login endpoint, the provider's log-in form,
  the callback, and the dashboard's POST /api/auth/oidc/session. Returns a `SignIn` with each step's answer.
  `abort=True` presses the log-in form's Cancel instead (the provider answers error=access_denied);
  `follow=False` stops at the callback URL without requesting it (a test then sends it where it wants).
"""

from __future__ import annotations

import fcntl
import json
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import requests

from tests.needs import unavailable
from tests.server import listening_socket

HERE = Path(__file__).resolve().parent
CLIENT_ID = "agentsite"
CLIENT_ID_ES256 = "agentsite-es"
CLIENT_SECRET = "test-client-secret-0123456789abcdef0123456789"
SCOPES = "openid profile email groups roles"
_install_lock = threading.Lock()


def _installed() -> None:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        unavailable("the sign-in tests need Node.js and npm (apt-get install nodejs npm) for the OpenID provider")
    with _install_lock, open(HERE / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another pytest process (a CI shard) may be installing it too
        if (HERE / "node_modules" / "oidc-provider" / "package.json").exists():
            return
        done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE,
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            unavailable(f"npm ci in tests/oidc failed: {done.stderr.strip()[-500:]}")


class OidcProvider:
    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.issuer = ""
        self.output: list[str] = []

    def start(self) -> OidcProvider:
        _installed()
        sock = listening_socket()
        port = sock.getsockname()[1]
        self.process = subprocess.Popen(
            [shutil.which("node") or "node", str(HERE / "provider.mjs"), str(port), str(sock.fileno())],
            cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, pass_fds=[sock.fileno()])
        sock.close()  # the child holds it now
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            if line.startswith("{"):
                self.issuer = json.loads(line)["issuer"]
                break
        if not self.issuer:
            self.process.wait(timeout=10)
            unavailable("the OpenID provider did not start: " + "".join(self.output)[-800:])
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def account(self, login: str, **claims: Any) -> None:
        requests.put(f"{self.issuer}/__test/accounts/{login}", json=claims, timeout=5).raise_for_status()

    def mode(self, name: str | None) -> None:
        requests.put(f"{self.issuer}/__test/mode", json={"mode": name}, timeout=5).raise_for_status()

    def log(self) -> list[dict[str, Any]]:
        return requests.get(f"{self.issuer}/__test/log", timeout=5).json()


def oidc_env(provider: OidcProvider, **overrides: str) -> dict[str, str]:
    env = {"AGENTSITE_OIDC_ISSUER": provider.issuer, "AGENTSITE_OIDC_CLIENT_ID": CLIENT_ID,
           "AGENTSITE_OIDC_CLIENT_SECRET": CLIENT_SECRET, "AGENTSITE_OIDC_SCOPES": SCOPES,
           "AGENTSITE_OIDC_NAME": "Test IdP"}
    env.update(overrides)
    return env


@dataclass
class SignIn:
    """A sign-in's steps: `callback` the callback's answer (not followed), `callback_url` the URL the provider sent
    the browser to, `tokens` the session endpoint's JSON (None when the callback failed)."""

    http: requests.Session
    login: requests.Response | None = None
    callback_url: str = ""
    callback: requests.Response | None = None
    tokens: dict[str, Any] | None = None
    steps: list[str] = field(default_factory=list)

    def workers(self) -> tuple[str | None, str | None]:
        """The processes that answered the login and the callback (servers with AGENTSITE_WORKER_HEADER=1)."""
        return tuple(answer.headers.get("X-Agentsite-Worker") if answer is not None else None  # type: ignore[return-value]
                     for answer in (self.login, self.callback))


def _follow_to_callback(http: requests.Session, response: requests.Response, login: str, steps: list[str],
                        abort: bool = False) -> str:
    """Follow the provider's redirects and log-in form until it sends the browser to the callback; its URL.
    abort: press the form's Cancel (the interaction's abort link) instead of logging in."""
    for _ in range(20):
        if response.is_redirect:
            target = urljoin(response.url, response.headers["Location"])
            steps.append(target)
            if "/api/auth/oidc/callback" in target:
                return target
            response = http.get(target, allow_redirects=False, timeout=10)
            continue
        form = re.search(r'<form[^>]*action="([^"]+)"', response.text)
        cancel = re.search(r'<a href="([^"]+/abort)"', response.text)
        if response.status_code == 200 and abort and cancel:
            response = http.get(urljoin(response.url, cancel.group(1)), allow_redirects=False, timeout=10)
            continue
        if response.status_code == 200 and form and 'name="login"' in response.text:
            uid_action = urljoin(response.url, form.group(1))
            response = http.post(uid_action, data={"prompt": "login", "login": login, "password": "any"},
                                 allow_redirects=False, timeout=10)
            continue
        if response.status_code == 200 and form and "confirm" in form.group(1):
            response = http.post(urljoin(response.url, form.group(1)), data={"prompt": "consent"},
                                 allow_redirects=False, timeout=10)
            continue
        raise AssertionError(f"the provider answered {response.status_code} at {response.url}: {response.text[:500]}")
    raise AssertionError(f"no callback after 20 steps: {steps}")


def start(base_url: str, http: requests.Session | None = None) -> tuple[requests.Session, requests.Response]:
    """GET the login endpoint (not followed)."""
    http = http or requests.Session()
    return http, http.get(f"{base_url}/api/auth/oidc/login", allow_redirects=False, timeout=10)


def sign_in(base_url: str, login: str, *, http: requests.Session | None = None, collect: bool = True,
            abort: bool = False, follow: bool = True) -> SignIn:
    http, first = start(base_url, http)
    result = SignIn(http=http, login=first)
    if not first.is_redirect:
        result.callback = first
        return result
    result.callback_url = _follow_to_callback(http, first, login, result.steps, abort=abort)
    if not follow:
        return result
    result.callback = http.get(result.callback_url, allow_redirects=False, timeout=30)
    if collect and result.callback.status_code == 302:
        answer = http.post(f"{base_url}/api/auth/oidc/session", timeout=10)
        result.tokens = answer.json() if answer.status_code == 200 else None
    return result
