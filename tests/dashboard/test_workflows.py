"""The Workflows page in a real browser: a graph built through the editor, run with its nodes lighting up,
validation errors on the node they name, keyboard and drag moves saved, the JSON view, export and import."""

from __future__ import annotations

import json
import re
import time

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE

pytestmark = pytest.mark.e2e  # every test here starts a process

CODE_ONLY = [
    {"id": "input", "type": "input", "name": "input", "config": {}, "position": {"x": 40, "y": 60}},
    {"id": "twice", "type": "code", "name": "twice", "config": {"code": "return input + input;"},
     "position": {"x": 280, "y": 60}},
    {"id": "out", "type": "output", "name": "out", "config": {"outputFormat": "text"}, "position": {"x": 520, "y": 60}},
]
CODE_EDGES = [{"from": "input", "to": "twice"}, {"from": "twice", "to": "out"}]


@pytest.fixture
def api(dashboard_server, admin_headers):
    """A call to the server's API as the admin (the logged-in page's user)."""
    def call(method: str, path: str, **kwargs) -> requests.Response:
        return requests.request(method, f"{dashboard_server.base_url}{path}", headers=admin_headers, timeout=10,
                                **kwargs)
    return call


def create_workflow(api, name: str, nodes=CODE_ONLY, edges=CODE_EDGES) -> dict:
    answer = api("POST", "/api/workflows", json={"name": name, "nodes": nodes, "edges": edges})
    assert answer.status_code == 201, answer.text
    return answer.json()


def script_errors(page) -> list[str]:
    """The page's errors, less the console lines of the 4xx answers a test provoked on purpose."""
    return [problem for problem in page.problems if "Failed to load resource" not in problem]


def node(page, name: str):
    return page.locator(f'.wf-node[data-node-name="{name}"]')


def drag_edge(page, source: str, target: str) -> None:
    """Draw an edge as a person does: from the source node's out-port onto the target node."""
    port = node(page, source).locator(".wf-port.out").bounding_box()
    onto = node(page, target).bounding_box()
    page.mouse.move(port["x"] + port["width"] / 2, port["y"] + port["height"] / 2)
    page.mouse.down()
    page.mouse.move(onto["x"] + onto["width"] / 2, onto["y"] + onto["height"] / 2, steps=6)
    page.mouse.up()


def saved(page) -> None:
    expect(page.locator(".wf-save-status")).to_have_text("All changes saved.")


def add_node(page, *, type_: str, name: str, after: str | None, **config: str) -> None:
    page.get_by_role("toolbar", name="Graph tools").get_by_role("button", name="Add node").click()
    form = page.get_by_role("form", name="New node")
    form.get_by_label("Type", exact=True).select_option(type_)
    form.get_by_label("Node name").fill(name)
    for label, value in config.items():
        form.get_by_label(label).fill(value)
    form.get_by_label("Connect from").select_option(after or "")
    form.get_by_role("button", name="Add node").click()
    expect(node(page, name)).to_be_visible()


def test_a_workflow_built_in_the_editor_runs_and_shows_each_nodes_output(logged_in_page, api, shot):
    page = logged_in_page
    page.problems.clear()  # from here on, nothing may fail in the page
    page.goto("/#/workflows")
    page.get_by_label("Name", exact=True).fill("double-it")
    page.get_by_role("button", name="Create workflow").click()
    expect(page.get_by_role("heading", name="double-it", level=1)).to_be_visible()
    expect(node(page, "input")).to_be_visible()
    workflow_id = page.url.rsplit("/", 1)[1]

    node(page, "input").click()  # selects it: the next node follows it
    add_node(page, type_="code", name="double", after="input",
             **{"Code (JavaScript function body)": "return input + input;"})
    saved(page)
    add_node(page, type_="output", name="result", after=None)
    saved(page)
    # The output node is connected by dragging from the code node's out-port onto it.
    drag_edge(page, "double", "result")
    expect(page.locator('.wf-edge[data-from][data-to]')).to_have_count(2)
    saved(page)

    stored = api("GET", f"/api/workflows/{workflow_id}").json()
    by_id = {item["id"]: item for item in stored["nodes"]}
    assert sorted((by_id[edge["from"]]["name"], by_id[edge["to"]]["name"]) for edge in stored["edges"]) == [
        ("double", "result"), ("input", "double")]
    assert {item["name"]: item["type"] for item in stored["nodes"]} == {"input": "input", "double": "code",
                                                                       "result": "output"}

    page.get_by_label("Run input").fill("ab")
    page.get_by_role("button", name="Run", exact=True).click()
    for name in ("input", "double", "result"):
        expect(node(page, name)).to_have_class(re.compile(r"\bdone\b"))
    trace = page.get_by_role("list", name="Node results")
    expect(trace.locator('[data-node="double"] .wf-output')).to_have_text("abab")
    expect(trace.locator('[data-node="input"] .wf-output')).to_have_text("ab")
    expect(trace.locator('[data-node="double"]')).to_contain_text(re.compile(r"\d+(\.\d+)? ms"))
    expect(page.locator(".wf-final-output")).to_have_text("abab")
    expect(page.locator(".wf-run-status")).to_contain_text("succeeded")
    runs = api("GET", f"/api/workflows/{workflow_id}/runs").json()["results"]
    assert [(run["status"], run["output"]) for run in runs] == [("success", "abab")]

    # A node's form shows what it did in the last run.
    node(page, "double").click()
    expect(page.get_by_role("region", name="Last run")).to_contain_text("abab")
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        page.get_by_role("button", name="Fit").click()  # the whole graph in the width of the screen
        assert page.evaluate("() => document.querySelector('.wf-graph').getBoundingClientRect().width "
                             "<= document.querySelector('.wf-canvas').clientWidth")
        expect(node(page, "result")).to_be_in_viewport()
        shot(page, f"workflows-editor-run-{label}")
    assert page.problems == []


def test_a_validation_error_is_shown_on_the_node_it_names_and_a_failing_node_lights_up_red(logged_in_page, api):
    workflow = create_workflow(api, "to-break")
    page = logged_in_page
    page.goto(f"/#/workflows/{workflow['id']}")
    node(page, "twice").click()
    form = page.get_by_role("form", name="Node twice")
    form.get_by_label("Code (JavaScript function body)").fill("return (")
    form.get_by_role("button", name="Apply").click()

    expect(node(page, "twice")).to_have_class(re.compile(r"\binvalid\b"))
    expect(node(page, "input")).not_to_have_class(re.compile(r"\binvalid\b"))
    expect(node(page, "twice")).to_have_attribute("aria-label", re.compile("invalid"))
    problems = page.locator(".wf-problems")
    expect(problems).to_be_visible()
    expect(problems.get_by_role("button", name="Show twice")).to_be_visible()
    expect(page.locator(".wf-save-status")).to_have_attribute("data-state", "unsaved")
    stored = api("GET", f"/api/workflows/{workflow['id']}").json()
    assert next(item for item in stored["nodes"] if item["id"] == "twice")["config"]["code"] == "return input + input;"

    # Showing the node focuses it in the graph; Enter opens its form again, where it is fixed.
    problems.get_by_role("button", name="Show twice").click()
    expect(node(page, "twice")).to_be_focused()
    page.keyboard.press("Enter")
    form = page.get_by_role("form", name="Node twice")
    form.get_by_label("Code (JavaScript function body)").fill("return input.toUpperCase();")
    form.get_by_role("button", name="Apply").click()
    saved(page)
    expect(node(page, "twice")).not_to_have_class(re.compile(r"\binvalid\b"))
    expect(problems).to_be_hidden()
    stored = api("GET", f"/api/workflows/{workflow['id']}").json()
    assert next(item for item in stored["nodes"] if item["id"] == "twice")["config"]["code"] == \
        "return input.toUpperCase();"

    # Valid code that throws at run time: the node lights up as an error, with its message; the next one
    # never runs.
    node(page, "twice").click()
    form = page.get_by_role("form", name="Node twice")
    form.get_by_label("Code (JavaScript function body)").fill("throw new Error('no twins today');")
    form.get_by_role("button", name="Apply").click()
    saved(page)
    page.get_by_label("Run input").fill("x")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(node(page, "twice")).to_have_class(re.compile(r"\berror\b"))
    expect(node(page, "input")).to_have_class(re.compile(r"\bdone\b"))
    expect(page.locator(".wf-run-status")).to_contain_text("failed")
    expect(node(page, "out")).not_to_have_class(re.compile(r"\b(done|running|error)\b"))
    trace = page.get_by_role("list", name="Node results")
    expect(trace.locator('[data-node="twice"]')).to_contain_text("no twins today")
    expect(page.locator(".wf-run-output [role=alert]")).to_contain_text("no twins today")
    assert script_errors(page) == []


def test_nodes_moved_by_keyboard_and_by_drag_keep_their_positions(logged_in_page, api):
    workflow = create_workflow(api, "to-move")
    page = logged_in_page
    page.goto(f"/#/workflows/{workflow['id']}")
    # Something typed in a node's form and not applied yet survives the redraws of moves and saves.
    node(page, "input").click()
    page.get_by_role("form", name="Node input").get_by_label("Node name").fill("typed-not-applied")
    node(page, "twice").focus()
    for _ in range(3):
        page.keyboard.press("ArrowDown")
    page.keyboard.press("Shift+ArrowRight")
    saved(page)
    expect(page.get_by_role("form", name="Node input").get_by_label("Node name")).to_have_value("typed-not-applied")
    stored = {item["id"]: item for item in api("GET", f"/api/workflows/{workflow['id']}").json()["nodes"]}
    assert stored["twice"]["position"] == {"x": 280 + 50, "y": 60 + 30}

    box = node(page, "out").bounding_box()
    scale = page.evaluate("() => { const svg = document.querySelector('.wf-graph'); "
                          "return svg.getBoundingClientRect().width / svg.viewBox.baseVal.width; }")
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 2 + 60 * scale, box["y"] + box["height"] / 2 + 120 * scale, steps=8)
    page.mouse.up()
    saved(page)
    stored = {item["id"]: item for item in api("GET", f"/api/workflows/{workflow['id']}").json()["nodes"]}
    assert abs(stored["out"]["position"]["x"] - (520 + 60)) <= 2
    assert abs(stored["out"]["position"]["y"] - (60 + 120)) <= 2
    # The edge follows a focused edge's Delete key too: disconnecting from the keyboard.
    edge = page.locator('.wf-edge[data-from="twice"][data-to="out"]')
    edge.focus()
    page.keyboard.press("Delete")
    expect(edge).to_have_count(0)
    saved(page)
    assert api("GET", f"/api/workflows/{workflow['id']}").json()["edges"] == [
        {"from": "input", "to": "twice"}]

    # Connecting a condition makes the edge its branch (an edge that is no branch could never be taken).
    node(page, "twice").click()
    add_node(page, type_="condition", name="check", after="twice", **{"Condition (JavaScript expression)": "true"})
    saved(page)
    drag_edge(page, "check", "out")
    saved(page)
    stored = api("GET", f"/api/workflows/{workflow['id']}").json()
    check = next(item for item in stored["nodes"] if item["name"] == "check")
    assert check["config"] == {"condition": "true", "trueBranch": "out"}
    assert {"from": check["id"], "to": "out"} in stored["edges"]
    expect(page.locator(f'.wf-edge[data-from="{check["id"]}"][data-to="out"] .wf-edge-label')).to_have_text("true")


def test_the_json_view_applies_the_whole_document_on_save(logged_in_page, api):
    workflow = create_workflow(api, "by-json")
    page = logged_in_page
    page.goto(f"/#/workflows/{workflow['id']}")
    page.get_by_role("tab", name="JSON").click()
    text = page.get_by_label("Workflow JSON")
    document = json.loads(text.input_value())
    assert [item["name"] for item in document["nodes"]] == ["input", "twice", "out"]
    document["description"] = "edited as JSON"
    document["nodes"][1]["config"]["code"] = "return input.split('').reverse().join('');"
    document["nodes"].append({"id": "shout", "type": "code", "name": "shout", "config": {"code": "return input + '!';"},
                              "position": {"x": 760, "y": 60}})
    document["edges"].append({"from": "out", "to": "shout"})
    text.fill(json.dumps(document))
    page.get_by_role("button", name="Apply JSON").click()
    saved(page)
    stored = api("GET", f"/api/workflows/{workflow['id']}").json()
    assert stored["description"] == "edited as JSON"
    assert [item["name"] for item in stored["nodes"]] == ["input", "twice", "out", "shout"]
    assert {"from": "out", "to": "shout"} in stored["edges"]

    # A document the server refuses names its node, which the graph marks.
    document["nodes"][3]["config"] = {"code": "return input +;"}
    text.fill(json.dumps(document))
    page.get_by_role("button", name="Apply JSON").click()
    expect(page.locator("#wf-view-json .form-error")).to_be_visible()
    page.get_by_role("tab", name="Graph").click()
    expect(node(page, "shout")).to_have_class(re.compile(r"\binvalid\b"))
    text_json = page.get_by_role("tab", name="JSON")
    text_json.click()
    page.get_by_label("Workflow JSON").fill("{not json")
    page.get_by_role("button", name="Apply JSON").click()
    expect(page.locator("#wf-view-json .form-error")).to_contain_text("Not valid JSON")


def test_export_then_import_gives_the_same_graph_and_a_taken_name_is_refused(logged_in_page, api,
                                                                              tmp_path, shot):
    workflow = create_workflow(api, "round-trip")
    page = logged_in_page
    page.goto(f"/#/workflows/{workflow['id']}")
    expect(node(page, "twice")).to_be_visible()
    with page.expect_download() as download:
        page.get_by_role("button", name="Export").click()
    exported = json.loads(open(download.value.path()).read())
    assert exported == api("GET", f"/api/workflows/{workflow['id']}/export").json()
    assert download.value.suggested_filename == "round-trip.workflow.json"

    page.goto("/#/workflows")
    upload = page.get_by_label("Import a workflow file")
    same = tmp_path / "same.json"
    same.write_text(json.dumps(exported))
    upload.set_input_files(str(same))
    expect(page.locator(".wf-import [role=alert]")).to_contain_text("same.json was not imported")

    renamed = tmp_path / "copy.json"
    renamed.write_text(json.dumps({**exported, "name": "round-trip-copy"}))
    upload.set_input_files(str(renamed))
    expect(page.get_by_role("heading", name="round-trip-copy", level=1)).to_be_visible()
    copy_id = page.url.rsplit("/", 1)[1]
    copy = api("GET", f"/api/workflows/{copy_id}").json()
    assert (copy["nodes"], copy["edges"]) == (exported["nodes"], exported["edges"])

    page.goto("/#/workflows")
    expect(page.get_by_role("link", name="round-trip-copy")).to_be_visible()
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        shot(page, f"workflows-list-{label}")
    page.get_by_role("button", name="Delete round-trip-copy").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(page.get_by_role("link", name="round-trip-copy")).to_have_count(0)
    assert api("GET", f"/api/workflows/{copy_id}").status_code == 404
    assert script_errors(page) == []


def test_a_run_stopped_from_the_page_is_cancelled_and_a_missing_workflow_says_so(logged_in_page, api):
    nodes = [CODE_ONLY[0],
             {"id": "think", "type": "llm", "name": "think", "config": {"prompt": "Repeat ${input}"},
              "position": {"x": 280, "y": 60}},
             {"id": "wait", "type": "delay", "name": "wait", "config": {"delayMs": 8000},
              "position": {"x": 520, "y": 60}}, {**CODE_ONLY[2], "position": {"x": 760, "y": 60}}]
    workflow = create_workflow(api, "slow-one", nodes=nodes, edges=[
        {"from": "input", "to": "think"}, {"from": "think", "to": "wait"}, {"from": "wait", "to": "out"}])
    page = logged_in_page
    page.goto(f"/#/workflows/{workflow['id']}")
    page.get_by_label("Run input").fill("patience")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(node(page, "wait")).to_have_class(re.compile(r"\brunning\b"))
    # The LLM node's reply (the offline stand-in's, streamed as deltas) is its output.
    think = page.get_by_role("list", name="Node results").locator('[data-node="think"]')
    expect(think.locator(".wf-output")).to_contain_text("You said: Repeat patience")
    expect(node(page, "think")).to_have_class(re.compile(r"\bdone\b"))
    page.get_by_role("button", name="Stop").click()
    expect(page.locator(".wf-run-status")).to_contain_text("Stopped")
    expect(node(page, "wait")).to_have_class(re.compile(r"\bcancelled\b"))
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled()
    # Hanging up cancelled the run on the server too (well before its 8 s delay would have ended).
    deadline = time.monotonic() + 5
    while (status := api("GET", f"/api/workflows/{workflow['id']}/runs").json()["results"][0]["status"]) != \
            "cancelled" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert status == "cancelled", f"the stopped run is {status!r}, not cancelled"

    page.goto("/#/workflows/0b5e3c1e-0000-4000-8000-000000000000")
    expect(page.locator("main .error-box")).to_contain_text("no such workflow")
    page.get_by_role("link", name="← All workflows").click()
    expect(page.get_by_role("link", name="slow-one")).to_be_visible()


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["375", "1280"])
def test_the_history_shows_a_versions_diff_and_restores_it(logged_in_page, api, viewport):
    workflow = create_workflow(api, f"history-{viewport['width']}")
    twice = {**CODE_ONLY[1], "config": {"code": "return input + '!';"}}
    note = {"id": "note", "type": "delay", "name": "note", "config": {"delayMs": 0}, "position": {"x": 760, "y": 60}}
    changed = [CODE_ONLY[0], twice, CODE_ONLY[2], note]
    assert api("PATCH", f"/api/workflows/{workflow['id']}",
               json={"nodes": changed, "edges": [*CODE_EDGES, {"from": "out", "to": "note"}]}).status_code == 200
    page = logged_in_page
    page.set_viewport_size(viewport)
    page.goto(f"/#/workflows/{workflow['id']}")
    expect(node(page, "note")).to_be_visible()
    page.locator(".wf-history summary").click()
    page.get_by_role("button", name="Version 1", exact=True).click()
    diff = page.locator(".wf-diff")
    expect(diff).to_contain_text("node note (delay) added")
    expect(diff).to_contain_text("node twice changed")
    expect(diff).to_contain_text("edge out → note added")
    page.get_by_role("button", name="Restore version 1").click()
    expect(node(page, "note")).to_have_count(0)
    stored = api("GET", f"/api/workflows/{workflow['id']}").json()
    assert stored["version"] == 3 and [item["name"] for item in stored["nodes"]] == ["input", "twice", "out"]
    expect(page.get_by_role("button", name="Version 3", exact=True)).to_be_visible()
    assert not script_errors(page)
