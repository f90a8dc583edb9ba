"""The /v1 stream's text chunks come from a per-stream template: byte for byte what encoding each chunk object
gives, whatever the text holds."""

from __future__ import annotations

import json
import re

import pytest

from agentsite.agent.types import Finish, TextDelta
from agentsite.core.sse import sse_event
from compat import translate
from compat.engine import _chunks

TEXTS = ["plain", 'quotes " and \\ backslashes', "line\nbreaks\tand tabs", "ünïcödé 漢字 🙂", "\ud800 lone",
         "\x00 nul", "</script>"]


async def _batches(size: int):
    events = [*(TextDelta(text) for text in TEXTS), Finish("stop")]
    for start in range(0, len(events), size):
        yield events[start:start + size]


async def _pieces(size: int, **options) -> list[bytes]:
    """What _chunks writes for the events in batches of `size`, given as Completion.chunks() gives them."""
    batches = _batches(size)
    first = await anext(batches)
    return [piece async for piece in _chunks(first, batches, **options)]


def _sse_events(body: bytes) -> list[bytes]:
    return [event + b"\n\n" for event in body.split(b"\n\n") if event]


async def test_text_chunks_are_byte_for_byte_the_encoded_chunk_objects():
    pieces = await _pieces(1, cid="chatcmpl-1", model='a "model"', include_usage=False)
    events = _sse_events(b"".join(pieces))
    created = json.loads(events[0][len(b"data: "):])["created"]
    for text, got in zip(TEXTS, events[1:1 + len(TEXTS)], strict=True):
        expected = sse_event(translate.chunk_object(cid="chatcmpl-1", created=created, model='a "model"',
                                                    delta={"content": text}))
        assert got == expected
        assert json.loads(got[len(b"data: "):])["choices"][0]["delta"]["content"] == text


async def test_events_ready_together_leave_as_one_piece_with_the_same_bytes():
    one_by_one = await _pieces(1, cid="c", model="m", include_usage=True)
    together = await _pieces(3, cid="c", model="m", include_usage=True)
    # A piece per batch that holds text (the role chunk goes with the first), then the finish, usage and [DONE].
    assert len(one_by_one) == len(TEXTS) + 1 and len(together) == -(-(len(TEXTS) + 1) // 3) + 1
    strip = [_created_zeroed(event) for event in _sse_events(b"".join(one_by_one))]
    assert strip == [_created_zeroed(event) for event in _sse_events(b"".join(together))]
    assert strip[-1] == b"data: [DONE]\n\n"


def _created_zeroed(event: bytes) -> bytes:
    return re.sub(rb'"created": \d+', b'"created": 0', event)


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
