"""A database made by the previous release (its migrations, its `accounts` models) upgrades into the catalogue
app: every connection, alias and the config are read back through catalogue.models, the catalogue resolves, new
rows can be made, and what referenced the old models (permissions given to a group and a user, the admin's
history) points at the same rows under `catalogue`.

Each half runs in its own process on a database made for the test: a fresh SQLite file, or on the PostgreSQL
pass (DATABASE_URL naming PostgreSQL) a fresh PostgreSQL database beside the test database.
"""

from __future__ import annotations

import pytest

from tests import releases
from tests.server import ROOT

pytestmark = pytest.mark.e2e  # every test here starts processes


def _run(step: str, env: dict[str, str]) -> dict:
    return releases.run_step("tests.catalogue.upgrade_steps", step, env)


@pytest.fixture
def fresh_database(tmp_path):
    """The environment of a process on a new, empty database of the backend this run uses."""
    with releases.fresh_database(tmp_path) as env:
        env["PYTHONPATH"] = str(ROOT)
        yield env


def test_the_previous_releases_catalogue_is_read_through_the_catalogue_app(fresh_database):
    before = _run("old", fresh_database)
    after = _run("new", fresh_database)
    gateway, discovering = before["connections"]
    assert after["connections"] == [
        [gateway, "gw", "openai", "http://user:pw@127.0.0.1:9/v1", "sk-old", {"X-Team": "red"}, 33.0, ["m1", "m2"],
         [], True, True],
        [discovering, "disc", "anthropic", "", "", {}, 120.0, "discover", ["c1"], False, False]]
    assert after["alias"] == ["fast", "balance", [429]]
    assert after["config"] == ["gw", "fast", 0.25, ["web_search"], "key", False]
    assert after["route"] == ["gw/m1"]  # disc is disabled: its entry is not a live target
    # The content types changed app in place (same ids), and no second set of permissions was made.
    assert after["types"] == {model: ["catalogue", before["types"][model], 4] for model in before["types"]}
    assert after["perms"] == [True, True, False]
    assert after["history"] == "gw (openai)"
    assert after["after"] == [True, ["gw/m1", "disc/c1", "after/x"]]
