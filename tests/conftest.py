"""Shared fixtures: three users (owner, other_user, admin), API clients with their tokens, a live server."""

from __future__ import annotations

import os

import pytest
from rest_framework.test import APIClient

from tests.server import LiveServer

pytest_plugins = ["tests.fakes.fixtures"]

PASSWORD = "correct-horse-battery-9"


@pytest.fixture(autouse=True)
def _fresh_caches():
    from django.core.cache import cache

    from accounts.selectors import config_cache_clear

    _clear_own_cache(cache)
    config_cache_clear()
    yield
    config_cache_clear()


def _clear_own_cache(cache) -> None:
    from django.conf import settings

    if not settings.REDIS_URL:
        cache.clear()
        return
    client = cache._cache.get_client(write=True)  # RedisCache.clear() would FLUSHDB: live servers share it
    for key in client.scan_iter(f"{os.environ['AGENTSITE_CACHE_PREFIX']}:*"):
        client.delete(key)


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user(username="owner", password=PASSWORD)


@pytest.fixture
def other_user(django_user_model):
    return django_user_model.objects.create_user(username="other", password=PASSWORD)


@pytest.fixture
def admin(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password=PASSWORD, email="")


def client_for(user=None) -> APIClient:
    from accounts.tokens import token_pair_for

    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_pair_for(user)['token']}")
    return client


@pytest.fixture
def anon_client() -> APIClient:
    return APIClient()


@pytest.fixture
def owner_client(owner) -> APIClient:
    return client_for(owner)


@pytest.fixture
def other_client(other_user) -> APIClient:
    return client_for(other_user)


@pytest.fixture
def admin_client(admin) -> APIClient:
    return client_for(admin)


@pytest.fixture(scope="session")
def live_server_proc():
    """One real daphne server process (own data dir and database) shared by the session's e2e tests."""
    server = LiveServer()
    server.start()
    yield server
    server.stop()
