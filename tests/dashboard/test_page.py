"""The dashboard page and its files, without a browser: the HTML at /, its headers, and the vendored
libraries matching what vendor/README.md says they are."""

from __future__ import annotations

import hashlib
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import agentsite.dashboard

DASHBOARD = Path(agentsite.dashboard.__file__).parent / "static" / "agentsite" / "dashboard"


def call(client, method: str, path: str):
    """The test client's answer, from a thread of its own: while the dashboard's Playwright browser is open,
    this thread has an event loop running, and Django refuses sync work in such a thread."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(getattr(client, method), path).result()


def test_the_dashboard_page_is_public_html_with_a_strict_policy(client):
    response = call(client, "get", "/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    policy = response["Content-Security-Policy"]
    assert "script-src 'self';" in policy and "default-src 'self';" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe" not in policy
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    html = response.content.decode()
    assert '<script type="module" src="/static/agentsite/dashboard/app.js"></script>' in html
    assert re.findall(r"<script[^>]*>([^<]*)</script>", html) == [""]  # no inline script at all


def test_the_dashboard_page_answers_get_only(client):
    assert call(client, "head", "/").status_code == 200
    assert call(client, "post", "/").status_code == 405
    assert call(client, "delete", "/").status_code == 405


def test_every_module_the_page_imports_exists():
    for module in DASHBOARD.rglob("*.js"):
        if "vendor" in module.parts:
            continue
        for target in re.findall(r'^import .* from "(\.[^"]+)";', module.read_text(), re.MULTILINE):
            assert (module.parent / target).resolve().is_file(), f"{module.name} imports {target}, which is missing"


def test_the_vendored_libraries_are_the_files_their_readme_names():
    vendor = DASHBOARD / "vendor"
    readme = (vendor / "README.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \|.*\| `([0-9a-f]{64})` \|$", readme, re.MULTILINE)
    files = {str(path.relative_to(vendor)) for path in vendor.rglob("*") if path.is_file()
             and path.name != "README.md" and not path.name.startswith("LICENSE")}
    assert {name for name, _ in rows} == files  # every file named, and every named file there
    assert {"marked.esm.js", "purify.es.js", "highlight.esm.js", "katex.min.js", "katex.min.css"} <= files
    for name, digest in rows:
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == digest, name
    for licence in ("LICENSE.marked", "LICENSE.dompurify", "LICENSE.highlightjs", "LICENSE.katex"):
        assert (vendor / licence).stat().st_size > 500
