import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from agentsite.datadir import load_secrets
from agentsite.env import database_from_url, env_bool, env_int, env_list

ROOT = Path(__file__).resolve().parents[2]


def _settings_in_subprocess(tmp_path, **env) -> dict:
    """Import settings in a fresh interpreter with exactly these variables, and return a few values."""
    code = (
        "import json, django; from django.conf import settings; django.setup();"
        "print(json.dumps({'debug': settings.DEBUG, 'db': settings.DATABASES['default']['ENGINE'],"
        " 'db_name': settings.DATABASES['default']['NAME'], 'cache': settings.CACHES['default']['BACKEND'],"
        " 'layer': settings.CHANNEL_LAYERS['default']['BACKEND'], 'q': settings.Q_CLUSTER,"
        " 'hosts': settings.ALLOWED_HOSTS}))"
    )
    base = {key: value for key, value in os.environ.items()
            if key not in ("DATABASE_URL", "REDIS_URL", "DEBUG", "AGENTSITE_DATA_DIR")}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**base, "DJANGO_SETTINGS_MODULE": "agentsite.settings",
                                 "AGENTSITE_DATA_DIR": str(tmp_path), **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_defaults_are_sqlite_locmem_orm_broker_and_debug_off(tmp_path):
    values = _settings_in_subprocess(tmp_path)
    assert values["debug"] is False
    assert values["db"] == "django.db.backends.sqlite3"
    assert values["db_name"] == str(tmp_path / "db.sqlite3")
    assert values["cache"].endswith("LocMemCache")
    assert values["layer"].endswith("InMemoryChannelLayer")
    assert values["q"]["orm"] == "default" and "redis" not in values["q"]


def test_database_url_and_redis_url_switch_to_postgres_and_redis(tmp_path):
    values = _settings_in_subprocess(tmp_path, DATABASE_URL="postgres://postgres@127.0.0.1:5432/test",
                                     REDIS_URL="redis://127.0.0.1:6379/0", DEBUG="1")
    assert values["debug"] is True
    assert values["db"] == "django.db.backends.postgresql"
    assert values["cache"].endswith("RedisCache")
    assert values["layer"].endswith("RedisChannelLayer")
    assert values["q"]["redis"] == "redis://127.0.0.1:6379/0" and "orm" not in values["q"]


@pytest.mark.django_db
def test_sqlite_runs_in_wal_mode():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only: this run uses PostgreSQL")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"


def test_env_helpers_name_the_variable_on_bad_values(monkeypatch):
    monkeypatch.setenv("X_FLAG", "perhaps")
    with pytest.raises(ImproperlyConfigured, match="X_FLAG"):
        env_bool("X_FLAG")
    monkeypatch.setenv("X_NUM", "ten")
    with pytest.raises(ImproperlyConfigured, match="X_NUM"):
        env_int("X_NUM", 1)
    monkeypatch.setenv("X_LIST", "a, b,,c")
    assert env_list("X_LIST") == ["a", "b", "c"]
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        database_from_url("mysql://x/y")


def test_database_url_parsing():
    pg = database_from_url("postgresql://u:p%40ss@db.example:6543/agents?sslmode=require")
    assert (pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"], pg["NAME"]) == ("u", "p@ss", "db.example", "6543",
                                                                               "agents")
    assert pg["OPTIONS"]["sslmode"] == "require"
    assert database_from_url("sqlite:////var/lib/a.db")["NAME"] == "/var/lib/a.db"


def test_secrets_are_generated_once_with_mode_0600(tmp_path):
    first = load_secrets(tmp_path)
    path = tmp_path / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first["secret_key"]) >= 50 and len(first["jwt_signing_key"]) >= 64
    assert load_secrets(tmp_path) == first


def test_a_corrupt_secrets_file_names_the_file(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ImproperlyConfigured, match="config.json"):
        load_secrets(tmp_path)
