"""Model access by group (issue 44, item 4): a user in a group whose `models` is a list may use only what their
restricting groups' lists allow, refused with 403 `model_not_allowed` in each door's own shape, on every door;
/v1/models lists only what they may use; a change counts from the next request.

The doors are driven in-process through the full ASGI stack (agentsite.asgi) with the official SDKs (their
exception classes are chosen by the status and body we send), against the fake upstream LLM."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from asgiref.sync import sync_to_async

from accounts.services import key_create
from accounts.tokens import token_pair_for
from agentsite.agent.routing import Alias, AliasTarget, Catalogue, Connection
from organisation.modelaccess import pattern_matches, restriction
from organisation.models import Group, Membership
from organisation.selectors import GroupOfUser
from tests.catalogue import use_catalogue
from tests.conftest import client_for
from tests.fakes.llm import Text

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def catalogue(fake_openai):
    """One connection `local` (small, big); aliases fast and fastest -> local/small, slow -> local/big; the
    agent's model is `fast`."""
    upstream = Connection("local", "openai", fake_openai.base_url, models=("small", "big"), timeout_s=5.0)
    aliases = [Alias(name, "fallback", (AliasTarget(target),))
               for name, target in (("fast", "local/small"), ("fastest", "local/small"), ("slow", "local/big"))]
    with use_catalogue(Catalogue([upstream], aliases, default_connection="local"), model="fast") as settings:
        yield settings


def restrict(user: Any, models: list[str] | None, name: str = "team") -> Group:
    group = Group.objects.create(name=name, allowed_models=models)
    Membership.objects.create(group=group, user=user)
    return group


def token(user: Any) -> str:
    return token_pair_for(user)["token"]


def asgi_client() -> httpx2.AsyncClient:
    from agentsite.asgi import application

    transport = httpx2.ASGITransport(app=application, client=("127.0.0.1", 40000))
    return httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=10)


def openai_client(credential: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://127.0.0.1/v1", api_key=credential, max_retries=0,
                              http_client=asgi_client())


def anthropic_client(credential: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url="http://127.0.0.1", api_key=credential, max_retries=0,
                                    http_client=asgi_client())


def sse(body: str) -> list[tuple[str, Any]]:
    found = []
    for block in body.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "data" in lines:
            found.append((lines.get("event", "message"), json.loads(lines["data"])))
    return found


# --- the rule ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("pattern", "name", "allowed"), [
    ("fast", "fast", True), ("fast", "fastest", False), ("fast", "Fast", False), ("fast", "fas", False),
    ("fast*", "fast", True), ("fast*", "fastest", True), ("fast*", "slowfast", False), ("*fast", "slowfast", True),
    ("local/*", "local/big", True), ("local/*", "localx/big", False), ("workflow:*", "workflow:w", True),
    ("workflow:*", "workflows:w", False), ("agent", "agent", True), ("agent", "agent:x", False),
    ("agent:*", "agent:x", True), ("*", "anything/at all", True), ("a.b", "aXb", False), ("a?", "ab", False),
    ("a?", "a?", True), ("[ab]", "a", False), ("x*y*z", "x1y2z", True), ("x*y*z", "x1y2", False),
])
def test_a_pattern_is_its_text_with_star_for_any_text_and_nothing_else_special(pattern, name, allowed):
    assert pattern_matches(pattern, name) is allowed


def test_the_restriction_is_the_union_of_the_restricting_groups_lists_and_null_adds_nothing():
    def group(models):
        return GroupOfUser(1, "g", "member", None if models is None else tuple(models))

    assert restriction([]) is None
    assert restriction([group(None), group(None)]) is None
    assert restriction([group(["fast"]), group(None)]) == ("fast",)  # the null group does not lift it
    assert restriction([group(["fast"]), group(["local/*", "fast"])]) == ("fast", "local/*")
    assert restriction([group([]), group(None)]) == ()  # an empty list allows nothing


# --- /v1 ----------------------------------------------------------------------------------------------------------

async def test_chat_completions_refuses_another_model_and_answers_an_allowed_one(owner, catalogue, fake_openai):
    await sync_to_async(restrict)(owner, ["fast"])
    client = openai_client(await sync_to_async(token)(owner))
    for stream in (False, True):
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await client.chat.completions.create(model="slow", messages=HELLO, stream=stream)
        assert refused.value.status_code == 403 and refused.value.code == "model_not_allowed"
        assert refused.value.body["type"] == "permission_error"
    # The catalogue entry behind the alias is not the alias: it is refused too.
    with pytest.raises(openai.PermissionDeniedError):
        await client.chat.completions.create(model="local/small", messages=HELLO)
    assert fake_openai.bodies() == []  # nothing reached the upstream
    fake_openai.script(Text("allowed"))
    answer = await client.chat.completions.create(model="fast", messages=HELLO)
    assert answer.choices[0].message.content == "allowed"
    # A name that does not exist is still 404, whatever the groups say.
    with pytest.raises(openai.NotFoundError) as missing:
        await client.chat.completions.create(model="nope", messages=HELLO)
    assert missing.value.code == "model_not_found"


async def test_responses_refuses_another_model_and_answers_an_allowed_one(owner, catalogue, fake_openai):
    await sync_to_async(restrict)(owner, ["fast"])
    client = openai_client(await sync_to_async(token)(owner))
    for stream in (False, True):
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await client.responses.create(model="slow", input="hello", stream=stream)
        assert refused.value.code == "model_not_allowed"
    fake_openai.script(Text("allowed"))
    assert (await client.responses.create(model="fast", input="hello")).output_text == "allowed"


async def test_messages_and_count_tokens_refuse_another_model_in_anthropics_shape(owner, catalogue, fake_openai):
    await sync_to_async(restrict)(owner, ["fast"])
    client = anthropic_client(await sync_to_async(token)(owner))
    for stream in (False, True):
        with pytest.raises(anthropic.PermissionDeniedError) as refused:
            await client.messages.create(model="slow", max_tokens=50, messages=HELLO, stream=stream)
        assert refused.value.status_code == 403 and refused.value.body["error"]["type"] == "permission_error"
    with pytest.raises(anthropic.PermissionDeniedError):
        await client.messages.count_tokens(model="slow", messages=HELLO)
    assert (await client.messages.count_tokens(model="fast", messages=HELLO)).input_tokens > 0
    fake_openai.script(Text("allowed"))
    reply = await client.messages.create(model="fast", max_tokens=50, messages=HELLO)
    assert reply.content[0].text == "allowed"


async def test_models_lists_only_what_the_caller_may_use_and_retrieving_another_is_refused(owner, catalogue):
    client = openai_client(await sync_to_async(token)(owner))
    everything = [model.id async for model in client.models.list()]
    assert everything == ["fast", "fastest", "slow", "local/small", "local/big", "agent", "agent:default", "hash-256"]
    await sync_to_async(restrict)(owner, ["fast*", "local/big"])
    assert [model.id async for model in client.models.list()] == ["fast", "fastest", "local/big"]
    assert (await client.models.retrieve("fastest")).id == "fastest"
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await client.models.retrieve("slow")
    assert refused.value.code == "model_not_allowed"
    with pytest.raises(openai.NotFoundError):
        await client.models.retrieve("nope")


async def test_embeddings_are_a_model_like_any_other(owner, catalogue):
    group = await sync_to_async(restrict)(owner, ["fast"])
    client = openai_client(await sync_to_async(token)(owner))
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await client.embeddings.create(model="hash-256", input="hello")
    assert refused.value.code == "model_not_allowed"
    group.allowed_models = ["fast", "hash-256"]
    await sync_to_async(group.save)()
    assert len((await client.embeddings.create(model="hash-256", input="hello")).data) == 1


async def test_the_agent_needs_its_own_name_and_its_model_allowed(owner, catalogue, fake_openai):
    group = await sync_to_async(restrict)(owner, ["fast"])
    client = openai_client(await sync_to_async(token)(owner))
    with pytest.raises(openai.PermissionDeniedError):
        await client.chat.completions.create(model="agent", messages=HELLO)
    group.allowed_models = ["agent"]  # the agent, but not the model it calls (`fast`)
    await sync_to_async(group.save)()
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await client.chat.completions.create(model="agent", messages=HELLO)
    assert refused.value.code == "model_not_allowed" and "'fast'" in refused.value.message
    assert fake_openai.bodies() == []
    group.allowed_models = ["agent", "fast"]
    await sync_to_async(group.save)()
    fake_openai.script(Text("the agent"))
    answer = await client.chat.completions.create(model="agent", messages=HELLO)
    assert answer.choices[0].message.content == "the agent"


async def test_a_bare_model_of_the_default_connection_is_allowed_by_its_entry(owner, catalogue, fake_openai):
    await sync_to_async(restrict)(owner, ["local/big"])
    client = openai_client(await sync_to_async(token)(owner))
    fake_openai.script(Text("big"))
    assert (await client.chat.completions.create(model="big", messages=HELLO)).choices[0].message.content == "big"
    with pytest.raises(openai.PermissionDeniedError):
        await client.chat.completions.create(model="small", messages=HELLO)


# --- who is held to it -------------------------------------------------------------------------------------------

async def test_the_union_of_two_restricting_groups_and_an_unrestricted_group_adds_nothing(owner, catalogue,
                                                                                           fake_openai):
    await sync_to_async(restrict)(owner, ["fast"], "a")
    await sync_to_async(restrict)(owner, ["local/big"], "b")
    await sync_to_async(restrict)(owner, None, "everything")
    client = openai_client(await sync_to_async(token)(owner))
    assert [model.id async for model in client.models.list()] == ["fast", "local/big"]
    fake_openai.script(Text("one"), Text("two"))
    await client.chat.completions.create(model="fast", messages=HELLO)
    await client.chat.completions.create(model="local/big", messages=HELLO)
    with pytest.raises(openai.PermissionDeniedError):
        await client.chat.completions.create(model="slow", messages=HELLO)


async def test_a_user_in_no_restricting_group_and_an_anonymous_caller_use_every_model(owner, other_user, catalogue):
    await sync_to_async(restrict)(owner, None)
    for credential in (await sync_to_async(token)(owner), "placeholder"):  # compat_auth local: loopback anonymous
        ids = [model.id async for model in openai_client(credential).models.list()]
        assert ids == ["fast", "fastest", "slow", "local/small", "local/big", "agent", "agent:default", "hash-256"]


async def test_an_admin_is_not_restricted_unless_acting_through_a_key_without_the_admin_scope(admin, catalogue,
                                                                                                fake_openai):
    await sync_to_async(restrict)(admin, ["fast"])
    fake_openai.script(Text("as admin"), Text("admin key"))
    as_admin = openai_client(await sync_to_async(token)(admin))
    assert (await as_admin.chat.completions.create(model="slow", messages=HELLO)).choices[0].message.content
    _, admin_key = await sync_to_async(key_create)(user=admin, name="a", scopes=["v1", "admin"])
    assert (await openai_client(admin_key).chat.completions.create(model="slow", messages=HELLO)).choices
    assert len([model.id async for model in as_admin.models.list()]) == 8  # every model
    _, plain_key = await sync_to_async(key_create)(user=admin, name="p", scopes=["v1"])
    with pytest.raises(openai.PermissionDeniedError):
        await openai_client(plain_key).chat.completions.create(model="slow", messages=HELLO)
    assert [model.id async for model in openai_client(plain_key).models.list()] == ["fast"]


async def test_a_change_counts_from_the_next_request(owner, admin, catalogue, fake_openai):
    client = openai_client(await sync_to_async(token)(owner))
    fake_openai.script(Text("before"), Text("after"))
    await client.chat.completions.create(model="slow", messages=HELLO)  # the memberships are now cached
    group = await sync_to_async(restrict)(owner, ["fast"])
    with pytest.raises(openai.PermissionDeniedError):
        await client.chat.completions.create(model="slow", messages=HELLO)
    admin_api = await sync_to_async(client_for)(admin)
    lifted = await sync_to_async(admin_api.patch)(f"/api/groups/{group.pk}", {"models": None}, format="json")
    assert lifted.status_code == 200 and lifted.json()["models"] is None
    assert (await client.chat.completions.create(model="slow", messages=HELLO)).choices[0].message.content == "after"
    again = await sync_to_async(admin_api.patch)(f"/api/groups/{group.pk}", {"models": ["fast"]}, format="json")
    assert again.status_code == 200
    with pytest.raises(openai.PermissionDeniedError):
        await client.chat.completions.create(model="slow", messages=HELLO)
    removed = await sync_to_async(admin_api.delete)(f"/api/groups/{group.pk}/members/{owner.pk}")
    assert removed.status_code == 204
    fake_openai.script(Text("out of the group"))
    assert (await client.chat.completions.create(model="slow", messages=HELLO)).choices


# --- the other doors ---------------------------------------------------------------------------------------------

async def test_a_chat_turn_whose_model_is_not_allowed_ends_with_the_error_event(owner, catalogue, fake_openai):
    from sessions_app.models import ChatSession

    await sync_to_async(restrict)(owner, ["fast"])
    session = await sync_to_async(ChatSession.objects.create)(owner=owner, name="s", model="slow")
    headers = {"Authorization": f"Bearer {await sync_to_async(token)(owner)}"}
    async with asgi_client() as client:
        refused = await client.post(f"/api/sessions/{session.pk}/chat", json={"message": "hi"}, headers=headers)
        assert refused.status_code == 200  # the stream had started: its one error event says why
        events = sse(refused.text)
        assert [name for name, _ in events] == ["start", "error"], events
        assert events[-1][1]["code"] == "model_not_allowed"
        assert fake_openai.bodies() == []
        fake_openai.script(Text("allowed"))
        allowed = await client.post(f"/api/sessions/{session.pk}/chat", json={"message": "hi", "model": "fast"},
                                    headers=headers)
        assert [name for name, _ in sse(allowed.text)][-1] == "done"
        # The agent's own model (the session has none) is the config's `fast`.
        await sync_to_async(ChatSession.objects.filter(pk=session.pk).update)(model="")
        fake_openai.script(Text("default"))
        default = await client.post(f"/api/sessions/{session.pk}/chat", json={"message": "hi"}, headers=headers)
        assert [name for name, _ in sse(default.text)][-1] == "done"


def _fire(task_id: Any) -> Any:
    from scheduler import services
    from scheduler.models import ScheduledTask

    ScheduledTask.objects.filter(pk=task_id).update(next_run_at=T0)
    [run] = services.tick(now=T0)
    run.refresh_from_db()
    return run


def test_a_scheduled_run_records_the_refusal_and_an_allowed_model_runs(owner, owner_client, catalogue, fake_openai):
    restrict(owner, ["fast"])
    task = {"name": "t", "cron": "0 * * * *", "prompt": "report"}
    refused_task = owner_client.post("/api/scheduler/tasks", {**task, "model": "slow"}, format="json").json()
    run = _fire(refused_task["id"])
    assert run.status == "error" and "model_not_allowed" in run.error, run.error
    assert fake_openai.bodies() == []
    fake_openai.script(Text("scheduled"))
    allowed_task = owner_client.post("/api/scheduler/tasks", {**task, "name": "u", "model": "fast"}, format="json")
    run = _fire(allowed_task.json()["id"])
    assert (run.status, run.output) == ("success", "scheduled"), run.error


def _llm_workflow(client: Any, model: str, name: str = "w") -> dict[str, Any]:
    from tests.workflows.conftest import graph, node

    body = graph(node("start", "input"), node("ask", "llm", prompt="Say: ${input}", model=model, retry={"max": 2}),
                 node("out", "output"), edges=[("start", "ask"), ("ask", "out")])
    created = client.post("/api/workflows", {"name": name, **body}, format="json")
    assert created.status_code == 201, created.content
    return created.json()


def test_a_workflow_llm_node_fails_the_run_with_the_code_once_and_an_allowed_model_runs(owner, owner_client,
                                                                                         catalogue, fake_openai):
    from workflows.models import WorkflowRun

    restrict(owner, ["fast"])
    workflow = _llm_workflow(owner_client, "slow")
    answer = owner_client.post(f"/api/workflows/{workflow['id']}/run", {"input": "hi"}, format="json")
    run = WorkflowRun.objects.get(pk=answer.json()["id"])
    assert run.status == "error" and run.error["node"] == "ask" and "model_not_allowed" in run.error["message"]
    assert [entry["attempts"] for entry in run.trace if entry["node"] == "ask"] == [1]  # not retried
    assert fake_openai.bodies() == []
    fake_openai.script(Text("from fast"))
    allowed = _llm_workflow(owner_client, "fast", "v")
    answer = owner_client.post(f"/api/workflows/{allowed['id']}/run", {"input": "hi"}, format="json")
    run = WorkflowRun.objects.get(pk=answer.json()["id"])
    assert (run.status, run.output) == ("success", "from fast"), run.error


async def test_a_workflow_model_needs_a_workflow_pattern_and_its_llm_nodes_their_models(owner, catalogue,
                                                                                         fake_openai):
    group = await sync_to_async(restrict)(owner, ["fast"])
    await sync_to_async(_llm_workflow)(await sync_to_async(client_for)(owner), "fast", "helper")
    client = openai_client(await sync_to_async(token)(owner))
    assert "workflow:helper" not in [model.id async for model in client.models.list()]
    for stream in (False, True):  # its llm node's model is allowed, the workflow is not
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await client.chat.completions.create(model="workflow:helper", messages=HELLO, stream=stream)
        assert refused.value.code == "model_not_allowed"
    assert fake_openai.bodies() == []
    group.allowed_models = ["workflow:*"]  # the workflow, but not the model its node calls
    await sync_to_async(group.save)()
    assert [model.id async for model in client.models.list()] == ["workflow:helper"]
    with pytest.raises(openai.APIStatusError) as failed:
        await client.chat.completions.create(model="workflow:helper", messages=HELLO)
    assert failed.value.code == "workflow_failed" and "model_not_allowed" in failed.value.message
    group.allowed_models = ["workflow:help*", "fast"]
    await sync_to_async(group.save)()
    fake_openai.script(Text("from the workflow"))
    answer = await client.chat.completions.create(model="workflow:helper", messages=HELLO)
    assert answer.choices[0].message.content == "from the workflow"


async def test_when_the_groups_cannot_be_read_the_call_is_refused_not_let_through(owner, catalogue, fake_openai,
                                                                                   django_db_blocker):
    from agentsite.agent.loop import run_agent
    from agentsite.agent.types import Message
    from organisation import selectors

    await sync_to_async(restrict)(owner, ["fast"])
    selectors.drop(None)
    with django_db_blocker.block():  # the database does not answer
        events = [event async for event in run_agent(messages=[Message("user", "hi")], user_id=owner.pk,
                                                     use_tools=False)]
    assert [event.type for event in events] == ["error"] and events[0].data["code"] == "unavailable"
    assert fake_openai.bodies() == []


@pytest.mark.django_db
def test_the_dashboards_model_picker_lists_only_what_the_caller_may_use(owner, other_user):
    from tests.conftest import client_for  # the fixtures' module imports Django's test client

    names = [entry["name"] for entry in client_for(owner).get("/api/models").json()["models"]]
    assert names, "the stored catalogue lists nothing to pick"
    restrict(owner, ["no-such-model"])
    assert client_for(owner).get("/api/models").json()["models"] == []
    restrict(other_user, [names[0]], name="pickers")
    assert [entry["name"] for entry in client_for(other_user).get("/api/models").json()["models"]] == names[:1]
