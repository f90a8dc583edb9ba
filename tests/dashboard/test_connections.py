"""Settings' Connections and Aliases sections and the chat's model picker in a real browser (issue 26): an admin
adds an Ollama-style connection that discovers its models and an OpenAI-style one with a key (write-only), sees
a failed discovery's message, edits, disables and deletes connections, makes the alias `smart` = [hosted,
local] with fallback and reorders it; a chat picks `smart`, and with the hosted upstream stopped the reply
still comes, from the local one. At 375 and 1280 px, with nothing overflowing."""

from __future__ import annotations

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE
from tests.dashboard.test_layout import assert_fits
from tests.fakes.llm import Error, FakeOpenAI, Text
from tests.server import refusing_port

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def upstreams():
    """Two fakes of our own: `local` (Ollama-style: OpenAI's wire format, its models discovered) and `hosted`."""
    with FakeOpenAI() as local, FakeOpenAI() as hosted:
        local.models = ["llama3.2", "qwen2.5"]
        yield local, hosted


@pytest.fixture
def api(dashboard_server, admin_headers):
    def call(method: str, path: str, **kwargs) -> requests.Response:
        return requests.request(method, f"{dashboard_server.base_url}{path}", headers=admin_headers, timeout=10,
                                **kwargs)
    return call


def connection_item(page, name: str):
    return page.get_by_role("listitem", name=f"Connection {name}")


def add_connection(page, name: str, url: str, *, key: str = "", models: list[str] | None = None) -> None:
    form = page.get_by_role("form", name="New connection")
    form.get_by_label("Name", exact=True).fill(name)
    form.get_by_label("Provider").select_option("openai")
    form.get_by_label("Base URL").fill(url)
    if key:
        form.get_by_label("API key").fill(key)
    if models is None:
        form.get_by_label("Models", exact=True).select_option("discover")
    else:
        form.get_by_label("Model names").fill("\n".join(models))
    form.get_by_role("button", name="Add connection").click()
    expect(connection_item(page, name)).to_be_visible()


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["375", "1280"])
def test_an_admin_manages_connections_and_aliases_and_a_chat_picks_the_alias(
        logged_in_page, dashboard_server, upstreams, api, shot, viewport):
    page = logged_in_page
    local, hosted = upstreams
    local.reset()
    hosted.reset()
    local.models = ["llama3.2", "qwen2.5"]
    width = viewport["width"]
    # Names of this width's own: the router's cool-down of the other run's stopped hosted model would apply.
    lo, ho = f"local{width}", f"hosted{width}"
    for connection in api("GET", "/api/connections").json():  # the other width's run left its own
        if connection["name"] != "default":
            api("DELETE", f"/api/connections/{connection['id']}")
    for alias in api("GET", "/api/aliases").json():
        api("DELETE", f"/api/aliases/{alias['id']}")
    page.set_viewport_size(viewport)
    page.goto("/#/settings")
    expect(page.get_by_role("form", name="New connection")).to_be_visible()

    # An Ollama-style connection whose models are discovered, and a hosted one with a key and listed models.
    add_connection(page, lo, local.base_url)
    expect(connection_item(page, lo).locator(".conn-models")).to_contain_text("llama3.2, qwen2.5")
    add_connection(page, ho, hosted.base_url, key="sk-hosted-secret", models=["gpt-4o"])
    hosted_item = connection_item(page, ho)
    expect(hosted_item).to_contain_text("API key")
    expect(hosted_item.locator("dd").nth(2)).to_have_text("Set")
    assert "sk-hosted-secret" not in page.content()
    [stored] = [item for item in api("GET", "/api/connections").json() if item["name"] == ho]
    assert stored["api_key_set"] is True and "api_key" not in stored and stored["models"] == ["gpt-4o"]

    # A failed discovery shows the upstream's message; once the upstream answers again, the error goes.
    local.models_error = Error(503, "the model list is being rebuilt")
    connection_item(page, lo).get_by_role("button", name="Refresh models").click()
    failure = connection_item(page, lo).locator(".conn-discovery-error")
    expect(failure).to_contain_text("the model list is being rebuilt")
    shot(page, f"connections-discovery-failed-{width}")
    local.models_error = None
    local.models = ["llama3.2"]
    connection_item(page, lo).get_by_role("button", name="Refresh models").click()
    expect(failure).to_have_count(0)
    expect(connection_item(page, lo).locator(".conn-models")).to_contain_text("discovered: llama3.2")

    # Edit (the key stays set when left empty), disable and enable again, delete a spare one.
    hosted_item.get_by_role("button", name="Edit").click()
    edit = page.get_by_role("form", name=f"Edit connection {ho}")
    edit.get_by_label("Timeout (seconds)").fill("15")
    edit.get_by_role("button", name="Save connection").click()
    expect(hosted_item).to_contain_text("15 s")
    [stored] = [item for item in api("GET", "/api/connections").json() if item["name"] == ho]
    assert stored["timeout_s"] == 15 and stored["api_key_set"] is True
    hosted_item.get_by_role("button", name="Disable").click()
    expect(hosted_item.get_by_role("button", name="Enable")).to_be_visible()
    assert f"{ho}/gpt-4o" not in [entry["name"] for entry in api("GET", "/api/models").json()["models"]]
    hosted_item.get_by_role("button", name="Enable").click()
    expect(hosted_item.get_by_role("button", name="Disable")).to_be_visible()
    add_connection(page, "spare", local.base_url, models=["x"])
    connection_item(page, "spare").get_by_role("button", name="Delete").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(connection_item(page, "spare")).to_have_count(0)
    # A refused value is shown on the form, and nothing is added.
    form = page.get_by_role("form", name="New connection")
    form.get_by_label("Name", exact=True).fill("Not Valid")
    form.get_by_role("button", name="Add connection").click()
    expect(form.locator(".form-error")).to_contain_text("Name")
    expect(form.get_by_label("Name", exact=True)).to_have_attribute("aria-invalid", "true")
    form.get_by_label("Name", exact=True).fill("")
    assert [problem for problem in page.problems if "status of 400" not in problem] == []  # the refusal's only
    page.problems.clear()

    # The alias smart = [local, hosted] with fallback, then reordered to [hosted, local].
    aliases = page.get_by_role("form", name="New alias")
    aliases.get_by_label("Alias name").fill("smart")
    aliases.get_by_label("Strategy").select_option("fallback")
    aliases.get_by_label("Target 1 model").select_option(f"{lo}/llama3.2")
    aliases.get_by_role("button", name="Add target").click()
    aliases.get_by_label("Target 2 model").select_option(f"{ho}/gpt-4o")
    aliases.get_by_role("button", name="Add alias").click()
    smart = page.get_by_role("listitem", name="Alias smart")
    expect(smart.locator(".alias-targets li")).to_have_text([f"{lo}/llama3.2", f"{ho}/gpt-4o"])
    smart.get_by_role("button", name="Edit").click()
    edit = page.get_by_role("form", name="Edit alias smart")
    edit.get_by_role("button", name="Move target 2 up").click()
    expect(edit.get_by_label("Target 1 model")).to_have_value(f"{ho}/gpt-4o")
    edit.get_by_role("button", name="Save alias").click()
    expect(smart.locator(".alias-targets li")).to_have_text([f"{ho}/gpt-4o", f"{lo}/llama3.2"])
    [alias] = api("GET", "/api/aliases").json()
    assert (alias["name"], alias["strategy"], [target["model"] for target in alias["targets"]]) == (
        "smart", "fallback", [f"{ho}/gpt-4o", f"{lo}/llama3.2"])
    expect(page.locator("main .loading")).to_have_count(0)
    assert_fits(page, f"#/settings with connections at {width} px")
    shot(page, f"connections-{width}")

    # The config's Model field offers the catalogue's names (the alias among them) once the page loads again.
    page.reload()
    expect(page.locator("#settings-model-choices option[value='smart']")).to_have_count(1)
    expect(page.locator(f"#settings-model-choices option[value='{lo}/llama3.2']")).to_have_count(1)

    # A new chat picks smart in its header; the hosted upstream answers the first message.
    hosted.script(Text("Answer from the hosted model."))
    page.goto("/#/chat")
    picker = page.get_by_label("Model", exact=True)
    expect(picker.locator("option", has_text="smart")).to_have_count(1)
    picker.select_option("smart")
    page.get_by_label("Message").fill("Which model are you?")
    page.get_by_label("Message").press("Enter")  # (the settings' toasts may still cover Send on a phone)
    reply = page.locator(".message-assistant").last
    expect(reply).to_contain_text("Answer from the hosted model.")
    session_id = page.evaluate("() => location.hash.split('/')[2]")
    assert api("GET", f"/api/sessions/{session_id}").json()["model"] == "smart"
    # The turn's request, then (perhaps still on its way) the chat's title, asked of the model that answered.
    assert hosted.bodies()[0]["model"] == "gpt-4o" and {body["model"] for body in hosted.bodies()} == {"gpt-4o"}

    # The hosted upstream stops answering (its connection is refused): the next reply comes from local.
    api("PATCH", f"/api/connections/{stored['id']}", json={"base_url": f"http://127.0.0.1:{refusing_port()}/v1"}).raise_for_status()
    local.script(Text("Answer from the local model."))
    page.get_by_label("Message").fill("Still there?")
    page.get_by_label("Message").press("Enter")
    expect(page.locator(".message-assistant").last).to_contain_text("Answer from the local model.")
    assert [body["model"] for body in local.bodies()] == ["llama3.2"]

    # The picker saves a chat's model at once; back to the default.
    picker.select_option("")
    expect(page.locator(".toast", has_text="default model")).to_be_visible()
    assert api("GET", f"/api/sessions/{session_id}").json()["model"] == ""
    assert_fits(page, f"#/chat with the model picker at {width} px")
    shot(page, f"chat-model-picker-{width}")
    assert page.problems == []


def test_the_scheduler_form_and_the_llm_node_form_offer_the_catalogues_models(logged_in_page, api, upstreams):
    page = logged_in_page
    local, _hosted = upstreams
    for connection in api("GET", "/api/connections").json():
        if connection["name"] == "picks":
            api("DELETE", f"/api/connections/{connection['id']}")
    for alias in api("GET", "/api/aliases").json():
        if alias["name"] == "picked":
            api("DELETE", f"/api/aliases/{alias['id']}")
    api("POST", "/api/connections", json={"name": "picks", "provider": "openai", "base_url": local.base_url,
                                          "models": ["m1"]}).raise_for_status()
    api("POST", "/api/aliases", json={"name": "picked", "targets": [{"model": "picks/m1"}]}).raise_for_status()

    page.goto("/#/scheduler")
    form = page.get_by_role("form", name="New task")
    expect(form.get_by_label("Model").locator("option", has_text="picked")).to_have_count(1)
    form.get_by_label("Name", exact=True).fill("model-task")
    form.get_by_label("Prompt").fill("Which model?")
    form.get_by_label("Cron").fill("0 9 * * 1")
    form.get_by_label("Model").select_option("picked")
    form.get_by_role("button", name="Create task").click()
    expect(page.get_by_role("listitem", name="Task model-task")).to_contain_text("picked")
    [task] = [item for item in api("GET", "/api/scheduler/tasks").json()["results"] if item["name"] == "model-task"]
    assert task["model"] == "picked"
    api("DELETE", f"/api/scheduler/tasks/{task['id']}")

    nodes = [{"id": "in", "type": "input", "name": "in"},
             {"id": "ask", "type": "llm", "name": "ask", "config": {"prompt": "${in}", "model": "picked"}}]
    workflow = api("POST", "/api/workflows", json={"name": "model-pick", "nodes": nodes,
                                                    "edges": [{"from": "in", "to": "ask"}]})
    assert workflow.status_code == 201, workflow.text
    page.goto(f"/#/workflows/{workflow.json()['id']}")
    page.locator('.wf-node[data-node-name="ask"]').click()
    model = page.get_by_label("Model", exact=True)
    expect(model).to_have_value("picked")
    choices = f"datalist#{model.get_attribute('list')}"
    for name in ("picked", "picks/m1"):
        expect(page.locator(f"{choices} option[value='{name}']")).to_have_count(1)
    api("DELETE", f"/api/workflows/{workflow.json()['id']}")
    assert page.problems == []
