"""MCP servers stored by the previous release keep their meaning under the organisation's access rule: its code
(a git checkout of the release, tests/releases.py) stores a server under each older rule and says what each
user sees; this tree's migrations upgrade the same database, and every user sees exactly that still. `admins`
became `private` (owner null), `everyone` stayed, `users` became `shared` with one `viewer` grant per user.

Each half runs in its own process (tests/mcpbridge/upgrade_access_steps.py) on a database made for the test: a
fresh SQLite file, or on the PostgreSQL pass (DATABASE_URL naming PostgreSQL) a fresh PostgreSQL database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

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
    env = {name: value for name, value in os.environ.items()
           if name not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    env.update(AGENTSITE_DATA_DIR=str(tmp_path / "data"))
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres:", "postgresql:")):
        yield env
        return
    import psycopg  # only on the PostgreSQL pass: SQLite runs need no driver

    name = f"upgrade_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    env["DATABASE_URL"] = urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
    try:
        yield env
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
