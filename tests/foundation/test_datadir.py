"""The data directory and the secrets: nothing is written until something needs it, then once, privately."""

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import jwt
import pytest
from django.core.exceptions import ImproperlyConfigured

from agentsite.core.datadir import secrets_ensure, secrets_read

ROOT = Path(__file__).resolve().parents[2]

# A token made the way simplejwt makes every token (its lazily built backend), and Django's own signing.
_MAKE_TOKEN = (
    "import django, json; django.setup(); from django.conf import settings; from django.core import signing;"
    "from rest_framework_simplejwt.state import token_backend;"
    "print(json.dumps({'token': token_backend.encode({'user_id': 1}), 'signed': signing.dumps('x'),"
    " 'secret_key': str(settings.SECRET_KEY)}))"
)
_CHECK_TOKEN = (
    "import django, json, sys; django.setup(); from django.core import signing;"
    "from rest_framework_simplejwt.state import token_backend; given = json.loads(sys.argv[1]);"
    "print(json.dumps({'user_id': token_backend.decode(given['token'])['user_id'],"
    " 'signed': signing.loads(given['signed'])}))"
)


def _python(data_dir: Path, code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {key: value for key, value in os.environ.items()
            if not key.startswith(("AGENTSITE_", "PYTEST", "DATABASE_URL", "REDIS_URL"))}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**base, "DJANGO_SETTINGS_MODULE": "agentsite.settings",
                               "AGENTSITE_DATA_DIR": str(data_dir), **env})


def _last_json(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_importing_the_settings_or_running_manage_py_help_writes_nothing(tmp_path):
    data_dir = tmp_path / "data"
    imported = _python(data_dir, "import agentsite.settings")
    assert imported.returncode == 0, imported.stderr
    assert not data_dir.exists(), "importing agentsite.settings created the data directory"
    helped = subprocess.run([sys.executable, "manage.py", "help"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, env={**os.environ, "DJANGO_SETTINGS_MODULE": "agentsite.settings",
                                             "AGENTSITE_DATA_DIR": str(data_dir)})
    assert helped.returncode == 0, helped.stderr
    assert "serve" in helped.stdout
    assert not data_dir.exists(), "manage.py help created the data directory"


@pytest.mark.e2e
def test_the_first_token_creates_the_secrets_privately_and_a_restart_accepts_it(tmp_path):
    data_dir = tmp_path / "data"
    made = _last_json(_python(data_dir, _MAKE_TOKEN))
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    config = data_dir / "config.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    stored = json.loads(config.read_text())
    assert stored["secret_key"] == made["secret_key"]
    assert jwt.decode(made["token"], stored["jwt_signing_key"], algorithms=["HS256"])["user_id"] == 1
    checked = _last_json(_python(data_dir, _CHECK_TOKEN, json.dumps(made)))
    assert checked == {"user_id": 1, "signed": "x"}
    assert json.loads(config.read_text()) == stored, "a restart must not regenerate the secrets"


@pytest.mark.e2e
def test_secrets_from_the_environment_are_used_and_nothing_is_written(tmp_path):
    data_dir = tmp_path / "data"
    keys = {"AGENTSITE_SECRET_KEY": "s" * 20 + "-django-secret-from-env-0123456789",
            "AGENTSITE_JWT_SIGNING_KEY": "j" * 20 + "-jwt-signing-key-from-env-0123456789"}
    made = _last_json(_python(data_dir, _MAKE_TOKEN, **keys))
    assert made["secret_key"] == keys["AGENTSITE_SECRET_KEY"]
    payload = jwt.decode(made["token"], keys["AGENTSITE_JWT_SIGNING_KEY"], algorithms=["HS256"])
    assert payload["user_id"] == 1
    assert not data_dir.exists(), "secrets given in the environment must not be written to config.json"


@pytest.mark.e2e
@pytest.mark.parametrize("variable", ["AGENTSITE_SECRET_KEY", "AGENTSITE_JWT_SIGNING_KEY"])
def test_a_short_secret_in_the_environment_names_the_variable(tmp_path, variable):
    result = _python(tmp_path, "import agentsite.settings", **{variable: "short"})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and variable in result.stderr


@pytest.mark.e2e
def test_sqlite_creates_its_directory_privately_on_first_connect(tmp_path):
    data_dir = tmp_path / "nested" / "data"
    code = "import django; django.setup(); from django.db import connection; connection.ensure_connection()"
    result = _python(data_dir, code)
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((data_dir / "db.sqlite3").stat().st_mode) & 0o077 == 0


def test_processes_starting_together_agree_on_one_set_of_secrets(tmp_path):
    barrier = threading.Barrier(8)
    results: list[dict[str, str]] = []

    def start() -> None:
        barrier.wait()
        results.append(secrets_ensure(tmp_path))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(results) == 8
    assert all(result == results[0] for result in results)
    assert json.loads((tmp_path / "config.json").read_text()) == results[0]


def test_reading_the_secrets_writes_nothing_and_prefers_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTSITE_SECRET_KEY", raising=False)
    monkeypatch.delenv("AGENTSITE_JWT_SIGNING_KEY", raising=False)
    assert secrets_read(tmp_path / "none") == {}
    assert not (tmp_path / "none").exists()
    stored = secrets_ensure(tmp_path)
    monkeypatch.setenv("AGENTSITE_JWT_SIGNING_KEY", "k" * 40)
    assert secrets_read(tmp_path) == {"secret_key": stored["secret_key"], "jwt_signing_key": "k" * 40}


@pytest.mark.e2e
def test_a_corrupt_secrets_file_stops_the_settings_import_naming_the_file(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ImproperlyConfigured, match="config.json"):
        secrets_read(tmp_path)
    result = _python(tmp_path, "import agentsite.settings")
    assert result.returncode != 0 and "config.json" in result.stderr
