"""A scheduled task names an agent (issue 45, item 4): `agent` in its bodies and output (`default` when it names
none), checked with the owner's access on save (404 `not_found` naming `agent`), run with the agent's
instructions, exactly its tools and its knowledge (the task's `model` still overrides the model); an agent the
owner lost since fails the run with an error that names it. The fake upstream's requests are the witness."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from organisation.models import Membership
from scheduler import services
from scheduler.models import ScheduledTask, TaskRun
from sessions_app.models import ChatMessage
from sessions_app.services import session_create
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

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def fire(task: ScheduledTask) -> TaskRun:
    ScheduledTask.objects.filter(pk=task.pk).update(next_run_at=T0)
    [run] = services.tick(now=T0)
    run.refresh_from_db()
    return run


@pytest.fixture
def team(django_user_model, fake_openai):
    point_at(fake_openai)
    alice = django_user_model.objects.create_user("alice", password="x-correct-horse-1")
    bob = django_user_model.objects.create_user("bob", password="x-correct-horse-1")
    return {"alice": alice, "bob": bob, "agent": make_agent(alice)}


def body(**fields):
    return {"name": "digest", "cron": "0 9 * * *", "prompt": QUESTION, **fields}


def test_a_task_takes_an_agent_and_says_default_when_it_names_none(team):
    api = client_for(team["alice"])
    plain = api.post("/api/scheduler/tasks", body(), format="json")
    assert plain.status_code == 201 and plain.json()["agent"] == "default"
    created = api.post("/api/scheduler/tasks", body(name="support", agent="support"), format="json")
    assert created.status_code == 201, created.content
    assert created.json()["agent"] == "support"
    assert ScheduledTask.objects.get(pk=created.json()["id"]).agent_id == team["agent"].pk
    listed = {row["name"]: row["agent"] for row in api.get("/api/scheduler/tasks").json()["results"]}
    assert listed == {"digest": "default", "support": "support"}
    patched = api.patch(f"/api/scheduler/tasks/{plain.json()['id']}", {"agent": "support"}, format="json")
    assert patched.status_code == 200 and patched.json()["agent"] == "support"
    renamed = api.patch(f"/api/scheduler/tasks/{created.json()['id']}", {"name": "renamed"}, format="json").json()
    assert renamed["agent"] == "support"  # a field not given is kept
    back = api.put(f"/api/scheduler/tasks/{created.json()['id']}", {"agent": "default"}, format="json")
    assert back.status_code == 200 and back.json()["agent"] == "default"


@pytest.mark.parametrize("slug", ["support", "missing", "support@1"])
def test_an_agent_the_owner_may_not_use_is_404_naming_agent_and_nothing_is_saved(team, slug):
    api = client_for(team["bob"])  # alice's agent is private
    refused = api.post("/api/scheduler/tasks", body(agent=slug), format="json")
    assert refused.status_code == 404, refused.content
    error = refused.json()["error"]
    assert error["code"] == "not_found" and repr(slug) in error["message"] and "agent" in error["details"]
    assert not ScheduledTask.objects.filter(owner=team["bob"]).exists()
    mine = api.post("/api/scheduler/tasks", body(), format="json").json()
    patched = api.patch(f"/api/scheduler/tasks/{mine['id']}", {"agent": slug, "name": "changed"}, format="json")
    assert patched.status_code == 404
    assert ScheduledTask.objects.get(pk=mine["id"]).name == "digest"


def test_a_workflow_task_takes_no_agent_but_default(team):
    from workflows.services import workflow_create

    workflow = workflow_create(owner=team["alice"], name="w", nodes=[{"id": "in", "type": "input", "name": "in"}],
                               edges=[])
    api = client_for(team["alice"])
    refused = api.post("/api/scheduler/tasks", body(workflow_id=str(workflow.pk), agent="support"), format="json")
    assert refused.status_code == 400 and "agent" in refused.json()["error"]["details"]
    made = api.post("/api/scheduler/tasks", body(workflow_id=str(workflow.pk), agent="default"), format="json")
    assert made.status_code == 201, made.content
    task = api.post("/api/scheduler/tasks", body(name="s", agent="support"), format="json").json()
    moved = api.patch(f"/api/scheduler/tasks/{task['id']}", {"workflow_id": str(workflow.pk)}, format="json")
    assert moved.status_code == 400 and "agent" in moved.json()["error"]["details"]


def test_a_run_sends_the_agents_instructions_one_tool_and_its_knowledge(team, fake_openai):
    fake_openai.script(Text("Quintessence brine."))
    run = fire(services.task_create(owner=team["alice"], name="t", cron="0 9 * * *", prompt=QUESTION,
                                    agent="support"))
    assert (run.status, run.output) == ("success", "Quintessence brine."), run.error
    [sent] = fake_openai.bodies()
    assert_agent_reached(sent)
    assert sent["messages"][-1] == {"role": "user", "content": QUESTION} and sent["model"] == "m"


def test_a_run_of_a_task_without_agent_keeps_the_deployments_agent(team, fake_openai):
    fake_openai.script(Text("ok"))
    run = fire(services.task_create(owner=team["alice"], name="t", cron="0 9 * * *", prompt=QUESTION))
    assert run.status == "success", run.error
    [sent] = fake_openai.bodies()
    assert not system_text(sent).startswith(INSTRUCTIONS) and PASSAGE not in system_text(sent)


def test_the_tasks_model_overrides_the_agents_and_an_unlisted_tool_call_is_refused(team, fake_openai):
    from catalogue.models import Connection
    from catalogue.selectors import config_cache_clear

    Connection.objects.update(models=["m", "m2"])
    config_cache_clear()
    fake_openai.script(ToolCalls([Call(UNLISTED, {"query": "zorblat"}, id="call_1")]), Text("No search here."))
    run = fire(services.task_create(owner=team["alice"], name="t", cron="0 9 * * *", prompt=QUESTION,
                                    agent="support", model="m2"))
    assert (run.status, run.output) == ("success", "No search here."), run.error
    first, second = fake_openai.bodies()
    assert first["model"] == second["model"] == "m2"
    assert_agent_reached(first)
    assert tool_names(second) == [TOOL]
    refused = next(message for message in second["messages"] if message["role"] == "tool")
    assert f"There is no tool named {UNLISTED!r}" in refused["content"]


def test_with_a_session_the_turn_runs_the_tasks_agent_and_is_stored(team, fake_openai):
    session = session_create(owner=team["alice"], name="daily")
    fake_openai.script(Text("Brine, as ever."))
    run = fire(services.task_create(owner=team["alice"], name="t", cron="0 9 * * *", prompt=QUESTION,
                                    session_id=session.pk, agent="support"))
    assert (run.status, run.output) == ("success", "Brine, as ever."), run.error
    assert_agent_reached(fake_openai.bodies()[-1])
    stored = list(ChatMessage.objects.filter(session=session).order_by("seq").values_list("role", "content"))
    assert stored == [("user", QUESTION), ("assistant", "Brine, as ever.")]


@pytest.mark.parametrize("with_session", [False, True])
def test_an_agent_the_owner_lost_fails_the_run_naming_it_and_asks_nothing(team, fake_openai, with_session):
    group = share_with_group(team["agent"], team["bob"])
    session = session_create(owner=team["bob"], name="s") if with_session else None
    task = services.task_create(owner=team["bob"], name="t", cron="0 9 * * *", prompt=QUESTION, agent="support",
                                session_id=session.pk if session else None)
    Membership.objects.filter(group=group, user=team["bob"]).delete()
    run = fire(task)
    assert run.status == "error"
    assert "'support'" in run.error and "no longer available" in run.error, run.error
    assert fake_openai.bodies() == []
    if session is not None:
        assert not ChatMessage.objects.filter(session=session).exists()
