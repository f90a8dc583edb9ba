"""The repository tells a newcomer everything: its docs are in docs/, agree with the code, and nothing cites a file
the repository does not have.

- every variable the code reads is in .env.example, and docs/configuration.md lists the same variables with the
  same defaults;
- docs/api.md lists every operation /api/schema has (and no other), and the whole error-code catalogue;
- no file cites the contract or the notes under their old names outside the repository (API.md, NOTES.md,
  ../shared): the contract is docs/api.md and the notes docs/notes.md;
- the README stays a README (at most 12 KB) and links into docs/.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from agentsite.core.errors import ERROR_CODES

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
OLD_CITATIONS = re.compile(r"\bAPI\.md|\bNOTES\.md|\bDESIGN\.md|\bSTYLE\.md|\bANCHORS\.md|\.\./shared")
# How the code reads the environment: the helpers of agentsite/core/env.py and os.environ / os.getenv.
ENV_READ = re.compile(r"(?:env_[a-z_]+|environ\.get|getenv|environ\.setdefault|environ)"
                      r"""\s*[\(\[]\s*["']([A-Z][A-Z0-9_]+)["']""")
# Variables the code reads that are not settings of the server: set by serve for its children, by the
# platform (CI, the dashboard tests' display), or by libraries' own conventions.
NOT_SETTINGS = {"DJANGO_SETTINGS_MODULE", "AGENTSITE_SERVE_PID", "CI", "DISPLAY", "PATH", "HOME", "LANG",
                "OPENBLAS_NUM_THREADS", "PYTHONPATH", "AGENTSITE_Q_SYNC", "AUTOBAHN_USE_NVX"}


def tracked_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in names.splitlines()]


def env_example() -> dict[str, str]:
    pairs = {}
    for line in (ROOT / ".env.example").read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"([A-Z][A-Z0-9_]+)=(.*)", line.strip())
        if match:
            pairs[match[1]] = match[2]
    return pairs


def configuration_table() -> dict[str, str]:
    rows = {}
    for line in (DOCS / "configuration.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"\|\s*`([A-Z][A-Z0-9_]+)`\s*\|\s*`?([^|`]*)`?\s*\|", line)
        if match:
            rows[match[1]] = match[2].strip()
    return rows


@pytest.mark.e2e
def test_no_file_cites_docs_the_repository_does_not_have():
    this = Path(__file__).resolve()
    found = []
    for path in tracked_files():
        if path == this or not path.is_file() or path.suffix in (".png", ".svg", ".ico", ".wav"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OLD_CITATIONS.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not found, "cite docs/api.md or docs/notes.md instead:\n" + "\n".join(found)


@pytest.mark.e2e
def test_every_variable_the_code_reads_is_in_env_example():
    read: dict[str, str] = {}
    for path in tracked_files():
        if path.suffix == ".py" and path.parts[len(ROOT.parts)] not in ("tests", "bench", ".ci") and path.is_file():
            for name in ENV_READ.findall(path.read_text(encoding="utf-8")):
                read.setdefault(name, str(path.relative_to(ROOT)))
    missing = {name: where for name, where in read.items() if name not in env_example() and name not in NOT_SETTINGS}
    assert not missing, f"add these to .env.example and docs/configuration.md: {missing}"
    assert len(read) >= 40, sorted(read)  # the scan still finds the settings


def test_docs_configuration_lists_every_variable_of_env_example_with_its_default():
    example, documented = env_example(), configuration_table()
    assert set(example) == set(documented), (
        f"only in .env.example: {sorted(set(example) - set(documented))}; "
        f"only in docs/configuration.md: {sorted(set(documented) - set(example))}")
    different = {name: (example[name], documented[name]) for name in example if example[name] != documented[name]}
    assert not different, f"defaults differ (.env.example, docs/configuration.md): {different}"


def documented_operations() -> set[tuple[str, str]]:
    operations = set()
    for line in (DOCS / "api.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"\|\s*([A-Z/]+)\s*\|\s*`?(/[^\s|`]*)`?\s*\|", line)
        if match:
            path = re.sub(r":([a-z_]+)", r"{\1}", match[2])
            for method in match[1].split("/"):
                operations.add((method.lower(), path))
    return operations


# Documented doors that /api/schema leaves out, each with why: not JSON APIs of the dashboard or SDK clients.
OUTSIDE_THE_SCHEMA = {
    ("get", "/metrics"): "Prometheus text for a scraper, off unless AGENTSITE_METRICS=1",
    ("post", "/hooks/{id}"): "another system's webhook, authenticated by the trigger's secret, not a user's token",
    ("post", "/a2a/{id}"): "A2A's JSON-RPC endpoint, a mounted app (a2a-sdk's routes): the agent card describes it",
    ("get", "/a2a/{id}/.well-known/agent-card.json"): "the A2A agent card, served by the /a2a mount",
}


@pytest.mark.django_db
def test_docs_api_lists_exactly_the_operations_of_the_openapi_schema(admin_client):
    schema = admin_client.get("/api/schema?format=json").json()
    served = {(method, re.sub(r"\{[a-z_]+\}", "{id}", path)) for path, operations in schema["paths"].items()
              for method in operations if method in ("get", "post", "put", "patch", "delete")}
    documented = {(method, re.sub(r"\{[a-z_]+\}", "{id}", path)) for method, path in documented_operations()}
    assert served - documented == set(), f"add to the tables of docs/api.md: {sorted(served - documented)}"
    extra = documented - served - set(OUTSIDE_THE_SCHEMA)
    assert extra == set(), f"in docs/api.md but not in /api/schema: {sorted(extra)}"
    assert set(OUTSIDE_THE_SCHEMA) <= documented, "a door outside the schema must still be in docs/api.md's tables"


def test_docs_api_lists_the_whole_error_code_catalogue():
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    listed = dict(re.findall(r"^\|\s*`([a-z_]+)`\s*\|\s*([0-9, ]+)\s*\|", text, re.M))
    assert set(listed) == set(ERROR_CODES), (
        f"missing from docs/api.md: {sorted(set(ERROR_CODES) - set(listed))}; "
        f"not codes: {sorted(set(listed) - set(ERROR_CODES))}")
    for code, statuses in listed.items():
        assert tuple(int(s) for s in statuses.replace(" ", "").split(",")) == ERROR_CODES[code].statuses, code


def test_the_readme_is_a_readme_that_links_into_docs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= 12 * 1024, f"README.md is {len(readme.encode())} bytes; move detail into docs/"
    for page in ("api.md", "configuration.md", "deploying.md", "plugins.md", "dashboard.md", "architecture.md",
                 "notes.md"):
        assert (DOCS / page).is_file(), page
        assert f"docs/{page}" in readme, f"the README does not link docs/{page}"
