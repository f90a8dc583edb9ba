"""Fixtures for the single sign-on tests: the test OpenID provider and a `serve` server signing in through it,
each started once for the whole run, and the helpers that read what a sign-in left behind.

- `oidc_provider` (session): a started tests/oidc provider; stopped at the end. Its `mode` is shared by every
  server signing in through it: a test that sets one takes `provider_mode`, which puts it back.
- `sso_server` (session): `serve` with its default workers, signing in through `oidc_provider`, answering with
  the worker that served (AGENTSITE_WORKER_HEADER=1) and trusting one proxy (AGENTSITE_TRUSTED_PROXIES=1), so that
  each test's `browser()` comes from its own address: rate limits and coalesced audit rows never mix tests.
- `browser()`: a fresh requests.Session (the provider keeps one log-in session per browser) from its own address.
"""

from __future__ import annotations

import base64
import itertools
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime
from typing import Any

import pytest
import requests

from tests.oidc.harness import OidcProvider, oidc_env
from tests.server import LiveServer

_addresses = itertools.count(1)
# What a failure page must never show: a JWT (each starts with the base64 of '{"'), a bearer token.
JWT_PREFIX = "eyJ"


def browser(ip: str | None = None, *, close: bool = False) -> requests.Session:
    """A browser with no cookies, behind one trusted proxy that names its address (a new one unless given).
    close: a new connection per request, so that a `serve` server's workers take turns."""
    http = requests.Session()
    if ip is None:
        number = next(_addresses)
        ip = f"10.46.{number // 250}.{number % 250 + 1}"
    http.headers["X-Forwarded-For"] = ip
    if close:
        http.headers["Connection"] = "close"
    http.ip = ip  # type: ignore[attr-defined]
    return http


def sso_env(provider: OidcProvider, **overrides: str) -> dict[str, str]:
    """oidc_env plus the worker header and one trusted proxy (see the module docstring)."""
    return oidc_env(provider, AGENTSITE_WORKER_HEADER="1", AGENTSITE_TRUSTED_PROXIES="1", **overrides)


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[OidcProvider]:
    provider = OidcProvider().start()
    try:
        yield provider
    finally:
        provider.stop()


@pytest.fixture
def provider_mode(oidc_provider: OidcProvider) -> Iterator[Callable[[str | None], None]]:
    """Sets the provider's mode for this test; the provider behaves again after it."""
    try:
        yield oidc_provider.mode
    finally:
        oidc_provider.mode(None)


class SsoServer:
    """A started LiveServer and an admin token to read its audit log with."""

    def __init__(self, server: LiveServer) -> None:
        self.server = server
        self.base_url = server.base_url
        self._admin_token = ""

    def admin_headers(self) -> dict[str, str]:
        if not self._admin_token:
            self._admin_token = self.server.login()["token"]
        return {"Authorization": f"Bearer {self._admin_token}"}

    def audit(self, action: str, **filters: str) -> list[dict[str, Any]]:
        """The audit events of one action, newest first (the first page)."""
        answer = requests.get(f"{self.base_url}/api/audit", params={"action": action, **filters},
                              headers=self.admin_headers(), timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.json()["results"]

    def audit_from(self, action: str, ip: str) -> list[dict[str, Any]]:
        """The events of one action whose client address is ip (a browser()'s)."""
        return [event for event in self.audit(action) if event["ip"] == ip]

    def rows_since(self, table: str, since: datetime) -> int:
        """How many rows of a table of the server's database were made at or after `since` (created_at)."""
        if self.server.database_url:
            import psycopg  # the PostgreSQL pass only

            with psycopg.connect(self.server.database_url) as conn:
                row = conn.execute(f'SELECT count(*) FROM "{table}" WHERE created_at >= %s', (since,)).fetchone()
                return int(row[0])  # type: ignore[index]
        # Django keeps SQLite's times as UTC text, 'YYYY-MM-DD HH:MM:SS.ffffff': they sort as they compare.
        text = since.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        with closing(sqlite3.connect(self.server.data_dir / "db.sqlite3")) as conn:
            return int(conn.execute(f'SELECT count(*) FROM "{table}" WHERE created_at >= ?', (text,)).fetchone()[0])


@pytest.fixture(scope="session")
def sso_server(oidc_provider: OidcProvider) -> Iterator[SsoServer]:
    server = LiveServer(env=sso_env(oidc_provider)).start()
    try:
        yield SsoServer(server)
    finally:
        server.stop()


def jwt_part(token: str, index: int) -> dict[str, Any]:
    """A JWT's header (0) or payload (1), unverified: what the test looks at, not what the server trusts."""
    part = token.split(".")[index]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
