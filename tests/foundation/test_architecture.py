"""Dependencies point one way (docs/architecture.md): facet apps -> the runtime (agentsite.agent) -> the kernel.

Every import of the product code is read with `ast` (imports inside functions included), so a new backward
import fails here instead of hiding in a docstring:
- the kernel (the shared helpers in agentsite/) imports no facet app, nothing of the runtime and nothing of the
  project shell;
- the runtime imports no facet app and nothing of the shell;
- no facet app imports the shell; an app imports another app only along the edges listed here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("accounts", "sessions_app", "compat", "mcpbridge", "knowledge", "scheduler", "workflows", "voice", "plugins")
KERNEL = ("errors", "validation", "jsonbody", "parsers", "pagination", "sse", "dbcall", "db", "processes",
          "taskqueue", "invalidation", "env", "datadir", "hosts", "cors", "startup", "diskspace", "mounts", "models")
SHELL = ("settings", "urls", "asgi", "routing", "middleware", "schema", "health", "wsgi", "cli", "apidocs")
# The server's hardening and process handling: imported by the shell only.
SERVER = ("asgi_limits", "requestthreads", "orphan")
# Known backward imports, each to go when its piece moves (docs/architecture.md, Where it is going).
KNOWN = {("voice/upload_api.py", "agentsite.asgi_limits")}  # the per-path body limit belongs in the kernel
# Which app may import which (what a facet builds on). Anything else between apps is a backward import.
APP_EDGES = {
    "accounts": set(),
    "sessions_app": {"accounts"},
    "compat": {"accounts", "knowledge"},
    "mcpbridge": {"accounts", "knowledge"},
    "knowledge": set(),
    "scheduler": {"sessions_app", "workflows"},
    "workflows": {"accounts"},
    "voice": {"accounts", "knowledge", "sessions_app"},
    "plugins": {"accounts"},
}


def modules_imported(path: Path) -> Iterator[tuple[str, int]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno


def sources(*parts: str) -> Iterator[Path]:
    for part in parts:
        path = ROOT / part
        files = [path.with_suffix(".py")] if path.with_suffix(".py").is_file() else sorted(path.rglob("*.py"))
        yield from (file for file in files if "migrations" not in file.parts)


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] in APPS:
        return f"app {parts[0]}"
    if parts[0] != "agentsite" or len(parts) == 1:
        return None
    if parts[1] == "agent":
        return "runtime"
    if parts[1] in SHELL or parts[1] in ("management", "admin", "apps", "dashboard"):
        return "shell"
    if parts[1] in SERVER:
        return "server"
    return "kernel" if parts[1] in KERNEL else f"unlisted agentsite.{parts[1]}"


def violations(files: Iterator[Path], allowed: set[str]) -> list[str]:
    found = []
    for path in files:
        for module, line in modules_imported(path):
            layer = layer_of(module)
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            if layer is not None and layer not in allowed and (str(where), module) not in KNOWN:
                found.append(f"{where}:{line} imports {module} ({layer})")
    return found


def test_every_module_of_agentsite_has_a_layer():
    # A new module must be placed: in KERNEL (imports no app), or the shell. Else the checks below miss it.
    unplaced = [path.name for path in (ROOT / "agentsite").iterdir()
                if path.suffix == ".py" and path.stem != "__init__"
                and layer_of(f"agentsite.{path.stem}") not in ("kernel", "shell", "server")]
    assert not unplaced, f"add each to KERNEL or SHELL in this test (and docs/architecture.md): {unplaced}"


def test_the_kernel_imports_no_app_no_runtime_and_no_shell():
    assert not violations(sources(*(f"agentsite/{name}" for name in KERNEL)), {"kernel"})


def test_the_runtime_imports_no_app_and_no_shell():
    assert not violations(sources("agentsite/agent"), {"kernel", "runtime"})


def test_apps_import_only_the_apps_they_build_on_and_never_the_shell():
    problems = []
    for app, builds_on in APP_EDGES.items():
        allowed = {"kernel", "runtime", f"app {app}", *(f"app {other}" for other in builds_on)}
        problems += violations(sources(app), allowed)
    assert not problems, "backward imports:\n" + "\n".join(problems)


def test_the_check_sees_a_backward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from accounts.models import User\n    import agentsite.urls\n")
    found = violations(iter([bad]), {"kernel"})
    assert len(found) == 2 and "app accounts" in found[0] and "shell" in found[1]
