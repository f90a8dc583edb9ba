"""A database of the release before agents upgrades (issue 45, item 3): its stored config becomes the agent
`default` (instructions = the system prompt, its model, temperature, max tokens and tools), version 1, owned by
the deployment and visible to everyone; the runtime's `agent` is that agent; and `GET /api/config` reads exactly
as it did before the upgrade. A database that never saved a config gets the first-run values on both sides.

Each half runs in its own process on a database made for the test (tests/releases.py fresh_database): a fresh
SQLite file, or on the PostgreSQL pass a fresh PostgreSQL database beside the test database."""

from __future__ import annotations

import pytest

from tests import releases
from tests.server import ROOT

pytestmark = pytest.mark.e2e  # every test here starts processes

VERSIONED = ("name", "description", "instructions", "model", "tools", "knowledge", "temperature", "max_tokens",
             "starters")


def _run(step: str, env: dict[str, str]) -> dict:
    return releases.run_step("tests.agents_app.upgrade_steps", step, env)


@pytest.fixture
def fresh_database(tmp_path):
    with releases.fresh_database(tmp_path) as env:
        env["PYTHONPATH"] = str(ROOT)
        yield env


def test_a_stored_config_becomes_the_default_agent_and_the_config_reads_the_same(fresh_database):
    before = _run("old-filled", fresh_database)
    assert before["agents_migrated"] is False
    after = _run("new", fresh_database)
    assert after["agent"] == {
        "name": "Default", "instructions": "Answer in French.\n  Briefly.", "model": "fast", "temperature": 0.25,
        "max_tokens": 321, "tools": ["web_search", "kb_search"], "knowledge": [], "starters": [],
        "visibility": "everyone", "owner_id": None, "version": 1}
    [(number, note, author, data)] = after["versions"]
    assert (number, author) == (1, None) and note.startswith("create")
    assert {name: data[name] for name in VERSIONED if name != "description"} == {
        name: after["agent"][name] for name in VERSIONED if name != "description"}
    assert after["resolved"] == ["Answer in French.\n  Briefly.", "fast", 0.25, 321, ["web_search", "kb_search"],
                                 "default", True]
    assert after["config"] == before["config"]
    assert (after["config"]["system_prompt"], after["config"]["kb_top_k"]) == ("Answer in French.\n  Briefly.", 3)


def test_a_database_without_a_config_gets_the_first_run_values_on_both_sides(fresh_database):
    assert _run("old-empty", fresh_database)["config"] is None
    after = _run("new", fresh_database)
    config = after["config"]
    agent = after["agent"]
    assert (agent["instructions"], agent["model"], agent["temperature"], agent["max_tokens"], agent["tools"],
            agent["version"]) == (config["system_prompt"], config["model"], config["temperature"],
                                  config["max_tokens"], config["tools"], 1)
    assert len(after["versions"]) == 1  # the config made at first read mirrors the agent: no second version
