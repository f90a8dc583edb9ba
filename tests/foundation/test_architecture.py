"""Dependencies point one way (docs/architecture.md): facet apps -> the runtime (agentsite.agent) -> the kernel
(agentsite.core); the server (agentsite.server) and the dashboard (agentsite.dashboard) sit on the kernel too, and
only the project shell (the modules at the top of agentsite/) ties them together.

Every import of the product code is read with `ast` (imports inside functions included), so a new backward
import fails here instead of hiding in a docstring:
- the kernel imports no facet app, nothing of the runtime, the server, the dashboard or the shell;
- the runtime imports no facet app and nothing of the shell, the server or the dashboard;
- the server and the dashboard import the kernel only (and themselves);
- no facet app imports the shell; an app imports another app only along the edges listed here;
- the shell stays small: at most 12 modules at the top of agentsite/.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("accounts", "catalogue", "sessions_app", "compat", "mcpbridge", "knowledge", "scheduler", "workflows", "voice",
        "plugins", "usage", "uploads", "organisation", "sso", "agents_app", "oauth", "a2a_app")
# The modules of agentsite/core/ (the kernel), each a module or a package of it.
KERNEL = ("errors", "validation", "jsonbody", "parsers", "pagination", "sse", "dbcall", "db", "processes", "meta",
          "taskqueue", "invalidation", "env", "datadir", "hosts", "cors", "startup", "diskspace", "mounts",
          "filecache", "metrics", "logs", "audit", "tracing", "qbroker", "localwake", "bodygate", "permissions",
          "secretbox", "asgihttp", "usercaches", "kept")
# The kernel's one model (ServiceProcess) stays at agentsite/models.py under the `agentsite` app label, so the
# migration history of existing data directories stays valid: imported as part of the kernel.
KERNEL_MODELS = "agentsite.models"
# The project shell: what remains at the top of agentsite/ (it may import anything).
SHELL = ("settings", "urls", "asgi", "middleware", "schema", "health", "wsgi", "admin", "apps", "models",
         "management", "migrations")
# The most modules (.py files, __init__.py included) the top of agentsite/ may hold: what is not the shell's
# lives in a package.
SHELL_MODULES_MAX = 12
# The packages of agentsite/, each a layer.
PACKAGES = {"core": "kernel", "agent": "runtime", "server": "server", "dashboard": "dashboard"}
# Which app may import which (what a facet builds on). Anything else between apps is a backward import.
APP_EDGES = {
    # Identity reads one flag of the agent config (allow_registration); the catalogue imports no app.
    "accounts": {"catalogue", "organisation"},
    "catalogue": set(),
    "sessions_app": {"accounts", "agents_app"},
    "compat": {"accounts", "catalogue", "knowledge", "oauth"},  # oauth: its tokens are refused on /v1
    "mcpbridge": {"accounts", "knowledge", "oauth", "organisation"},
    "knowledge": {"organisation"},
    "scheduler": {"accounts", "agents_app", "sessions_app", "workflows"},
    "workflows": {"accounts", "organisation"},
    "voice": {"accounts", "catalogue"},
    "uploads": {"knowledge", "sessions_app"},
    "plugins": {"accounts"},
    "usage": {"accounts", "organisation"},
    # Groups, memberships and the access policy: every shareable resource's app builds on it; it imports no app.
    "organisation": set(),
    # Single sign-on makes accounts and sets their groups.
    "sso": {"accounts", "organisation"},
    # The authorization server for /mcp: its tokens act as accounts' users.
    "oauth": {"accounts"},
    # Named agents: a model checked against the catalogue, knowledge collections, shared through organisation's
    # rule; sessions and scheduled tasks name an agent.
    "agents_app": {"catalogue", "knowledge", "organisation"},
    # A2A: each agent served as the caller (accounts' credentials, oauth's tokens for /a2a, agents_app's cards),
    # file parts stored as uploads; remote agents shared through organisation's rule.
    "a2a_app": {"accounts", "agents_app", "oauth", "organisation", "uploads"},
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
    if module == KERNEL_MODELS or module.startswith(KERNEL_MODELS + "."):
        return "kernel"
    if parts[1] in PACKAGES:
        return PACKAGES[parts[1]]
    return "shell" if parts[1] in SHELL else f"unlisted agentsite.{parts[1]}"


def violations(files: Iterator[Path], allowed: set[str]) -> list[str]:
    found = []
    for path in files:
        for module, line in modules_imported(path):
            layer = layer_of(module)
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            if layer is not None and layer not in allowed:
                found.append(f"{where}:{line} imports {module} ({layer})")
    return found


def test_every_app_of_the_repository_is_checked_here():
    # An app left out of APPS would import anything unseen.
    apps = {path.parent.name for path in ROOT.glob("*/apps.py") if path.parent.name != "agentsite"}
    assert apps == set(APPS), f"add to APPS and APP_EDGES: {sorted(apps - set(APPS))}"


def test_every_module_of_agentsite_has_a_layer():
    # A new module must be placed: in a package (a layer), or in SHELL. Else the checks below miss it.
    unplaced = [path.name for path in (ROOT / "agentsite").iterdir()
                if (path.suffix == ".py" and path.stem != "__init__" or (path / "__init__.py").is_file())
                and layer_of(f"agentsite.{path.stem}") not in ("kernel", "runtime", "server", "dashboard", "shell")]
    assert not unplaced, f"move each into a package, or add it to SHELL here (and docs/architecture.md): {unplaced}"


def shell_overflow(package: Path) -> str | None:
    """What is wrong when the top of `package` holds more than SHELL_MODULES_MAX modules, else None."""
    modules = sorted(path.name for path in package.glob("*.py"))
    if len(modules) <= SHELL_MODULES_MAX:
        return None
    return (f"{package.name}/ holds {len(modules)} modules, more than {SHELL_MODULES_MAX}: move what need not be in "
            f"the shell into core/, server/, agent/ or dashboard/ (docs/architecture.md): {modules}")


def test_the_shell_holds_at_most_twelve_modules():
    assert shell_overflow(ROOT / "agentsite") is None, shell_overflow(ROOT / "agentsite")


def test_the_shell_check_sees_a_thirteenth_module(tmp_path):
    (tmp_path / "package").mkdir()
    (tmp_path / "package" / "inside.py").write_text("")  # a package's modules are not the shell's
    for name in ("__init__", *(f"module{number}" for number in range(SHELL_MODULES_MAX - 1))):
        (tmp_path / f"{name}.py").write_text("")
    assert shell_overflow(tmp_path) is None
    (tmp_path / "one_more.py").write_text("")
    assert "holds 13 modules" in (shell_overflow(tmp_path) or "")


def test_the_kernel_is_the_modules_listed():
    present = {path.stem for path in (ROOT / "agentsite" / "core").iterdir()
               if path.suffix == ".py" and path.stem != "__init__" or (path / "__init__.py").is_file()}
    assert present == set(KERNEL), f"agentsite/core/ holds {sorted(present ^ set(KERNEL))} unlike KERNEL"


def test_the_kernel_imports_no_app_no_runtime_and_no_shell():
    assert not violations(sources("agentsite/core", "agentsite/models"), {"kernel"})


def test_the_runtime_imports_no_app_and_no_shell():
    assert not violations(sources("agentsite/agent"), {"kernel", "runtime"})


def test_the_server_and_the_dashboard_import_the_kernel_only():
    assert not violations(sources("agentsite/server"), {"kernel", "server"})
    assert not violations(sources("agentsite/dashboard"), {"kernel", "dashboard"})


def test_apps_import_only_the_apps_they_build_on_and_never_the_shell():
    problems = []
    for app, builds_on in APP_EDGES.items():
        allowed = {"kernel", "runtime", f"app {app}", *(f"app {other}" for other in builds_on)}
        problems += violations(sources(app), allowed)
    assert not problems, "backward imports:\n" + "\n".join(problems)


def test_the_check_sees_a_backward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from accounts.models import User\n    import agentsite.urls\n"
                   "    from agentsite.server.asgi_limits import SECURITY_HEADERS\n"
                   "    from agentsite.dashboard.views import dashboard\n    from agentsite.agent import tools\n"
                   "    from agentsite.core.errors import AppError\n    from agentsite.models import ServiceProcess\n")
    found = violations(iter([bad]), {"kernel"})
    assert [problem.rsplit("(", 1)[1] for problem in found] == [
        "app accounts)", "shell)", "server)", "dashboard)", "runtime)"], found
