"""Every node type through every door that runs a workflow, on a real server (`manage.py serve`: daphne and
the django-q2 cluster) whose llm nodes talk to the fake upstream.

The node types are read from the registry (`workflows.nodes.NODE_TYPES`) and the run modes from the code
that opens them (the run endpoint's options, the /v1 model sources, the tool sources): a node type or a
mode added without a case here is a failing test, not a combination nobody ran. Each (type, door) runs a
small workflow built around that type, and checks the door's answer, each node's output and the stored
run (status, outputs, trace); the streamed door checks the whole event sequence, the terminal one included.
A workflow that fails goes through every door as well: each answers with the cause and stores it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
import requests
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from rest_framework.fields import BooleanField

from agentsite.agent.model_sources import model_sources
from agentsite.agent.tools import registry
from tests.e2e import UPSTREAM_KEY, poll, sse_events
from tests.fakes.llm import Call, Text, ToolCalls, last_user_text
from tests.server import LiveServer
from tests.workflows.conftest import graph, node
from workflows.api import RunInputSerializer
from workflows.nodes import NODE_TYPES
from workflows.runs import TOOL_PREFIX, WorkflowModelSource, WorkflowToolSource

pytestmark = pytest.mark.e2e

NOTE = "A note for every run mode."


@dataclass
class Case:
    """A workflow built around one node type: what it is given and everything a run of it must give."""

    graph: dict[str, Any]
    input: str
    outputs: dict[str, Any]  # each node's output, by name (a branch not taken has none)
    output: Any  # the run's output (its output node's)
    reply: str  # the output as text, as the /v1 model and the tool answer it
    trace: list[tuple[str, str]]  # (node, type) in the order they ran, each at its first attempt
    deltas: dict[str, list[str]] = field(default_factory=dict)  # an llm node's streamed pieces, by name
    upstream: list[Callable[[Any], Text]] = field(default_factory=list)  # the fake's replies to its llm nodes
    failed: tuple[str, str] | None = None  # a run that fails: (the failing node, words of its cause)
    waits_at: str | None = None  # a run that stops `waiting` at this approval node, then is approved

    def status_of(self, name: str) -> str:
        return "error" if self.failed and self.failed[0] == name else "success"

    @property
    def answers_an_error(self) -> bool:
        """The door answers an error: the run failed, or it waits (a caller of the /v1 model or the tool
        cannot wait for a person: `workflow_waiting`)."""
        return self.failed is not None or self.waits_at is not None

    def check_answer(self, text: str, is_error: bool) -> None:
        """A door's answer: the reply, or (for a run that fails) an error naming the cause, or (a run that
        waits for an approval) an error saying so."""
        if self.waits_at:
            assert is_error and "waiting for an approval" in text, (is_error, text)
        elif self.failed:
            assert is_error and self.failed[1] in text, (is_error, text)
        else:
            assert (is_error, text) == (False, self.reply)


def said(request: Any) -> Text:
    """The llm node's reply: its prompt, said back in two pieces."""
    prompt = last_user_text(request.json()["messages"])
    return Text(f"Said: {prompt}", pieces=["Said: ", prompt])


APPROVED = {"decision": "approve", "comment": "fine", "data": {"k": 1}, "by": "admin"}


def case_for(kind: str, web_url: str) -> Case:
    """The case of a node type; a type without one fails, naming itself."""
    start, out = node("in", "input"), node("out", "output")
    line = [("in", kind), (kind, "out")]
    cases: dict[str, Callable[[], Case]] = {
        "input": lambda: Case(graph(start, out, edges=[("in", "out")]), "plain words",
                              {"in": "plain words", "out": "plain words"}, "plain words", "plain words",
                              [("in", "input"), ("out", "output")]),
        "llm": lambda: Case(graph(start, node("llm", "llm", prompt="Repeat: ${in}"), out, edges=line), "a question",
                            {"in": "a question", "llm": "Said: Repeat: a question", "out": "Said: Repeat: a question"},
                            "Said: Repeat: a question", "Said: Repeat: a question",
                            [("in", "input"), ("llm", "llm"), ("out", "output")],
                            deltas={"llm": ["Said: ", "Repeat: a question"]}, upstream=[said]),
        "tool": lambda: Case(graph(start, node("tool", "tool", toolName="web_fetch",
                                               toolArgs={"url": f"{web_url}/run-modes/${{in}}"}), out, edges=line),
                             "note", {"in": "note", "tool": f"URL: {web_url}/run-modes/note\n\n{NOTE}",
                                      "out": f"URL: {web_url}/run-modes/note\n\n{NOTE}"},
                             f"URL: {web_url}/run-modes/note\n\n{NOTE}", f"URL: {web_url}/run-modes/note\n\n{NOTE}",
                             [("in", "input"), ("tool", "tool"), ("out", "output")]),
        # The shape of issue 23's report: input -> code -> condition -> one output node on each branch.
        "condition": lambda: Case(
            graph(start, node("measure", "code", code="return input.trim().length > 3 ? 'long' : 'short';"),
                  {"id": "condition", "name": "condition", "type": "condition",
                   "config": {"condition": "input === 'long'", "trueBranch": "yes", "falseBranch": "no"}},
                  node("yes", "output"), node("no", "output"),
                  edges=[("in", "measure"), ("measure", "condition"), ("condition", "yes"), ("condition", "no")]),
            "  a long input ", {"in": "  a long input ", "measure": "long", "condition": "long", "yes": "long"},
            "long", "long", [("in", "input"), ("measure", "code"), ("condition", "condition"), ("yes", "output")]),
        "code": lambda: Case(graph(start, node("code", "code", code="return {upper: input.toUpperCase(), "
                                                                   "length: input.length};"),
                                   node("out", "output", outputFormat="json"), edges=line), "shout",
                             {"in": "shout", "code": {"upper": "SHOUT", "length": 5},
                              "out": {"upper": "SHOUT", "length": 5}},
                             {"upper": "SHOUT", "length": 5}, '{"upper": "SHOUT", "length": 5}',
                             [("in", "input"), ("code", "code"), ("out", "output")]),
        "delay": lambda: Case(graph(start, node("delay", "delay", delayMs=20), out, edges=line), "later",
                              {"in": "later", "delay": "later", "out": "later"}, "later", "later",
                              [("in", "input"), ("delay", "delay"), ("out", "output")]),
        # The run stops `waiting` at the approval; the door's answer says so; then it is approved over the API
        # and the task queue resumes it (run_case): the decision is the node's output.
        "approval": lambda: Case(graph(start, node("approval", "approval", prompt="Approve ${in}?"),
                                       node("out", "output", outputFormat="json"), edges=line), "a request",
                                 {"in": "a request", "approval": APPROVED, "out": APPROVED}, APPROVED,
                                 '{"decision": "approve", "comment": "fine", "data": {"k": 1}, "by": "admin"}',
                                 [("in", "input"), ("approval", "approval"), ("out", "output")],
                                 waits_at="approval"),
        "output": lambda: Case(graph(start, node("out", "output", outputFormat="json"), edges=[("in", "out")]),
                               '{"n": [1, 2]}', {"in": '{"n": [1, 2]}', "out": {"n": [1, 2]}}, {"n": [1, 2]},
                               '{"n": [1, 2]}', [("in", "input"), ("out", "output")]),
    }
    if kind not in cases:
        pytest.fail(f"The node type {kind!r} (workflows.nodes.NODE_TYPES) has no case here: add one to case_for.")
    return cases[kind]()


# A run that fails: a code node throws, naming its input. Every door must answer with the cause and store
# the run `error` with it.
FAILING = Case(graph(node("in", "input"), node("boom", "code", code="throw new Error('refused: ' + input);"),
                     node("out", "output"), edges=[("in", "boom"), ("boom", "out")]),
               "nope", {"in": "nope"}, None, "", [("in", "input"), ("boom", "code")], failed=("boom", "refused: nope"))


def run_modes() -> list[str]:
    """Every way the code base runs a workflow, read from the code: the run endpoint without options and with
    each of its boolean options, each /v1 model source of workflows, each tool source of workflows."""
    options = [name for name, option in RunInputSerializer().fields.items() if isinstance(option, BooleanField)]
    models = [source.prefix for source in model_sources() if isinstance(source, WorkflowModelSource)]
    tools = [name for name in registry.sources() if isinstance(registry.source(name), WorkflowToolSource)]
    return ["run", *(f"run {option}" for option in options), *(f"model {prefix}" for prefix in models),
            *(f"tool {name}" for name in tools)]


# --- the server, and the workflow of each case ----------------------------------------------------------

@pytest.fixture(scope="module")
def live(fake_openai_server):
    """`serve` (daphne and the task cluster) with the `openai` provider pointed at the fake; admin headers."""
    server = LiveServer(env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000", "AGENTSITE_ALLOW_PRIVATE_FETCH": "1"}).start()
    try:
        headers = {"Authorization": f"Bearer {server.login()['token']}"}
        requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=10, json={
            "provider": "openai", "base_url": fake_openai_server.base_url, "api_key": UPSTREAM_KEY,
            "model": "fake-model"}).raise_for_status()
        yield server, headers
    finally:
        server.stop()


@dataclass
class Door:
    """One kind of node's workflow on the live server, ready to be run through a door."""

    server: LiveServer
    headers: dict[str, str]
    case: Case
    workflow: dict[str, Any]
    fake: Any  # the fake upstream

    def script_upstream(self, *before: Any, after: tuple[Any, ...] = ()) -> None:
        """The fake's replies for one run of the case (its llm nodes'), with others around them."""
        self.fake.reset()
        self.fake.script(*before, *self.case.upstream, *after)

    @property
    def base(self) -> str:
        return self.server.base_url

    @property
    def token(self) -> str:
        return self.headers["Authorization"].split()[1]

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, f"{self.base}{path}", headers=self.headers, timeout=30, **kwargs)

    def run_count(self) -> int:
        return self.api("GET", f"/api/workflows/{self.workflow['id']}/runs").json()["count"]

    def newest_run(self, count_before: int) -> dict[str, Any]:
        """The one run this door made: the newest, and exactly one more than before."""
        listed = self.api("GET", f"/api/workflows/{self.workflow['id']}/runs").json()
        assert listed["count"] == count_before + 1, f"expected one new run, found {listed['count'] - count_before}"
        return listed["results"][0]


def ensure_workflow(server: LiveServer, headers: dict[str, str], name: str, data: dict) -> dict[str, Any]:
    """The workflow of this name, created by the first test that needs it."""
    response = requests.post(f"{server.base_url}/api/workflows", json={"name": name, **data}, headers=headers,
                             timeout=10)
    if response.status_code == 409:
        listed = requests.get(f"{server.base_url}/api/workflows?limit=200", headers=headers,
                              timeout=10).json()["results"]
        return next(item for item in listed if item["name"] == name)
    assert response.status_code == 201, response.text
    return response.json()


# --- the doors: each runs the case once and returns the stored run -------------------------------------

def sync_run(door: Door) -> dict[str, Any]:
    response = door.api("POST", f"/api/workflows/{door.workflow['id']}/run", json={"input": door.case.input})
    assert response.status_code == 200, response.text
    return response.json()


def queued_run(door: Door) -> dict[str, Any]:
    """`async`: 202 queued, then the real task cluster runs it."""
    response = door.api("POST", f"/api/workflows/{door.workflow['id']}/run",
                        json={"input": door.case.input, "async": True})
    assert response.status_code == 202 and response.json()["status"] == "queued", response.text
    url = f"/api/workflows/runs/{response.json()['id']}"
    return poll(lambda: (found := door.api("GET", url).json())["status"] not in ("queued", "running") and found,
                "the task cluster finished the queued run", timeout=30)


def streamed_run(door: Door) -> dict[str, Any]:
    """`stream`: the whole event sequence, from run_started to done."""
    case = door.case
    with door.api("POST", f"/api/workflows/{door.workflow['id']}/run", stream=True,
                  json={"input": case.input, "stream": True}) as response:
        assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/event-stream")
        events = [(name, data) for name, data in sse_events(response) if name != "comment"]
    run_id = events[0][1]["run_id"] if events and events[0][0] == "run_started" else None
    run = events[-1][1].get("run", {}) if events else {}
    expected: list[tuple[str, Any]] = [("run_started", {"run_id": run.get("id")})]
    for name, _ in case.trace:
        expected.append(("node_started", {"node": name}))
        if name == case.waits_at:  # the run stops there: the stream ends with the request
            approvals = events[-1][1].get("approvals")
            assert run.get("status") == "waiting" and [item["node"] for item in approvals] == [name], events[-1]
            expected.append(("approval_requested", {"run": run, "approvals": approvals}))
            break
        expected += [("delta", {"node": name, "content": piece}) for piece in case.deltas.get(name, [])]
        expected.append(("node_finished", {"node": name, "status": case.status_of(name),
                                           "output": case.outputs.get(name)}))
    else:
        expected.append(("done", {"run": run}))
    got = [(name, {key: value for key, value in data.items() if key != "duration_ms"}) for name, data in events]
    stored = door.api("GET", f"/api/workflows/runs/{run_id}").json() if run_id else None
    assert got == expected, f"the events were {got}; the run was stored as {stored}"
    assert all(isinstance(data["duration_ms"], float) for name, data in events if name == "node_finished")
    return run


def v1_model(door: Door) -> dict[str, Any]:
    """`workflow:<name>` through the official openai SDK, whole and streamed (one run each); a run that fails
    is a 502 `workflow_failed` naming the cause."""
    client = openai.OpenAI(base_url=f"{door.base}/v1", api_key=door.token, max_retries=0)
    messages = [{"role": "user", "content": door.case.input}]
    model = f"workflow:{door.workflow['name']}"
    before = door.run_count()
    if door.case.answers_an_error:
        status, code = (409, "workflow_waiting") if door.case.waits_at else (502, "workflow_failed")
        for stream in (False, True):
            door.script_upstream()
            with pytest.raises(openai.APIStatusError) as caught:
                client.chat.completions.create(model=model, messages=messages, stream=stream)
            assert caught.value.status_code == status and caught.value.body["code"] == code
            door.case.check_answer(caught.value.message, True)
            if door.case.waits_at:  # the first run is approved by run_case; this one is decided here
                if stream is False:
                    approve(door, door.newest_run(before))
            else:
                check_run(door.newest_run(before), door.case)
            before += 1
        return door.newest_run(before - 1)
    reply = client.chat.completions.create(model=model, messages=messages)
    assert reply.choices[0].message.content == door.case.reply and reply.choices[0].finish_reason == "stop"
    check_run(door.newest_run(before), door.case)
    door.script_upstream()
    chunks = list(client.chat.completions.create(model=model, stream=True, messages=messages))
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == door.case.reply
    assert chunks[-1].choices[0].finish_reason == "stop"
    return door.newest_run(before + 1)


def tool_by_mcp(door: Door) -> dict[str, Any]:
    """`workflow__<name>` called by an MCP client on /mcp."""
    before = door.run_count()

    async def call() -> Any:
        async with create_mcp_http_client(headers=door.headers) as client, \
                streamable_http_client(f"{door.base}/mcp", http_client=client) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            return await session.call_tool(TOOL_PREFIX + door.workflow["name"], {"input": door.case.input})

    result = asyncio.run(call())
    door.case.check_answer("".join(item.text for item in result.content), result.is_error)
    return door.newest_run(before)


def tool_by_the_agent(door: Door) -> dict[str, Any]:
    """`workflow__<name>` called by the agent (the /v1 `agent` model) when the model asks for it; the model's
    last reply says back what the tool answered."""
    tool = TOOL_PREFIX + door.workflow["name"]

    answers: list[str] = []

    def tool_answer(request: Any) -> Text:
        answers.append(request.json()["messages"][-1]["content"])
        return Text(answers[-1])

    door.script_upstream(ToolCalls([Call(tool, {"input": door.case.input})]), after=(tool_answer,))
    before = door.run_count()
    client = openai.OpenAI(base_url=f"{door.base}/v1", api_key=door.token, max_retries=0)
    reply = client.chat.completions.create(model="agent", messages=[{"role": "user", "content": "Run it."}])
    assert reply.choices[0].message.content == answers[0]
    # OpenAI's tool message has no error flag: what the agent was told is the text.
    door.case.check_answer(answers[0], is_error=door.case.answers_an_error)
    assert door.fake.pending == 0
    return door.newest_run(before)


def tool_by_a_workflow(door: Door) -> dict[str, Any]:
    """`workflow__<name>` called by another workflow's tool node."""
    outer = ensure_workflow(door.server, door.headers, f"calls-{door.workflow['name']}", graph(
        node("in", "input"), node("call", "tool", toolName=TOOL_PREFIX + door.workflow["name"],
                                  toolArgs={"input": "${in}"}), node("out", "output"),
        edges=[("in", "call"), ("call", "out")]))
    before = door.run_count()
    response = door.api("POST", f"/api/workflows/{outer['id']}/run", json={"input": door.case.input})
    assert response.status_code == 200, response.text
    outer_run = response.json()
    if door.case.answers_an_error:
        assert (outer_run["status"], outer_run["error"]["node"]) == ("error", "call"), outer_run
        door.case.check_answer(outer_run["error"]["message"], True)
    else:
        assert (outer_run["status"], outer_run["output"]) == ("success", door.case.reply), outer_run
    return door.newest_run(before)


# Each run mode (run_modes()) and the doors that run a workflow through it.
DOORS: dict[str, list[Callable[[Door], dict[str, Any]]]] = {
    "run": [sync_run], "run async": [queued_run], "run stream": [streamed_run], "model workflow:": [v1_model],
    "tool workflows": [tool_by_mcp, tool_by_the_agent, tool_by_a_workflow],
}


def approve(door: Door, run: dict[str, Any]) -> dict[str, Any]:
    """Approve the run's pending approval over the API; the task queue resumes it: the finished run."""
    pending = [item for item in door.api("GET", "/api/approvals?limit=200").json()["results"]
               if item["run_id"] == run["id"]]
    assert [item["node"] for item in pending] == [door.case.waits_at], pending
    decided = door.api("POST", f"/api/approvals/{pending[0]['id']}",
                       json={"decision": "approve", "comment": "fine", "data": {"k": 1}})
    assert decided.status_code == 200, decided.text
    url = f"/api/workflows/runs/{run['id']}"
    return poll(lambda: (found := door.api("GET", url).json())["status"] not in ("waiting", "queued", "running")
                and found, "the task queue resumed the approved run", timeout=30)


def check_run(run: dict[str, Any], case: Case) -> None:
    """The stored run: its status (and cause), each node's output, the output, and a trace of the nodes that
    ran, each with its status (and cause)."""
    if case.failed:
        node_name, cause = case.failed
        assert (run["status"], run["error"]["node"]) == ("error", node_name) and cause in run["error"]["message"], run
    else:
        assert (run["status"], run["error"]) == ("success", None), run
    assert run["input"] == case.input
    assert run["outputs"] == case.outputs and run["output"] == case.output
    errors = {name: run["error"]["message"] for name, _ in case.trace if case.status_of(name) == "error"}
    assert [(entry["node"], entry["type"], entry["status"], entry["attempts"], entry["error"])
            for entry in run["trace"]] == [(name, kind, case.status_of(name), 1, errors.get(name))
                                           for name, kind in case.trace]
    assert run["started_at"] and run["finished_at"]


def doors() -> list[tuple[str, Callable[[Door], dict[str, Any]] | None]]:
    """(run mode, door) for every door of every mode; a mode without a door is one of its own, which fails."""
    return [(mode, door) for mode in run_modes() for door in DOORS.get(mode) or [None]]


def door_id(mode: str, door: Callable | None) -> str:
    return door.__name__ if door else f"no door for {mode}"


def run_case(live: Any, fake_openai: Any, name: str, case: Case, mode: str, run_door: Callable | None) -> None:
    if run_door is None:
        pytest.fail(f"The run mode {mode!r} has no door in DOORS: add a function that runs a workflow through it.")
    server, headers = live
    door = Door(server, headers, case, ensure_workflow(server, headers, name, case.graph), fake_openai)
    door.script_upstream()
    run = run_door(door)
    if case.waits_at:
        assert run["status"] == "waiting" and run["finished_at"] is None, run
        run = approve(door, run)
    check_run(run, case)
    assert door.api("GET", f"/api/workflows/runs/{run['id']}").json() == run
    assert fake_openai.pending == 0, "an llm node did not ask the upstream"


def test_every_node_type_and_run_mode_has_a_case(fake_web):
    assert set(DOORS) == set(run_modes()), "a run mode has no door in DOORS (or a door names no mode)"
    for kind in NODE_TYPES:
        assert case_for(kind, fake_web.base_url).trace, kind


EVERY_TYPE_AND_DOOR = [pytest.param(kind, mode, door, id=f"{kind}-{door_id(mode, door)}")
                       for kind in NODE_TYPES for mode, door in doors()]


@pytest.mark.parametrize(("kind", "mode", "run_door"), EVERY_TYPE_AND_DOOR)
def test_every_node_type_runs_through_every_run_mode(live, fake_openai, fake_web, kind, mode, run_door):
    fake_web.page("/run-modes/note", NOTE, content_type="text/plain; charset=utf-8")
    run_case(live, fake_openai, f"case-{kind}", case_for(kind, fake_web.base_url), mode, run_door)


@pytest.mark.parametrize(("mode", "run_door"), [pytest.param(mode, door, id=door_id(mode, door))
                                                for mode, door in doors()])
def test_a_run_that_fails_is_stored_error_with_its_cause_through_every_run_mode(live, fake_openai, mode, run_door):
    run_case(live, fake_openai, "case-fails", FAILING, mode, run_door)
