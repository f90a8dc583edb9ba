import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from agentsite.core.datadir import secrets_ensure
from agentsite.core.env import database_from_url, env_bool, env_int, env_list, env_redis_url

ROOT = Path(__file__).resolve().parents[2]


def _settings_in_subprocess(tmp_path, **env) -> dict:
    """Import settings in a fresh interpreter with exactly these variables, and return a few values."""
    code = (
        "import json, django; from django.conf import settings; django.setup();"
        "print(json.dumps({'debug': settings.DEBUG, 'db': settings.DATABASES['default']['ENGINE'],"
        " 'db_name': settings.DATABASES['default']['NAME'], 'cache': settings.CACHES['default']['BACKEND'],"
        " 'layer': settings.CHANNEL_LAYERS['default']['BACKEND'], 'q': settings.Q_CLUSTER,"
        " 'hosts': settings.ALLOWED_HOSTS, 'hashers': settings.PASSWORD_HASHERS,"
        " 'iterations': __import__('django.contrib.auth.hashers').contrib.auth.hashers.get_hasher().iterations}))"
    )
    base = {key: value for key, value in os.environ.items()
            if key not in ("DATABASE_URL", "REDIS_URL", "DEBUG", "AGENTSITE_DATA_DIR", "AGENTSITE_ALLOWED_HOSTS")}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**base, "DJANGO_SETTINGS_MODULE": "agentsite.settings",
                                 "AGENTSITE_DATA_DIR": str(tmp_path), **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_defaults_are_sqlite_a_shared_file_cache_orm_broker_and_debug_off(tmp_path):
    values = _settings_in_subprocess(tmp_path)
    assert values["debug"] is False
    # Django's PBKDF2 at its own count; the tests' processes and live servers hash at a test count instead
    assert values["hashers"] == ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    assert values["iterations"] >= 1_000_000
    assert values["db"] == "agentsite.core.db.sqlite3"  # Django's, creating the data directory on first connect
    assert values["db_name"] == str(tmp_path / "db.sqlite3")
    # Files every process of the host sees (serve's workers share the login rate limit), not one process's memory.
    assert values["cache"] == "agentsite.core.filecache.SharedFileCache"
    assert values["layer"].endswith("InMemoryChannelLayer")
    assert values["q"]["orm"] == "default" and "redis" not in values["q"]


@pytest.mark.e2e
def test_the_default_allowed_hosts_are_exactly_the_documented_loopback_names(tmp_path):
    # The Host (DNS-rebinding) defence: what README and .env.example promise, and nothing a test needs
    # (Django's test client's `testserver` belongs in tests/settings.py, not in what operators run).
    documented = ["localhost", "127.0.0.1", "[::1]"]
    assert _settings_in_subprocess(tmp_path)["hosts"] == documented
    env_example = (ROOT / ".env.example").read_text()
    assert f"AGENTSITE_ALLOWED_HOSTS={','.join(documented)}\n" in env_example
    assert f"| `AGENTSITE_ALLOWED_HOSTS` | `{','.join(documented)}` |" in (ROOT / "README.md").read_text()


@pytest.mark.e2e
def test_allowed_hosts_come_from_the_environment(tmp_path):
    values = _settings_in_subprocess(tmp_path, AGENTSITE_ALLOWED_HOSTS="agents.example.com,.internal")
    assert values["hosts"] == ["agents.example.com", ".internal"]


@pytest.mark.e2e
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
    assert pg["ENGINE"] == "django.db.backends.postgresql"
    assert pg["OPTIONS"] == {"connect_timeout": 5, "sslmode": "require"}
    assert (pg["CONN_MAX_AGE"], pg["CONN_HEALTH_CHECKS"]) == (None, True)  # kept by reused request threads
    assert database_from_url("postgres://u@h/db?connect_timeout=10")["OPTIONS"]["connect_timeout"] == 10
    assert database_from_url("postgres://u@h")["NAME"] == "postgres"
    # dj-database-url's own conventions come along, e.g. currentSchema
    schema = database_from_url("postgres://u@h/db?currentSchema=app")["OPTIONS"]
    assert schema == {"connect_timeout": 5, "options": "-c search_path=app"}
    sqlite = database_from_url("sqlite:////var/lib/a.db")
    assert sqlite["NAME"] == "/var/lib/a.db"
    assert sqlite["ENGINE"] == "agentsite.core.db.sqlite3" and "journal_mode=WAL" in sqlite["OPTIONS"]["init_command"]
    assert database_from_url("sqlite:///relative.db")["NAME"] == "relative.db"


@pytest.mark.parametrize("url", ["postgres://u@h:notaport/db", "postgres://u@h:99999/db", "mysql://u@h/db",
                                 "sqlite://", "db.example:5432"])
def test_a_malformed_database_url_names_the_variable(url):
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        database_from_url(url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379/0", "127.0.0.1:6379", "redis://", "redis://:6379/0",
                                 "redis://127.0.0.1:notaport/0", "redis://127.0.0.1:70000/0",
                                 "redis://127.0.0.1:6379/zero", "unix://"])
def test_a_malformed_redis_url_names_the_variable(monkeypatch, url):
    monkeypatch.setenv("REDIS_URL", url)
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL"):
        env_redis_url("REDIS_URL")


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/1", "redis://:pw@cache.example", "rediss://u:p@h:6380/2",
                                 "unix:///run/redis.sock?db=3", "redis://[::1]:6379"])
def test_well_formed_redis_urls_are_accepted(monkeypatch, url):
    monkeypatch.setenv("REDIS_URL", url)
    assert env_redis_url("REDIS_URL") == url


@pytest.mark.e2e
def test_a_malformed_redis_url_stops_manage_py_before_anything_starts(tmp_path):
    base = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "AGENTSITE_DATA_DIR")}
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, env={**base, "DJANGO_SETTINGS_MODULE": "agentsite.settings",
                                             "AGENTSITE_DATA_DIR": str(tmp_path), "REDIS_URL": "redis//127.0.0.1"})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and "REDIS_URL" in result.stderr


def test_secrets_are_generated_once_with_mode_0600(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTSITE_SECRET_KEY", raising=False)
    monkeypatch.delenv("AGENTSITE_JWT_SIGNING_KEY", raising=False)
    first = secrets_ensure(tmp_path)
    path = tmp_path / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first["secret_key"]) >= 50 and len(first["jwt_signing_key"]) >= 64
    assert secrets_ensure(tmp_path) == first
    assert json.loads(path.read_text()) == first
