"""A workflow `llm` node names an agent (issue 45, item 4): `config.agent` (a slug; empty: the agent `default`)
runs the node with the agent's instructions, exactly its tools and its knowledge, for the run's user; the node's
`model` still overrides the agent's; an agent the run's user may not use (or none of that slug) fails the node
naming it, without retries. A slug is not checked on save (a run decides). The fake upstream is the witness."""

from __future__ import annotations

import pytest

from tests.conftest import client_for
from tests.fakes.llm import Call, Text, ToolCalls
from tests.sessions_app.test_agents import (
    INSTRUCTIONS,
    PASSAGE,
    QUESTION,
    TOOL,
    UNLISTED,
    assert_agent_reached,
    make_agent,
    point_at,
    share_with_group,
    system_text,
    tool_names,
)
from tests.workflows.conftest import graph, node
from workflows.models import WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)


def agent_graph(**config) -> dict:
    return graph(node("start", "input"), node("ask", "llm", prompt="${input}", **config), node("out", "output"),
                 edges=[("start", "ask"), ("ask", "out")])


@pytest.fixture
def team(django_user_model, fake_openai):
    point_at(fake_openai)
    alice = django_user_model.objects.create_user("alice", password="x-correct-horse-1")
    bob = django_user_model.objects.create_user("bob", password="x-correct-horse-1")
    return {"alice": alice, "bob": bob, "agent": make_agent(alice)}


def run_of(user, name: str, **config) -> WorkflowRun:
    api = client_for(user)
    created = api.post("/api/workflows", {"name": name, **agent_graph(**config)}, format="json")
    assert created.status_code == 201, created.content
    answer = api.post(f"/api/workflows/{created.json()['id']}/run", {"input": QUESTION}, format="json")
    assert answer.status_code == 200, answer.content
    return WorkflowRun.objects.get(pk=answer.json()["id"])


def test_an_llm_node_with_an_agent_sends_its_instructions_one_tool_and_its_knowledge(team, fake_openai):
    fake_openai.script(Text("Quintessence brine."))
    run = run_of(team["alice"], "w", agent="support")
    assert (run.status, run.output) == ("success", "Quintessence brine."), run.error
    [sent] = fake_openai.bodies()
    assert_agent_reached(sent)
    assert sent["messages"][-1] == {"role": "user", "content": QUESTION} and sent["model"] == "m"


def test_an_empty_agent_is_the_default_one(team, fake_openai):
    fake_openai.script(Text("a"), Text("b"))
    for index, config in enumerate(({}, {"agent": ""})):
        assert run_of(team["alice"], f"w{index}", **config).status == "success"
    for sent in fake_openai.bodies():
        assert not system_text(sent).startswith(INSTRUCTIONS) and PASSAGE not in system_text(sent)


def test_the_nodes_model_overrides_the_agents_and_an_unlisted_tool_call_is_refused(team, fake_openai):
    from catalogue.models import Connection
    from catalogue.selectors import config_cache_clear

    Connection.objects.update(models=["m", "m2"])
    config_cache_clear()
    fake_openai.script(ToolCalls([Call(UNLISTED, {"query": "zorblat"}, id="call_1")]), Text("No search here."))
    run = run_of(team["alice"], "w", agent="support", model="m2")
    assert (run.status, run.output) == ("success", "No search here."), run.error
    first, second = fake_openai.bodies()
    assert first["model"] == second["model"] == "m2"
    assert_agent_reached(first)
    assert tool_names(second) == [TOOL]
    refused = next(message for message in second["messages"] if message["role"] == "tool")
    assert f"There is no tool named {UNLISTED!r}" in refused["content"]


@pytest.mark.parametrize("slug", ["support", "nobody", "Bad Slug"])
def test_an_agent_the_runs_user_may_not_use_fails_the_node_naming_it_without_retries(team, fake_openai, slug):
    # Saved without a check (a run decides): bob may not use alice's private agent, and `nobody` does not exist.
    run = run_of(team["bob"], "w", agent=slug, retry={"max": 2, "backoffMs": 0})
    assert run.status == "error"
    assert run.error["node"] == "ask" and repr(slug) in run.error["message"], run.error
    assert "config.agent" in run.error["message"]
    [step] = [entry for entry in run.trace if entry["node"] == "ask"]
    assert step["attempts"] == 1 and step["status"] == "error"
    assert fake_openai.bodies() == []


def test_a_group_member_runs_the_shared_agent_on_its_knowledge_never_their_own(team, fake_openai):
    from knowledge.services import document_ingest
    from tests.sessions_app.test_agents import PRIVATE

    share_with_group(team["agent"], team["bob"])
    document_ingest(owner_id=team["bob"].pk, filename="notes.txt", content=PRIVATE)
    fake_openai.script(Text("Brine."))
    run = run_of(team["bob"], "w", agent="support")
    assert run.status == "success", run.error
    [sent] = fake_openai.bodies()
    assert_agent_reached(sent)
    assert PRIVATE not in system_text(sent)


def test_the_node_form_offers_the_agent_key(owner_client):
    llm = next(kind for kind in owner_client.get("/api/meta").json()["node_types"] if kind["name"] == "llm")
    agent = next(field for field in llm["fields"] if field["name"] == "agent")
    assert agent["kind"] == "text" and agent["required"] is False
