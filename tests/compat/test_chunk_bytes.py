"""The /v1 stream's text chunks come from a per-stream template: byte for byte what encoding each chunk object
gives, whatever the text holds."""

from __future__ import annotations

import json

import pytest

from agentsite.agent.types import Finish, TextDelta
from agentsite.sse import sse_event
from compat import translate
from compat.engine import _chunks

TEXTS = ["plain", 'quotes " and \\ backslashes', "line\nbreaks\tand tabs", "ünïcödé 漢字 🙂", "\ud800 lone",
         "\x00 nul", "</script>"]


async def _events():
    for text in TEXTS:
        yield TextDelta(text)
    yield Finish("stop")


async def test_text_chunks_are_byte_for_byte_the_encoded_chunk_objects():
    chunks = [chunk async for chunk in _chunks(_events(), cid="chatcmpl-1", model='a "model"', include_usage=False)]
    created = json.loads(chunks[0][len(b"data: "):])["created"]
    for text, got in zip(TEXTS, chunks[1:1 + len(TEXTS)], strict=True):
        expected = sse_event(translate.chunk_object(cid="chatcmpl-1", created=created, model='a "model"',
                                                    delta={"content": text}))
        assert got == expected
        assert json.loads(got[len(b"data: "):])["choices"][0]["delta"]["content"] == text


@pytest.mark.parametrize(("env", "url", "expected"), [
    ({"HTTPS_PROXY": "http://proxy:3128"}, "https://api.example.com/v1", "http://proxy:3128"),
    ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "example.com"}, "https://api.example.com/v1", None),
    ({"HTTP_PROXY": "http://proxy:3128"}, "https://api.example.com/v1", None),
    ({"ALL_PROXY": "http://all:1"}, "http://llm.local/v1", "http://all:1"),
    ({}, "https://api.example.com/v1", None),
])
def test_the_upstream_proxy_comes_from_the_environment_as_before(monkeypatch, env, url, expected):
    from agentsite.agent.providers import http

    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "all_proxy",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    http._proxy_for.cache_clear()
    try:
        assert http._proxy_for(url) == expected
    finally:
        http._proxy_for.cache_clear()
