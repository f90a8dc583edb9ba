"""Each list is written once: node types (workflows/nodes.py), providers (agentsite/agent/providers/), tool
sources (the runtime's tool registry) and config fields (agentsite/agent/configfields.py), and GET /api/meta
answers them as the registries hold them.

A list written a second time fails here: in the dashboard's JavaScript, a few of one registry's names quoted
(or used as object keys) close together; in Python, a `choices` naming them, or a literal list, tuple, set or
dict of them outside the registry's own module. The checks are shown to catch a planted copy of each.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsite.agent.configfields import CONFIG_FIELDS
from agentsite.agent.providers import PROVIDERS
from agentsite.agent.tools import registry
from catalogue.services import CONFIG_FIELDS as ACCEPTED
from tests.foundation.test_architecture import APPS, ROOT
from workflows.nodes import NODE_TYPES

DASHBOARD = ROOT / "agentsite" / "dashboard" / "static" / "agentsite" / "dashboard"
# Each registry: its names, how many of them together make a copy (in a literal; in a `choices`), and the modules
# that define it. Config field names are everyday words ("model"): no `choices` lists them, so only literals count.
REGISTRIES = {
    "node types": (lambda: set(NODE_TYPES), (3, 2), {"workflows/nodes.py"}),
    "providers": (lambda: set(PROVIDERS), (2, 1), {"agentsite/agent/providers/__init__.py"}),
    "config fields": (lambda: {spec.name for spec in CONFIG_FIELDS}, (4, 4), {"agentsite/agent/configfields.py"}),
}
WINDOW = 4  # lines: names this close together in JavaScript are one list


def js_sources() -> Iterator[Path]:
    yield from (path for path in sorted(DASHBOARD.rglob("*.js")) if "vendor" not in path.parts)


def python_sources() -> Iterator[Path]:
    for part in (*APPS, "agentsite"):
        yield from (path for path in sorted((ROOT / part).rglob("*.py")) if "migrations" not in path.parts)


def js_copies(path: Path, names: set[str], thresholds: tuple[int, int]) -> list[str]:
    """Lines from which `thresholds[0]` distinct names are quoted (or are object keys) within WINDOW lines."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", path.read_text(encoding="utf-8"), flags=re.S)
    alternatives = "|".join(map(re.escape, sorted(names)))
    pattern = re.compile(rf"""["'`]({alternatives})["'`]|\b({alternatives})\s*:""")
    found = [(text.count("\n", 0, match.start()) + 1, match.group(1) or match.group(2))
             for match in pattern.finditer(text)]
    copies = {}
    for line, _ in found:
        near = {name for at, name in found if line <= at < line + WINDOW}
        if len(near) >= thresholds[0]:
            copies.setdefault(line, f"{path.name}:{line}: {sorted(near)}")
    return list(copies.values())


def _strings(node: ast.AST) -> Iterator[str]:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            yield inner.value


def python_copies(path: Path, names: set[str], thresholds: tuple[int, int]) -> list[str]:
    """A literal collection holding `thresholds[0]` of the names, or a `choices=` holding `thresholds[1]`."""
    threshold, in_choices = thresholds
    tree = ast.parse(path.read_text(encoding="utf-8"))
    copies = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "choices":
            named = set(_strings(node.value)) & names
            if len(named) >= in_choices:
                copies.append(f"{path.name}:{node.value.lineno}: choices={sorted(named)}")
        elif isinstance(node, ast.List | ast.Tuple | ast.Set | ast.Dict):
            elements = node.keys if isinstance(node, ast.Dict) else node.elts
            named = {item.value for element in elements if element is not None
                     for item in ([element] if isinstance(element, ast.Constant) else getattr(element, "elts", []))
                     if isinstance(item, ast.Constant) and item.value in names}
            if len(named) >= threshold:
                copies.append(f"{path.name}:{node.lineno}: {sorted(named)}")
    return copies


def copies_of(registry_name: str, files: Iterator[Path], check) -> list[str]:
    names, thresholds, homes = REGISTRIES[registry_name]
    found = []
    for path in files:
        where = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        if where not in homes:
            found += check(path, names(), thresholds)
    return found


@pytest.mark.parametrize("registry_name", sorted(REGISTRIES))
def test_the_dashboard_holds_no_copy_of_a_list(registry_name):
    assert not copies_of(registry_name, js_sources(), js_copies), "read it from GET /api/meta instead"


@pytest.mark.parametrize("registry_name", sorted(REGISTRIES))
def test_python_holds_no_second_copy_of_a_list(registry_name):
    assert not copies_of(registry_name, python_sources(), python_copies), "derive it from the registry instead"


def test_the_checks_catch_a_planted_copy_of_each_list(tmp_path):
    planted_js = tmp_path / "planted.js"
    planted_js.write_text('const TYPES = ["input", "llm", "tool"];\nconst LABELS = { openai: "OpenAI", '
                          'anthropic: "Anthropic" };\nconst FORM = [{ name: "model" }, { name: "tools" }, '
                          '{ name: "kb_top_k" }, { name: "temperature" }];\n', encoding="utf-8")
    planted_py = tmp_path / "planted.py"
    planted_py.write_text('from django.db import models\n\nclass Node(models.Model):\n'
                          '    type = models.CharField(choices=[("code", "Code"), ("llm", "LLM")])\n\n'
                          'PROVIDERS = [("openai", "OpenAI"), ("offline", "Offline")]\n'
                          'FIELDS = ("model", "tools", "kb_enabled", "temperature")\n', encoding="utf-8")
    for registry_name in REGISTRIES:
        assert copies_of(registry_name, iter([planted_js]), js_copies), registry_name
        assert copies_of(registry_name, iter([planted_py]), python_copies), registry_name


# --- GET /api/meta -------------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_meta_answers_each_registry_as_it_is(owner_client, client):
    assert client.get("/api/meta").status_code == 401
    response = owner_client.get("/api/meta")
    assert response.status_code == 200
    meta = response.json()
    assert [kind["name"] for kind in meta["node_types"]] == list(NODE_TYPES)
    assert [provider["name"] for provider in meta["providers"]] == list(PROVIDERS)
    assert [source["name"] for source in meta["tool_sources"]] == registry.sources()
    assert [spec["name"] for spec in meta["config_fields"]] == [spec.name for spec in CONFIG_FIELDS]
    llm = next(kind for kind in meta["node_types"] if kind["name"] == "llm")
    assert llm["fields"][0] == {"name": "prompt", "label": "Prompt", "kind": "textarea", "required": True,
                                "help": "${name} is that node's output; ${input} the run's input.",
                                "default": "${input}", "rows": 5}
    offline = next(provider for provider in meta["providers"] if provider["name"] == "offline")
    assert (offline["label"], offline["needs_key"]) == ("Offline (no LLM)", False)
    assert {"name": "builtin", "label": "Built-in"} in meta["tool_sources"]
    from organisation.policy import RESOURCES  # a model module: after the app registry is ready

    assert meta["access"]["kinds"] == {name: {"label": kind.label, "roles": list(kind.roles)}
                                       for name, kind in sorted(RESOURCES.items())}
    assert meta["access"]["visibilities"] == ["private", "everyone", "shared"]


def test_the_config_api_takes_the_fields_the_form_describes():
    assert list(ACCEPTED) == [spec.name for spec in CONFIG_FIELDS]
