"""`agent:<slug>` through compat.run without a server: the run uses the agent's settings (resolved in allow(),
before anything reads them), records its usage with the agent, and refuses a caller who may not use it with
404 `model_not_found` before anything is sent (the fake upstream and a recording metering are the witnesses)."""

from __future__ import annotations

import pytest

from agentsite.agent.agents import access_names
from agentsite.agent.config import aget_settings
from agentsite.agent.types import ChatRequest, Message, ModelSettings
from agentsite.agent.usage import Caller
from agentsite.core.errors import AppError
from compat.run import Run
from tests.fakes.llm import Text

pytestmark = pytest.mark.django_db(transaction=True)


async def _run(model: str, user) -> Run:
    request = ChatRequest(messages=[Message("system", "Be brief."), Message("user", "hi")],
                          settings=ModelSettings(model=model))
    return Run(request, settings=await aget_settings(), user=user, caller=Caller(user.pk, facet="v1"))


def test_the_names_a_group_may_allow_an_agent_by():
    assert access_names("agent:helper") == ("agent:helper",)
    assert access_names("agent:helper@3") == ("agent:helper@3", "agent:helper")
    assert access_names("agent") == ("agent", "agent:default")
    assert access_names("agent:default") == ("agent:default", "agent")
    assert access_names("agent:default@2") == ("agent:default@2", "agent:default", "agent")
    assert access_names("fast") == ("fast",)


async def test_a_whole_reply_uses_the_agents_settings_and_records_the_agent(helper, owner, fake_openai, metering):
    fake_openai.script(Text("Hello."))
    run = await _run("agent:helper", owner)
    reply = await run.reply()
    assert reply.text == "Hello." and run.settings.agent == "helper" and run.model == "agent:helper"
    [sent] = fake_openai.bodies()
    assert sent["messages"] == [{"role": "system", "content": "You are Helper."},
                                {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert sent["temperature"] == 0.1 and "tools" not in sent
    [record] = metering.records
    assert (record.caller.user_id, record.caller.facet, record.caller.agent) == (owner.pk, "v1", "helper")


async def test_a_stream_records_the_agent_too(helper, owner, fake_openai, metering):
    fake_openai.script(Text("Hello there."))
    run = await _run("agent:helper", owner)
    first, batches = await run.opened()
    [event async for batch in batches for event in batch]
    assert fake_openai.bodies()[0]["messages"][0] == {"role": "system", "content": "You are Helper."}
    assert [record.caller.agent for record in metering.records] == ["helper"]


@pytest.mark.parametrize("model", ["agent:helper", "agent:helper@1", "agent:ghost"])
async def test_a_caller_who_may_not_use_it_gets_404_before_anything_is_sent(helper, other_user, fake_openai,
                                                                            metering, model):
    for answer in ("reply", "opened"):
        run = await _run(model, other_user)
        with pytest.raises(AppError) as refused:
            await getattr(run, answer)()
        assert (refused.value.status, refused.value.code) == (404, "model_not_found")
    assert fake_openai.bodies() == [] and metering.records == []

