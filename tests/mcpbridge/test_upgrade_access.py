"""MCP servers stored by the previous release keep their meaning under the organisation's access rule: its code
(a git checkout of the release, tests/releases.py) stores a server under each older rule and says what each
user sees; this tree's migrations upgrade the same database, and every user sees exactly that still. `admins`
became `private` (owner null), `everyone` stayed, `users` became `shared` with one `viewer` grant per user.

Each half runs in its own process (tests/mcpbridge/upgrade_access_steps.py) on a database made for the test: a
fresh SQLite file, or on the PostgreSQL pass (DATABASE_URL naming PostgreSQL) a fresh PostgreSQL database.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import releases
from tests.releases import checked_out
from tests.server import ROOT

pytestmark = pytest.mark.e2e  # every test here starts processes

# The previous release (main before the catalogue and organisation apps: tests/catalogue/upgrade_steps.py).
PREVIOUS_RELEASE = "9efc1a8"
STEPS = Path(__file__).with_name("upgrade_access_steps.py")


def _run(step: str, env: dict[str, str], tree: Path) -> dict:
    done = subprocess.run([sys.executable, str(STEPS), step], cwd=tree, env={**env, "PYTHONPATH": str(tree)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{step}:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def fresh_database(tmp_path):
    """The environment of a process on a new, empty database of the backend this run uses."""
    with releases.fresh_database(tmp_path / "data") as env:
        yield env


def test_every_user_sees_the_same_mcp_servers_after_the_upgrade_to_the_organisations_rule(fresh_database, tmp_path):
    with checked_out(PREVIOUS_RELEASE, tmp_path / "release") as release:
        before = _run("old", fresh_database, release)
    after = _run("new", fresh_database, ROOT)

    # The first half ran the release's own code, not this tree's.
    assert Path(before["code"]).is_relative_to(tmp_path / "release")
    assert before["seen"] == {"alice": ["named", "open"], "bob": ["named", "open"], "boss": ["closed", "named", "open"],
                              "carol": ["open"]}
    assert after["rules"] == {
        "closed": ["private", None, []],
        "open": ["everyone", None, []],
        "named": ["shared", None, [["alice", None, "viewer"], ["bob", None, "viewer"]]],
    }
    assert after["seen"] == after["usable"] == before["seen"]
