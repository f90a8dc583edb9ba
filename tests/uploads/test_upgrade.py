"""A database of the release before the uploads app existed (uploads were the voice app's) upgrades with `migrate`:
every upload it held is read, bytes and all, through the uploads app, and a permission granted on uploads holds.

The previous release is checked out with `git worktree add` into a temporary folder and run in a subprocess on a
data directory (and, on the PostgreSQL pass, a database) of this test's own; this tree then migrates the same
database and reads it. The run's backend decides which: SQLite without DATABASE_URL, else PostgreSQL.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dj_database_url
import psycopg
import pytest

from tests.releases import checked_out
from tests.uploads.conftest import image_bytes, minimal_pdf

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
# The last commit where Upload and UploadQuota were models of the voice app.
PREVIOUS_RELEASE = "9efc1a80323470ab2129f64c4773841d94f5984d"
FILES = {"photo.png": image_bytes(), "notes.md": b"# Notes\n\nThe upgrade keeps me.\n",
         "paper.pdf": minimal_pdf("Kept across the upgrade")}

STORE = """
import base64, json
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from voice.services import upload_create
owner = get_user_model().objects.create_user("upgrader", password="not-used-here")
owner.user_permissions.add(Permission.objects.get(content_type__app_label="voice", codename="view_upload"))
files = json.loads({files!r})
made = [upload_create(owner_id=owner.pk, filename=name, data=base64.b64decode(data)) for name, data in files.items()]
print(json.dumps(sorted([str(upload.pk), upload.filename, upload.sha256, upload.is_image] for upload in made)))
"""

READ = """
import hashlib, json
from django.contrib.auth import get_user_model
from uploads.models import UploadQuota
from uploads.selectors import upload_list_for, upload_read
owner = get_user_model().objects.get(username="upgrader")
read = sorted([str(upload.pk), upload.filename, hashlib.sha256(upload_read(upload=upload)).hexdigest(),
               upload.is_image] for upload in upload_list_for(owner_id=owner.pk))
print(json.dumps([read, UploadQuota.objects.filter(owner=owner).count(), owner.has_perm("uploads.view_upload")]))
"""


def _manage(cwd: Path, env: dict[str, str], *args: str) -> str:
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"manage.py {' '.join(args)} in {cwd} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture
def previous_release(tmp_path: Path) -> Iterator[Path]:
    with checked_out(PREVIOUS_RELEASE, tmp_path / "previous") as tree:
        yield tree


@pytest.fixture
def database_url() -> Iterator[str | None]:
    """None on the SQLite pass (the data directory's file); on the PostgreSQL pass, a new empty database."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        yield None
        return
    config = dj_database_url.parse(url)
    name = f"agentsite_upgrade_{os.getpid()}"
    server = psycopg.connect(host=config["HOST"], port=config["PORT"] or 5432, user=config["USER"],
                             password=config["PASSWORD"], dbname="postgres", autocommit=True)
    with server:
        server.execute(f"DROP DATABASE IF EXISTS {name}")
        server.execute(f"CREATE DATABASE {name}")
        try:
            yield url.rsplit("/", 1)[0] + "/" + name
        finally:
            server.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _env(data_dir: Path, database_url: str | None, *, previous: bool) -> dict[str, str]:
    dropped = ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE") + (("PYTHONPATH",) if previous else ())
    env = {name: value for name, value in os.environ.items() if name not in dropped}
    env["AGENTSITE_DATA_DIR"] = str(data_dir)
    if database_url:
        env["DATABASE_URL"] = database_url
    return env


def test_every_upload_of_the_previous_release_is_read_through_the_uploads_app(previous_release: Path,
                                                                              database_url: str | None,
                                                                              tmp_path: Path):
    data_dir = tmp_path / "data"
    before = _env(data_dir, database_url, previous=True)
    _manage(previous_release, before, "migrate", "--no-input")
    files = json.dumps({name: base64.b64encode(data).decode() for name, data in FILES.items()})
    stored = json.loads(_manage(previous_release, before, "shell", "-c", STORE.format(files=files)).splitlines()[-1])
    assert sorted(name for _, name, _, _ in stored) == sorted(FILES)
    assert {name: sha for _, name, sha, _ in stored} == {name: hashlib.sha256(data).hexdigest()
                                                          for name, data in FILES.items()}

    after = _env(data_dir, database_url, previous=False)
    _manage(ROOT, after, "migrate", "--no-input")
    plan = _manage(ROOT, after, "showmigrations", "--plan")
    assert not [line for line in plan.splitlines() if line.lstrip().startswith("[ ]")], plan
    assert "[X]  uploads.0001_initial" in plan and "[X]  voice.0002_uploads_moved" in plan, plan
    read, quotas, permitted = json.loads(_manage(ROOT, after, "shell", "-c", READ).splitlines()[-1])
    assert read == stored, "an upload of the previous release is not read, or not the same, through the new app"
    assert quotas == 1, "the owner's quota row is not the uploads app's"
    assert permitted, "the permission granted on voice's uploads did not follow them to the uploads app"
