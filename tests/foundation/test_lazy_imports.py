"""A server process loads the MCP server side and PyAV only when a request needs them (~70 MiB of memory that
a process serving no MCP client and no audio never uses: bench/RESULTS.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.server import ROOT

PROBE = """
import json, sys
import django
django.setup()
import agentsite.asgi
from django.urls import get_resolver
get_resolver().url_patterns
print(json.dumps({name: name in sys.modules for name in ("mcp.server", "starlette", "av")}))
"""


def test_building_the_asgi_application_imports_neither_the_mcp_server_nor_pyav(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentsite.settings", "AGENTSITE_DATA_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"mcp.server": False, "starlette": False, "av": False}
