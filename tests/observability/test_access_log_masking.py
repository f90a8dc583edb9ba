"""The access log never holds an OAuth callback's authorization code or state (agentsite/server/accesslog.py)."""

from __future__ import annotations

import io
import json

import pytest
from daphne import access

from agentsite.server import accesslog
from agentsite.server.accesslog import masked_path


@pytest.mark.parametrize("path", ["/api/mcp/oauth/callback?code=asc-SECRET&state=st4te",
                                  "/api/auth/oidc/callback?state=st4te&code=SECRET",
                                  "/api/mcp/oauth/callback/?code=SECRET&state=st4te"])
def test_a_callbacks_query_values_are_masked_and_its_names_kept(path):
    masked = masked_path(path)
    assert "SECRET" not in masked and "st4te" not in masked
    assert masked.split("?", 1)[1].split("&") == [f"{part.split('=')[0]}=***" for part in path.split("?")[1].split("&")]


@pytest.mark.parametrize("path", ["/api/mcp/oauth/callback", "/oauth/authorize?client_id=c&state=s",
                                  "/api/sessions?q=callback", "/api/mcp/oauth/callbacks?code=x"])
def test_other_paths_are_logged_as_they_came(path):
    assert masked_path(path) == path


def _entry(json_log: bool, monkeypatch) -> str:
    # A fresh generator class each time: the installers patch the class once and mark it.
    generator = type("Generator", (access.AccessLogGenerator,), {})
    monkeypatch.setattr(access, "AccessLogGenerator", generator)
    if json_log:
        accesslog.install_json_access_log()
    accesslog.install_access_log_masking()
    stream = io.StringIO()
    access.AccessLogGenerator(stream)("http", "complete", {
        "path": "/api/mcp/oauth/callback?code=asc-SECRET&state=st4te", "status": 302, "method": "GET",
        "client": "127.0.0.1:5000", "time_taken": 0.01, "size": 0})
    return stream.getvalue()


@pytest.mark.parametrize("json_log", [False, True], ids=["text", "json"])
def test_daphnes_access_log_writes_the_masked_path(json_log, monkeypatch):
    line = _entry(json_log, monkeypatch)
    assert "/api/mcp/oauth/callback?code=***&state=***" in line, line
    assert "SECRET" not in line and "st4te" not in line
    if json_log:
        assert json.loads(line)["path"] == "/api/mcp/oauth/callback?code=***&state=***"
