"""The type check of .ci/run (mypy, pyproject.toml [tool.mypy]) covers the kernel and the agent runtime.

A kernel module added to KERNEL (tests/foundation/test_architecture.py) is checked from then on, every function
typed (disallow_untyped_defs): this fails until [tool.mypy] names it. agentsite/models.py is the one kernel
module left out: a Django model's fields need django-stubs' mypy plugin, which loads the settings.
"""

from __future__ import annotations

import tomllib

from tests.foundation.test_architecture import KERNEL, ROOT

UNCHECKED_KERNEL = {"models"}


def _mypy_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


def _checked_paths() -> set[str]:
    return set(_mypy_config()["files"])


def _strict_modules() -> set[str]:
    return {module for override in _mypy_config().get("overrides", []) if override.get("disallow_untyped_defs")
            for module in override["module"]}


def test_mypy_checks_every_kernel_module_and_the_agent_runtime():
    expected = {f"agentsite/{name}" if (ROOT / "agentsite" / name).is_dir() else f"agentsite/{name}.py"
                for name in KERNEL if name not in UNCHECKED_KERNEL} | {"agentsite/agent"}
    assert not expected - _checked_paths(), f"add to [tool.mypy] files: {sorted(expected - _checked_paths())}"


def test_every_checked_module_must_type_every_function():
    strict = _strict_modules()
    missing = [name for name in KERNEL if name not in UNCHECKED_KERNEL and f"agentsite.{name}" not in strict]
    missing += [package for package in ("agentsite.db.*", "agentsite.agent", "agentsite.agent.*")
                if package not in strict]
    assert not missing, f"add to the disallow_untyped_defs override of [tool.mypy]: {missing}"


def test_ci_runs_the_type_check_after_ruff():
    script = (ROOT / ".ci" / "run").read_text()
    assert "\nmypy\n" in script, ".ci/run does not run mypy"
    assert script.index("\nruff check .\n") < script.index("\nmypy\n"), "the type check runs after ruff"
