"""The router (agentsite.agent.routing) against real fake upstreams on loopback: routing by name, the exact
fallback rules, balance by weight, the cool-down, discovery, and the agent loop going through it."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace

import pytest

from agentsite.agent.config import AgentSettings
from agentsite.agent.loop import run_agent
from agentsite.agent.providers import PROVIDERS
from agentsite.agent.routing import Alias, AliasTarget, Attempts, Catalogue, Connection, Router, resolve
from agentsite.agent.types import ChatRequest, Message, ModelSettings, TextDelta
from agentsite.core.errors import AppError
from tests.fakes.llm import Error, FakeOpenAI, Hang, Raw, StreamError, Text, Truncated
from tests.server import refusing_port

REQUEST = ChatRequest([Message("user", "Hello?")], settings=ModelSettings(model="ignored"))


@pytest.fixture(scope="module")
def second_openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def hosted(fake_openai):
    return fake_openai


@pytest.fixture
def local(second_openai_server):
    second_openai_server.reset()
    return second_openai_server


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def catalogue(hosted, local, anthropic=None, *, strategy="fallback", weights=(1, 1), timeout=5.0,
              hosted_url=None, local_enabled=True) -> Catalogue:
    connections = [
        Connection("hosted", "openai", hosted_url or hosted.base_url, "sk-hosted", timeout_s=timeout,
                   models=("big",)),
        Connection("local", "openai", local.base_url, "", timeout_s=timeout, models=("small",), enabled=local_enabled),
    ]
    if anthropic is not None:
        connections.append(Connection("claude", "anthropic", anthropic.base_url, "sk-ant", models=("sonnet",)))
    alias = Alias("smart", strategy, (AliasTarget("hosted/big", weights[0]), AliasTarget("local/small", weights[1])))
    return Catalogue(connections, [alias], default_connection="hosted", default_model="smart")


async def stream_text(router: Router, route, attempts: Attempts | None = None) -> str:
    parts = []
    async for batch in router.stream_batches(route, REQUEST, attempts):
        parts += [event.text for event in batch if isinstance(event, TextDelta)]
    return "".join(parts)


# --- resolving names ----------------------------------------------------------------------------------------

def test_names_resolve_to_their_connection_and_model(hosted, local):
    cat = catalogue(hosted, local)
    route = cat.resolve("local/small")
    assert [(t.entry, t.connection.name, t.model) for t in route.targets] == [("local/small", "local", "small")]
    assert not route.alias
    # A bare name resolves against the default connection, as config models did before connections.
    assert [t.entry for t in cat.resolve("big").targets] == ["hosted/big"]
    alias = cat.resolve("smart")
    assert alias.alias and [t.entry for t in alias.targets] == ["hosted/big", "local/small"]
    assert cat.resolve("").name == "smart"  # empty: the default model


@pytest.mark.parametrize("name", ["nope", "local/big", "ghost/small", "hosted/"])
def test_an_unknown_model_is_a_404_naming_it(hosted, local, name):
    with pytest.raises(AppError) as caught:
        catalogue(hosted, local).resolve(name)
    assert (caught.value.code, caught.value.status) == ("model_not_found", 404)
    assert repr(name) in caught.value.message


def test_a_disabled_connections_models_vanish_and_its_alias_targets_are_skipped(hosted, local):
    cat = catalogue(hosted, local, local_enabled=False)
    assert "local/small" not in cat.names() and "hosted/big" in cat.names()
    with pytest.raises(AppError):
        cat.resolve("local/small")
    assert [t.entry for t in cat.resolve("smart").targets] == ["hosted/big"]


def test_settings_without_a_catalogue_are_one_default_connection():
    settings = AgentSettings(provider="openai", base_url="http://127.0.0.1:9", model="m")
    route = resolve("", settings)
    assert [(t.entry, t.connection.base_url) for t in route.targets] == [("default/m", "http://127.0.0.1:9")]
    assert [t.entry for t in resolve("m", settings).targets] == ["default/m"]


# --- routing and fallback -------------------------------------------------------------------------------------

async def test_each_entry_goes_to_its_own_upstream_with_its_model(hosted, local, fake_anthropic):
    router = Router(cooldown_s=30)
    cat = catalogue(hosted, local, fake_anthropic)
    hosted.script(Text("from hosted"))
    local.script(Text("from local"))
    fake_anthropic.script(Text("from claude"))
    assert await stream_text(router, cat.resolve("local/small")) == "from local"
    assert await stream_text(router, cat.resolve("hosted/big")) == "from hosted"
    assert await stream_text(router, cat.resolve("claude/sonnet")) == "from claude"
    assert hosted.bodies()[-1]["model"] == "big" and local.bodies()[-1]["model"] == "small"
    assert fake_anthropic.bodies()[-1]["model"] == "sonnet"
    assert hosted.requests[-1].headers["authorization"] == "Bearer sk-hosted"
    assert "authorization" not in local.requests[-1].headers


@pytest.mark.parametrize("failure", ["refused", "500", "429", "timeout", "malformed"])
@pytest.mark.parametrize("mode", ["stream", "complete"])
async def test_a_failure_before_the_first_byte_falls_back_to_the_next_target(hosted, local, failure, mode):
    url = f"http://127.0.0.1:{refusing_port()}" if failure == "refused" else None
    cat = catalogue(hosted, local, timeout=0.5, hosted_url=url)
    if failure in ("500", "429"):
        hosted.script(Error(int(failure), f"upstream says {failure}"))
    elif failure == "timeout":
        hosted.script(Hang())
    elif failure == "malformed":
        hosted.script(Raw("data: {not json\n\n") if mode == "stream" else Raw("{not json", content_type="text/json"))
    local.script(Text("the local answer"))
    router = Router(cooldown_s=30)
    attempts = Attempts()
    if mode == "stream":
        text = await stream_text(router, cat.resolve("smart"), attempts)
    else:
        text = (await router.complete(cat.resolve("smart"), REQUEST, attempts)).text
    assert text == "the local answer"
    assert attempts.answered == "local/small"
    assert [(a.entry, a.outcome) for a in attempts.tries] == [("hosted/big", "failed"), ("local/small", "answered")]
    if failure in ("500", "429"):
        assert attempts.tries[0].status == int(failure) and f"upstream says {failure}" in attempts.tries[0].error
    shown = {"malformed": "error"}.get(failure, failure)
    assert attempts.summary() == f"hosted/big=failed({shown}); local/small=answered"
    assert router.cooling("hosted/big") and not router.cooling("local/small")


@pytest.mark.parametrize("mode", ["stream", "complete"])
async def test_an_alias_whose_fallback_on_lists_a_4xx_tries_the_next_target_on_it(hosted, local, mode):
    hosted.script(Error(400, "over this model's context", "invalid_request_error"),
                  Error(404, "no such model", "invalid_request_error"))
    local.script(Text("the local answer"))
    base = catalogue(hosted, local)
    alias = replace(base.aliases["smart"], fallback_on=frozenset({400}))
    cat = Catalogue(base.connections.values(), [alias], default_connection="hosted")
    router = Router(cooldown_s=30)
    route = cat.resolve("smart")
    if mode == "stream":
        assert await stream_text(router, route) == "the local answer"
    else:
        assert (await router.complete(route, REQUEST)).text == "the local answer"
    assert not router.cooling("hosted/big")  # the caller's request was refused: the upstream is healthy
    with pytest.raises(AppError) as caught:  # a status it does not list is the caller's, as without the setting
        await stream_text(router, route)
    assert caught.value.status == 404 and len(local.requests) == 1


@pytest.mark.parametrize("status", [400, 401, 404])
async def test_another_4xx_is_returned_not_retried(hosted, local, status):
    hosted.script(Error(status, "bad request or bad key", "invalid_request_error"))
    router = Router(cooldown_s=30)
    with pytest.raises(AppError) as caught:
        await stream_text(router, catalogue(hosted, local).resolve("smart"))
    assert caught.value.code == "upstream_error" and "bad request or bad key" in caught.value.message
    assert caught.value.status == (502 if status == 401 else status)  # 401: the operator's key, not the caller's
    assert getattr(caught.value, "upstream_status", None) == status
    assert local.requests == []  # never tried
    assert not router.cooling("hosted/big")  # a bad request says nothing of the upstream's health


@pytest.mark.parametrize("reply", [StreamError(text="first words ", message="Overloaded."),
                                   Truncated(text="first words ")])
async def test_no_fallback_once_a_token_was_streamed(hosted, local, reply):
    hosted.script(reply)
    local.script(Text("must not be used"))
    router = Router(cooldown_s=30)
    seen: list[str] = []
    with pytest.raises(AppError) as caught:
        async for batch in router.stream_batches(catalogue(hosted, local).resolve("smart"), REQUEST):
            seen += [event.text for event in batch if isinstance(event, TextDelta)]
    assert "".join(seen).startswith("first")  # the client got the first upstream's words, then its error
    assert caught.value.code == "upstream_error"
    assert local.requests == []


async def test_the_last_targets_failure_is_raised_when_all_fail(hosted, local):
    hosted.script(Error(500, "hosted down"))
    local.script(Error(503, "local down"))
    attempts = Attempts()
    with pytest.raises(AppError) as caught:
        await stream_text(Router(cooldown_s=30), catalogue(hosted, local).resolve("smart"), attempts)
    assert "local down" in caught.value.message
    assert [a.outcome for a in attempts.tries] == ["failed", "failed"]


ROLE = 'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}\n\n'
BROKEN = 'data: {"error": {"message": "Overloaded.", "type": "server_error"}}\n\n'


async def test_a_target_that_answered_and_failed_before_its_first_event_still_falls_back(hosted, local):
    """The empty list says an upstream answered (a door starts its reply); the target failing after it has
    still sent no event, so the next one answers, and the caller sees the empty list once."""
    step = threading.Semaphore(0)
    hosted.script(Raw("", pieces=[ROLE, BROKEN], step=step))  # the error only once the caller saw the []
    local.script(Raw("", pieces=[ROLE, 'data: {"choices": [{"index": 0, "delta": {"content": "the local '
                                       'answer"}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'], step=step))
    attempts = Attempts()
    batches = []
    answering = []  # what `answered` said as each list came (a door names it in its headers and `model`)
    async with asyncio.timeout(10):  # failure bound: the fakes hold their second piece for 30 s
        async for batch in Router(cooldown_s=30).stream_batches(catalogue(hosted, local).resolve("smart"), REQUEST,
                                                                attempts):
            batches.append(batch)
            answering.append(attempts.answered)
            step.release()
            step.release()
    assert batches[0] == [] and all(batches[1:])
    assert answering[0] == "hosted/big" and set(answering[1:]) == {"local/small"}
    assert "".join(e.text for batch in batches for e in batch if isinstance(e, TextDelta)) == "the local answer"
    assert [(a.entry, a.outcome) for a in attempts.tries] == [("hosted/big", "failed"), ("local/small", "answered")]

    # When every target answers and then fails, the caller has its empty list and then the last failure.
    step = threading.Semaphore(0)  # a fresh one: the first part's spare releases would let BROKEN go at once
    hosted.script(Raw("", pieces=[ROLE, BROKEN], step=step))
    local.script(Raw("", pieces=[ROLE, BROKEN], step=step))
    seen = []
    with pytest.raises(AppError) as caught:
        async with asyncio.timeout(10):
            async for batch in Router(cooldown_s=30).stream_batches(catalogue(hosted, local).resolve("smart"),
                                                                    REQUEST):
                seen.append(batch)
                step.release()
                step.release()
    assert seen == [[]] and caught.value.code == "upstream_error" and "Overloaded." in caught.value.message


async def test_a_cooling_target_is_skipped_then_tried_again_after_the_cool_down(hosted, local):
    clock = Clock()
    router = Router(cooldown_s=30, clock=clock)
    route = catalogue(hosted, local).resolve("smart")
    hosted.script(Error(500, "down"))
    local.script(Text("one"), Text("two"), Text("three"))
    assert await stream_text(router, route) == "one"
    assert len(hosted.requests) == 1
    clock.now += 29  # still cooling: hosted is not asked at all
    attempts = Attempts()
    assert await stream_text(router, route, attempts) == "two"
    assert len(hosted.requests) == 1 and [a.entry for a in attempts.tries] == ["local/small"]
    clock.now += 2  # cooled down: hosted is first again
    hosted.script(Text("hosted is back"))
    assert await stream_text(router, route) == "hosted is back"
    assert len(hosted.requests) == 2 and local.pending == 1


async def test_when_every_target_is_cooling_they_are_all_tried_anyway(hosted, local):
    clock = Clock()
    router = Router(cooldown_s=30, clock=clock)
    route = catalogue(hosted, local).resolve("smart")
    hosted.script(Error(500, "down"), Text("hosted again"))
    local.script(Error(500, "down too"))
    with pytest.raises(AppError):
        await stream_text(router, route)
    assert router.cooling("hosted/big") and router.cooling("local/small")
    assert await stream_text(router, route) == "hosted again"


@pytest.mark.parametrize("weights", [(1, 1), (3, 1), (1, 4)])
async def test_balance_spreads_100_requests_within_ten_percent_of_the_weights(hosted, local, weights):
    hosted.default_reply = local.default_reply = Text("ok")
    try:
        router = Router(cooldown_s=30)
        route = catalogue(hosted, local, strategy="balance", weights=weights).resolve("smart")
        answered: Counter[str] = Counter()
        for _ in range(100):
            attempts = Attempts()
            await stream_text(router, route, attempts)
            answered[attempts.answered or ""] += 1
    finally:
        hosted.default_reply = local.default_reply = None
    share = weights[0] / sum(weights)
    assert abs(answered["hosted/big"] - 100 * share) <= 10, answered
    assert answered["hosted/big"] + answered["local/small"] == 100
    assert len(hosted.requests) == answered["hosted/big"]


def test_least_in_flight_picks_the_least_busy_target(hosted, local):
    router = Router(cooldown_s=30)
    route = catalogue(hosted, local, strategy="least_in_flight").resolve("smart")
    router._count("hosted/big", 2)
    router._count("local/small", 1)
    assert [t.entry for t in router.order(route)] == ["local/small", "hosted/big"]
    router._count("local/small", 3)
    assert [t.entry for t in router.order(route)] == ["hosted/big", "local/small"]


async def test_the_agent_loop_falls_back_through_the_default_alias(hosted, local):
    hosted.script(Error(500, "hosted down"))
    local.script(Text("the agent answers from local"))
    settings = AgentSettings(model="smart", catalogue=catalogue(hosted, local), system_prompt="")
    events = [event async for event in run_agent(messages=[Message("user", "hi")], user_id=None, settings=settings,
                                                 use_tools=False)]
    assert events[-1].type == "done", events[-1].data
    assert events[-1].data["content"] == "the agent answers from local"


# --- discovery ---------------------------------------------------------------------------------------------------

async def test_discovery_reads_the_model_lists_of_both_wire_formats(hosted, fake_anthropic):
    hosted.models = ["gpt-a", "gpt-b"]
    fake_anthropic.models = ["claude-x"]
    openai = PROVIDERS["openai"](base_url=hosted.base_url, api_key="sk-hosted")
    anthropic = PROVIDERS["anthropic"](base_url=fake_anthropic.base_url, api_key="sk-ant")
    assert await openai.list_models() == ["gpt-a", "gpt-b"]
    assert await anthropic.list_models() == ["claude-x"]
    assert hosted.requests[-1].path == "/v1/models" and hosted.requests[-1].method == "GET"
    assert fake_anthropic.requests[-1].headers["x-api-key"] == "sk-ant"


async def test_a_failed_discovery_raises_the_upstreams_words(hosted):
    hosted.models_error = Error(401, "Incorrect API key provided.", "invalid_request_error")
    with pytest.raises(AppError) as caught:
        await PROVIDERS["openai"](base_url=hosted.base_url, api_key="sk-bad").list_models()
    assert "Incorrect API key provided." in caught.value.message and "sk-bad" not in caught.value.message
