"""A base URL with credentials in it (`user:password@`, a `?key=` query): the request goes to the endpoint's path
with the query after it and the userinfo as Basic auth, and no error, repr or log line shows a credential."""

from __future__ import annotations

import base64
import json
import logging

import pytest

from agentsite.agent.providers import get_provider
from agentsite.agent.providers.urls import join_url, mask_url, unmask_url
from agentsite.agent.routing import Connection
from agentsite.agent.types import ChatRequest, Message
from agentsite.core.errors import AppError
from tests.agent.conftest import API_KEY
from tests.fakes.llm import Error, Text
from tests.server import refusing_port

REQUEST = ChatRequest([Message("user", "Hello?")])
PASSWORD = "pw-Secret-7781"
QUERY_KEY = "qk-Secret-5512"
SECRETS = (PASSWORD, QUERY_KEY, API_KEY)


def with_credentials(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://bob:{PASSWORD}@{rest}?key={QUERY_KEY}&api-version=2024-06-01"


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} shown in {text!r}"


async def call(provider, mode: str):
    if mode == "stream":
        return [event async for event in provider.stream(REQUEST)]
    return await provider.complete(REQUEST)


@pytest.mark.parametrize("mode", ["stream", "complete"])
async def test_the_endpoint_path_comes_before_the_base_urls_query(upstream, mode):
    fake, settings = upstream
    fake.script(Text("hi"))
    provider = get_provider(settings.with_overrides(base_url=fake.base_url + "?key=" + QUERY_KEY))

    await call(provider, mode)

    sent = fake.requests[-1]
    assert sent.path == ("/v1/chat/completions" if settings.provider == "openai" else "/v1/messages")
    assert sent.query == {"key": [QUERY_KEY]}


async def test_discovery_keeps_the_query_after_the_models_path(upstream):
    fake, settings = upstream
    fake.models = ["m1"]
    provider = get_provider(settings.with_overrides(base_url=fake.base_url + "/?key=" + QUERY_KEY))

    assert await provider.list_models() == ["m1"]
    assert fake.requests[-1].path == "/v1/models" and fake.requests[-1].query == {"key": [QUERY_KEY]}


async def test_userinfo_goes_as_basic_auth_and_never_in_the_url(fake_openai):
    fake_openai.script(Text("hi"))
    settings_url = with_credentials(fake_openai.base_url)
    provider = get_provider_for("openai", settings_url, api_key="")

    await call(provider, "complete")

    sent = fake_openai.requests[-1]
    assert sent.headers["authorization"] == "Basic " + base64.b64encode(f"bob:{PASSWORD}".encode()).decode()
    assert sent.path == "/v1/chat/completions" and PASSWORD not in sent.target


@pytest.mark.parametrize("mode", ["stream", "complete"])
async def test_userinfo_with_an_api_key_answers_openai_sending_the_key(fake_openai, mode):
    """aiohttp refuses a URL's credentials beside an Authorization header (a ValueError: every call was a 500)."""
    fake_openai.script(Text("hi"))
    provider = get_provider_for("openai", with_credentials(fake_openai.base_url), api_key=API_KEY)

    await call(provider, mode)

    assert fake_openai.requests[-1].headers["authorization"] == f"Bearer {API_KEY}"


async def test_userinfo_with_an_api_key_answers_anthropic_sending_both(fake_anthropic):
    fake_anthropic.script(Text("hi"))
    provider = get_provider_for("anthropic", with_credentials(fake_anthropic.base_url), api_key=API_KEY)

    await call(provider, "complete")

    sent = fake_anthropic.requests[-1]
    assert sent.headers["x-api-key"] == API_KEY and sent.headers["authorization"].startswith("Basic ")


@pytest.mark.parametrize("mode", ["stream", "complete"])
async def test_a_refused_connection_names_the_url_masked(mode, caplog):
    base = with_credentials(f"http://127.0.0.1:{refusing_port()}/v1")
    provider = get_provider_for("openai", base, api_key=API_KEY)

    with caplog.at_level(logging.DEBUG), pytest.raises(AppError) as caught:
        await call(provider, mode)

    assert caught.value.status == 502 and "could not connect" in caught.value.message
    assert "key=***" in caught.value.message
    assert_no_secret(caught.value.message, repr(caught.value), json.dumps(caught.value.details), caplog.text)


@pytest.mark.parametrize("mode", ["stream", "complete"])
async def test_an_upstream_echoing_the_credentials_has_them_scrubbed(fake_openai, mode, caplog):
    fake_openai.script(lambda request: Error(401, f"Denied {request.target} with {request.headers['authorization']}"))
    provider = get_provider_for("openai", with_credentials(fake_openai.base_url), api_key="")

    with caplog.at_level(logging.DEBUG), pytest.raises(AppError) as caught:
        await call(provider, mode)

    basic = base64.b64encode(f"bob:{PASSWORD}".encode()).decode()
    assert caught.value.details["status"] == 401 and "Denied" in caught.value.message
    assert_no_secret(caught.value.message, caplog.text)
    assert basic not in caught.value.message and basic not in caplog.text


def test_a_base_url_is_shown_with_its_password_and_query_values_masked():
    assert mask_url("https://bob:pw@h:8/v1?key=abc&v=2&flag") == "https://bob:***@h:8/v1?key=***&v=***&***"
    assert mask_url("https://token@h/v1") == "https://***@h/v1"
    assert mask_url("https://h/v1") == "https://h/v1"
    assert mask_url("http://[::1") == "***"  # does not parse: nothing of it is shown


def test_a_masked_url_sent_back_gets_the_stored_credentials_where_it_shows_stars():
    stored = "http://bob:pw@h/v1?key=K1&key=K2&v=2024&LONE"
    assert unmask_url(mask_url(stored), stored) == stored
    assert unmask_url("https://bob:***@h2/v2?key=***&new=1", stored) == "https://bob:pw@h2/v2?key=K1&new=1"
    assert unmask_url("http://alice:***@h/v1", stored) == "http://alice:***@h/v1"  # another user: not bob's
    assert unmask_url("http://***@h/v1", "http://tok@h/v1") == "http://tok@h/v1"
    assert unmask_url("http://h/v1?key=***", "http://h/v1") == "http://h/v1?key=***"  # nothing behind it


def test_endpoints_join_onto_the_path_and_keep_the_query_after_it():
    assert join_url("http://u:p@h/v1/?k=1", "chat/completions") == "http://h/v1/chat/completions?k=1"
    assert join_url("http://h/v1?k=1", "v1/messages", drop_suffix="/v1") == "http://h/v1/messages?k=1"
    assert join_url("http://h", "v1/messages", drop_suffix="/v1") == "http://h/v1/messages"


def test_reprs_never_show_a_credential():
    base = with_credentials("http://h/v1")
    provider = get_provider_for("openai", base, api_key=API_KEY)
    connection = Connection("c", "openai", base, API_KEY)
    assert_no_secret(repr(provider), repr(connection))


def get_provider_for(provider: str, base_url: str, *, api_key: str):
    from agentsite.agent.config import AgentSettings

    return get_provider(AgentSettings(provider=provider, base_url=base_url, api_key=api_key, model="m",
                                      request_timeout=5.0))
