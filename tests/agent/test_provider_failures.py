"""Every upstream failure surfaces as one AppError upstream_error, with the provider's words and never the key: a 502,
or the upstream's own status when it refused the request as the caller's fault (a 4xx other than 401/403)."""

from __future__ import annotations

import json
import logging

import pytest

from agentsite.agent.providers import get_provider
from agentsite.agent.types import ChatRequest, Message
from agentsite.core.errors import AppError
from tests.agent.conftest import API_KEY
from tests.fakes.llm import Error, Hang, Raw, StreamError, Text, Truncated
from tests.server import refusing_port

REQUEST = ChatRequest([Message("user", "Hello?")])


async def stream_all(provider) -> list:
    return [event async for event in provider.stream(REQUEST)]


def assert_upstream_error(exc: AppError, status: int = 502) -> None:
    assert exc.code == "upstream_error"
    assert exc.status == status
    for text in (exc.message, repr(exc), json.dumps(exc.details)):
        assert API_KEY not in text


@pytest.mark.parametrize("mode", ["stream", "complete"])
async def test_a_refused_connection_is_an_upstream_error(upstream, mode):
    _fake, settings = upstream
    provider = get_provider(settings.with_overrides(base_url=f"http://127.0.0.1:{refusing_port()}"))

    with pytest.raises(AppError) as caught:
        await (stream_all(provider) if mode == "stream" else provider.complete(REQUEST))

    assert_upstream_error(caught.value)
    assert "could not connect" in caught.value.message and "refused" in caught.value.message
    assert "ssl" not in caught.value.message  # aiohttp's own text names its TLS setting for a plain http:// URL


@pytest.mark.parametrize("mode", ["stream", "complete"])
async def test_an_upstream_that_stops_answering_times_out_as_an_upstream_error(upstream, mode):
    fake, settings = upstream
    fake.script(Hang(text="partial"))
    provider = get_provider(settings.with_overrides(request_timeout=0.3))

    with pytest.raises(AppError) as caught:
        await (stream_all(provider) if mode == "stream" else provider.complete(REQUEST))

    assert_upstream_error(caught.value)
    assert "within 0.3 s" in caught.value.message
    await fake.wait_for_hangups(1, timeout=2)


@pytest.mark.parametrize("status", [400, 401, 404, 429, 500, 503])
@pytest.mark.parametrize("mode", ["stream", "complete"])
async def test_an_http_error_status_carries_the_providers_message_without_the_key(upstream, status, mode, caplog):
    fake, settings = upstream
    fake.script(Error(status, f"Incorrect API key provided: {API_KEY}. Find yours at the console."))
    provider = get_provider(settings)

    with caplog.at_level(logging.DEBUG), pytest.raises(AppError) as caught:
        await (stream_all(provider) if mode == "stream" else provider.complete(REQUEST))

    assert_upstream_error(caught.value, status if status in (400, 404, 429) else 502)
    assert caught.value.details["status"] == status
    assert "Incorrect API key provided: [redacted]. Find yours at the console." in caught.value.message
    assert API_KEY not in caplog.text


async def test_a_stream_of_garbage_is_an_upstream_error(upstream):
    fake, settings = upstream
    fake.script(Raw("data: {this is not json\n\n"))

    with pytest.raises(AppError) as caught:
        await stream_all(get_provider(settings))

    assert_upstream_error(caught.value)
    assert "malformed" in caught.value.message


async def test_a_stream_of_the_wrong_shape_is_an_upstream_error(upstream):
    fake, settings = upstream
    fake.script(Raw('data: {"choices": "many", "type": 7}\n\n'))

    with pytest.raises(AppError) as caught:
        await stream_all(get_provider(settings))

    assert_upstream_error(caught.value)
    assert "malformed" in caught.value.message


async def test_a_stream_that_ends_before_its_finish_is_an_upstream_error(upstream):
    fake, settings = upstream
    fake.script(Raw("", pieces=[": just a comment\n\n"]))

    with pytest.raises(AppError) as caught:
        await stream_all(get_provider(settings))

    assert_upstream_error(caught.value)
    assert "ended before the reply was complete" in caught.value.message


async def test_a_connection_cut_mid_stream_is_an_upstream_error_after_the_deltas_so_far(upstream):
    fake, settings = upstream
    fake.script(Truncated("half an answer"))
    seen = []

    with pytest.raises(AppError) as caught:
        async for event in get_provider(settings).stream(REQUEST):
            seen.append(event)

    assert_upstream_error(caught.value)
    assert "".join(event.text for event in seen) == "half an answer"


async def test_an_error_event_inside_the_stream_is_an_upstream_error(upstream):
    fake, settings = upstream
    fake.script(StreamError("so far", message="The service is overloaded."))

    with pytest.raises(AppError) as caught:
        await stream_all(get_provider(settings))

    assert_upstream_error(caught.value)
    assert "The service is overloaded." in caught.value.message


async def test_a_non_streaming_reply_that_is_not_json_is_an_upstream_error(upstream):
    fake, settings = upstream
    fake.script(Raw("<html>a proxy error page</html>", content_type="text/html"))

    with pytest.raises(AppError) as caught:
        await get_provider(settings).complete(REQUEST)

    assert_upstream_error(caught.value)
    assert "not JSON" in caught.value.message


async def test_a_non_streaming_reply_of_the_wrong_shape_is_an_upstream_error(upstream):
    fake, settings = upstream
    fake.script(Raw('{"choices": [{"message": 3}], "content": "nope"}', content_type="application/json"))

    with pytest.raises(AppError) as caught:
        await get_provider(settings).complete(REQUEST)

    assert_upstream_error(caught.value)


async def test_the_provider_repr_never_shows_the_key(upstream):
    _fake, settings = upstream

    assert API_KEY not in repr(get_provider(settings))
    assert API_KEY not in repr(settings)


async def test_an_unknown_provider_name_is_a_clear_error():
    from agentsite.agent.config import AgentSettings

    with pytest.raises(AppError) as caught:
        get_provider(AgentSettings(provider="gpt-local"))

    assert caught.value.code == "unavailable"
    assert "gpt-local" in caught.value.message


async def test_a_text_reply_after_failures_still_works_on_the_same_provider(upstream):
    fake, settings = upstream
    fake.script(Error(500, "boom"), Text("fine now"))
    provider = get_provider(settings)

    with pytest.raises(AppError):
        await stream_all(provider)
    events = await stream_all(provider)

    assert "".join(getattr(event, "text", "") for event in events) == "fine now"


@pytest.mark.parametrize("pieces", [
    [b"data: a\r\n\r\ndata: \xc3", b"\xa9\r", b"\n\r\ndata: last"],  # CRLF and a character split across chunks
    [b"data: a\r\rdata: \xc3\xa9\r\r", b"data: last"],  # bare CRs
    [b"data: a\n\ndata: \xc3\xa9\n", b"\ndata: last"],
    # a field name split between chunks; a comment; no final blank line
    [b"data: a\n\nda", b"ta: \xc3\xa9\n\n: a comment\nevent: x\ndata: last\n"],
])
def test_sse_lines_split_at_any_line_break_however_the_chunks_fall(pieces):
    from agentsite.agent.providers.http import SseDecoder

    decoder = SseDecoder()
    batches = [[event.data for event in decoder.feed(piece)] for piece in pieces] + [[e.data for e in decoder.end()]]
    assert [data for batch in batches for data in batch] == ["a", "é", "last"]
    assert batches[0] == ["a"]  # an event is given out with the chunk that completes it, never held for the next
