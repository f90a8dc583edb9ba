"""An existing data directory upgrades with `migrate`: a SQLite database made by the previous release (the last
commit before agentsite/ was split into core/server/dashboard packages) is migrated by this tree, nothing is left
unapplied, and the rows it held are still read by this tree's models.

The previous release is checked out with `git worktree add` into a temporary folder and run in a subprocess with
its own AGENTSITE_DATA_DIR; this tree then runs `manage.py migrate` and `showmigrations` on that same directory.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.releases import checked_out

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
# The last commit with the old layout (agentsite/errors.py, agentsite/db/, agentsite/dashboard.py ...).
PREVIOUS_RELEASE = "e0195a1ebcca2e6ea96a8b4f4971519a391f8735"
ROW = "upgrade-test:1:1"


def _manage(cwd: Path, data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items()
           if name not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    env["AGENTSITE_DATA_DIR"] = str(data_dir)
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"manage.py {' '.join(args)} in {cwd} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture
def previous_release(tmp_path: Path):
    with checked_out(PREVIOUS_RELEASE, tmp_path / "previous") as tree:
        yield tree


def test_a_data_directory_of_the_previous_release_upgrades_with_migrate(previous_release: Path, tmp_path: Path):
    data_dir = tmp_path / "data"
    _manage(previous_release, data_dir, "migrate", "--no-input")
    _manage(previous_release, data_dir, "shell", "-c",
            "from django.utils import timezone; from agentsite.models import ServiceProcess; "
            f"now = timezone.now(); ServiceProcess.objects.create(id={ROW!r}, host='h', pid=1, started_at=now, "
            "seen_at=now)")
    databases = list(data_dir.glob("*.sqlite3"))
    assert len(databases) == 1, f"the previous release made no single SQLite database in {data_dir}: {databases}"
    with sqlite3.connect(databases[0]) as db:
        applied_before = set(db.execute("SELECT app, name FROM django_migrations").fetchall())
    assert ("agentsite", "0001_initial") in applied_before

    _manage(ROOT, data_dir, "migrate", "--no-input")
    plan = _manage(ROOT, data_dir, "showmigrations", "--plan").stdout
    unapplied = [line for line in plan.splitlines() if line.lstrip().startswith("[ ]")]
    assert not unapplied, f"migrations left unapplied after the upgrade: {unapplied}"
    with sqlite3.connect(databases[0]) as db:
        applied_after = set(db.execute("SELECT app, name FROM django_migrations").fetchall())
    assert applied_before <= applied_after, f"history lost: {sorted(applied_before - applied_after)}"
    kept = _manage(ROOT, data_dir, "shell", "-c",
                   "from agentsite.models import ServiceProcess; "
                   f"print(list(ServiceProcess.objects.filter(id={ROW!r}).values_list('id', flat=True)))").stdout
    assert kept.strip().splitlines()[-1:] == [repr([ROW])], \
        f"the previous release's row is not read by this tree's models: {kept!r}"


def test_a_configured_previous_release_upgrades_into_the_connection_default(previous_release: Path, tmp_path: Path):
    """Issue 26: the config's provider, base URL, key and model become the connection `default`; nothing the
    operator set is lost, and the agent's settings still name the same upstream and model."""
    data_dir = tmp_path / "data"
    _manage(previous_release, data_dir, "migrate", "--no-input")
    _manage(previous_release, data_dir, "shell", "-c",
            "from accounts.models import AgentConfig; AgentConfig.objects.update_or_create(pk=1, defaults=dict("
            "provider='anthropic', base_url='http://127.0.0.1:8080', api_key='sk-upgrade-secret', "
            "model='claude-upgrade', temperature=0.3, system_prompt='Be brief.'))")

    _manage(ROOT, data_dir, "migrate", "--no-input")
    shown = _manage(ROOT, data_dir, "shell", "-c",
                    "import json; from catalogue.models import AgentConfig, Connection; "
                    "from agentsite.agent.config import get_settings; from agentsite.agent.routing import resolve; "
                    "c = AgentConfig.objects.get(pk=1); n = c.connection; s = get_settings(); "
                    "t = resolve('').targets[0]; print(json.dumps([Connection.objects.count(), n.name, n.provider, "
                    "n.base_url, n.api_key, n.models, c.model, c.temperature, c.system_prompt, s.provider, "
                    "s.api_key, t.entry, t.connection.base_url]))"
                    ).stdout
    assert json.loads(shown.strip().splitlines()[-1]) == [
        1, "default", "anthropic", "http://127.0.0.1:8080", "sk-upgrade-secret", ["claude-upgrade"],
        "claude-upgrade", 0.3, "Be brief.", "anthropic", "sk-upgrade-secret", "default/claude-upgrade",
        "http://127.0.0.1:8080"]
