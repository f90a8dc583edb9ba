"""A server process loads the MCP server side and PyAV only when a request needs them, and psycopg only on
PostgreSQL (~50 MiB of memory that a process serving no MCP client and no audio, on SQLite, never uses:
bench/RESULTS.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.server import ROOT

pytestmark = pytest.mark.e2e  # every test here starts a process

PROBE = """
import json, sys
import agentsite.asgi  # first, as daphne imports it (it sets Django up)
from django.urls import get_resolver
get_resolver().url_patterns
print(json.dumps({name: sys.modules.get(name) is not None for name in ("mcp.server", "starlette", "av", "psycopg")}))
"""


def test_building_the_asgi_application_imports_neither_the_mcp_server_nor_pyav_nor_on_sqlite_psycopg(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentsite.settings", "AGENTSITE_DATA_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    on_postgres = os.environ.get("DATABASE_URL", "").startswith(("postgres:", "postgresql:"))
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"mcp.server": False, "starlette": False, "av": False,
                                                               "psycopg": on_postgres}
