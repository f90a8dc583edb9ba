"""Checks a server started by .ci/package_check from an installed wheel: python package_check.py BASE_URL DATA_DIR."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import requests

base, data_dir = sys.argv[1], Path(sys.argv[2])


def wait_for_health(deadline_s: float = 90.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{base}/api/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.25)
    sys.exit(f"no healthy server at {base} within {deadline_s:g} s")


def login() -> str:
    text = (data_dir / "initial_admin.txt").read_text()
    password = re.search(r"^password: (\S+)$", text, re.M).group(1)
    response = requests.post(f"{base}/api/auth/login", json={"username": "admin", "password": password}, timeout=30)
    assert response.status_code == 200, f"the initial admin of this data directory cannot log in: {response.text}"
    return response.json()["token"]


def check_dashboard() -> None:
    page = requests.get(f"{base}/", timeout=10)
    assert page.status_code == 200 and "agentsite" in page.text, page.status_code
    assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', page.text)
    assert assets, "the dashboard page loads no static file"
    scripts = [asset for asset in assets if asset.endswith(".js")]
    seen: set[str] = set()
    while assets:  # the page's files, and every module a script imports
        asset = assets.pop()
        if asset in seen:
            continue
        seen.add(asset)
        response = requests.get(f"{base}{asset}", timeout=10)
        assert response.status_code == 200, f"{asset}: {response.status_code} (not in the wheel?)"
        if asset.endswith(".js"):
            folder = asset.rsplit("/", 1)[0]
            for imported in re.findall(r'from\s+"(\./[^"]+|\.\./[^"]+)"', response.text):
                assets.append(_join(folder, imported))
        if asset.endswith("/app.js"):  # the pages, each a module and a stylesheet loaded when it is opened
            folder = asset.rsplit("/", 1)[0]
            for page in re.findall(r'^\s*\["([a-z]+)", "[^"]+"\],?$', response.text, re.M):
                assets += [f"{folder}/pages/{page}.js", f"{folder}/pages/{page}.css"]
    assert len(seen) > len(scripts), seen
    print(f"dashboard: the page and {len(seen)} static files it loads")


def _join(folder: str, relative: str) -> str:
    parts = folder.split("/")
    for part in relative.split("/"):
        if part == "..":
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


def check_workflow(token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    nodes = [{"id": "in", "name": "in", "type": "input", "config": {}},
             {"id": "add", "name": "add", "type": "code", "config": {"code": "return input.length * 2"}},
             {"id": "out", "name": "out", "type": "output", "config": {}}]
    edges = [{"from": "in", "to": "add"}, {"from": "add", "to": "out"}]
    created = requests.post(f"{base}/api/workflows", json={"name": "packaged", "nodes": nodes, "edges": edges},
                            headers=headers, timeout=30)
    assert created.status_code == 201, created.text
    run = requests.post(f"{base}/api/workflows/{created.json()['id']}/run", json={"input": "four"}, headers=headers,
                        timeout=60)
    assert run.status_code == 200 and run.json()["status"] == "success", run.text
    assert run.json()["outputs"]["add"] == 8, run.json()
    print("workflow: input -> code -> output ran in the sandbox, output 8")


wait_for_health()
token = login()
print(f"health: ok; logged in as the initial admin of {data_dir}")
check_dashboard()
check_workflow(token)
print("package check passed")
