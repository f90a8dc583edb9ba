"""Secrets are scrubbed out of an upstream's error words as whole tokens: a secret of 8+ characters (the key, a
header's value, a Bearer token, a base URL's password or query value) wherever it stands, with the run of key
characters around it; a shorter one is not looked for at all, so the key `x` leaves "maximum context" whole."""

from __future__ import annotations

import logging

import pytest

from agentsite.agent.providers.anthropic import AnthropicProvider
from agentsite.agent.providers.http import redact
from agentsite.agent.providers.openai import OpenAIProvider
from agentsite.agent.types import ChatRequest, Message
from agentsite.core.errors import AppError
from catalogue.selectors import config_cache_clear
from catalogue.services import config_update
from tests.fakes.llm import Error

REQUEST = ChatRequest([Message("user", "Hello?")])
CONTEXT_ERROR = "This model's maximum context length exceeded: max 8192 tokens, xx-large prompt."
KEY = "gw-K3y-0a9b8c7d"


async def error_from(provider) -> AppError:
    with pytest.raises(AppError) as caught:
        await provider.complete(REQUEST)
    return caught.value


@pytest.mark.django_db
@pytest.mark.parametrize(("upstream_status", "status"), [(400, 400), (500, 502)])
def test_the_key_x_leaves_an_upstream_error_through_v1_unmangled(anon_client, fake_openai, upstream_status, status):
    config_update(changes={"provider": "openai", "base_url": fake_openai.base_url, "api_key": "x", "model": "m"})
    config_cache_clear()  # the update's on_commit never fires inside a test's transaction
    fake_openai.script(Error(upstream_status, CONTEXT_ERROR))

    response = anon_client.post("/v1/chat/completions", {"model": "m", "messages": [
        {"role": "user", "content": "hi"}]}, format="json")

    assert response.status_code == status, response.content
    assert CONTEXT_ERROR in response.json()["error"]["message"]
    assert "[redacted]" not in response.content.decode()


@pytest.mark.parametrize("echoed", [f"key {KEY} is wrong", f'"{KEY}"', f"Bearer {KEY}", f"({KEY}).", f"key={KEY}&",
                                    f"'{KEY}',", f"<{KEY}>", f"{KEY}\n"])
async def test_a_key_of_8_or_more_characters_echoed_by_the_upstream_is_redacted(fake_openai, echoed, caplog):
    fake_openai.script(Error(400, f"Rejected: {echoed} (maximum context)"))
    provider = OpenAIProvider(base_url=fake_openai.base_url, api_key=KEY, model="m")

    with caplog.at_level(logging.DEBUG):
        error = await error_from(provider)

    assert error.status == 400 and "[redacted]" in error.message and "maximum context" in error.message
    assert KEY not in error.message and KEY not in caplog.text


@pytest.mark.parametrize("token", [f"{KEY}xyz", f"sk-{KEY}", f"my_{KEY}_2"])
async def test_a_key_inside_a_longer_token_blanks_the_whole_token_and_no_more(fake_openai, token):
    fake_openai.script(Error(400, f"The token {token} is not known here."))
    provider = OpenAIProvider(base_url=fake_openai.base_url, api_key=KEY, model="m")

    error = await error_from(provider)

    assert "The token [redacted] is not known here." in error.message


@pytest.mark.parametrize(("key", "redacted"), [("k-12345", False), ("k-123456", True)])
async def test_a_key_is_looked_for_from_8_characters_on(fake_openai, key, redacted):
    fake_openai.script(Error(500, f"Denied: {key}."))
    provider = OpenAIProvider(base_url=fake_openai.base_url, api_key=key, model="m")

    error = await error_from(provider)

    assert ("Denied: [redacted]." in error.message) is redacted
    assert (key in error.message) is not redacted


@pytest.mark.parametrize("status", [400, 500])
async def test_header_values_of_8_or_more_characters_are_redacted_whole(fake_anthropic, status):
    headers = {"X-Gateway-Key": "gk-7766554433", "Authorization": "Bearer tok-99887766", "X-Team": "red-7"}
    fake_anthropic.script(lambda request: Error(status, "Denied for {} and {} and {}, team {}.".format(
        request.headers["x-gateway-key"], request.headers["authorization"], "tok-99887766", request.headers["x-team"])))
    provider = AnthropicProvider(base_url=fake_anthropic.base_url, api_key="ak-short", model="m", headers=headers)

    error = await error_from(provider)

    assert "Denied for [redacted] and [redacted] and [redacted], team red-7." in error.message
    assert "7766554433" not in error.message and "99887766" not in error.message


def test_redact_replaces_no_piece_of_a_word_and_keeps_the_text_without_secrets_as_it_is():
    assert redact("maximum context exceeded", ("x", "", "con")) == "maximum context exceeded"
    assert redact("a password: passwords12!", ("passwords12",)) == "a password: [redacted]!"
    assert redact("ab.cdefghij.kl", ("cdefghij",)) == "ab.[redacted].kl"
