"""The type check of .ci/run (mypy, pyproject.toml [tool.mypy]) covers the kernel and the agent runtime; across
the code base, users and ids are typed as what they are.

The kernel is the package agentsite/core (tests/foundation/test_architecture.py's KERNEL): a module added there is
checked from then on, every function typed (disallow_untyped_defs). agentsite/models.py (the kernel's one model,
kept at the top for its app label) is left out: a Django model's fields need django-stubs' mypy plugin, which loads
the settings.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from tests.foundation.test_architecture import APPS, ROOT


def _mypy_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


def _checked_paths() -> set[str]:
    return set(_mypy_config()["files"])


def _strict_modules() -> set[str]:
    return {module for override in _mypy_config().get("overrides", []) if override.get("disallow_untyped_defs")
            for module in override["module"]}


def test_mypy_checks_every_kernel_module_and_the_agent_runtime():
    expected = {"agentsite/core", "agentsite/agent"}
    assert not expected - _checked_paths(), f"add to [tool.mypy] files: {sorted(expected - _checked_paths())}"


def test_every_checked_module_must_type_every_function():
    strict = _strict_modules()
    missing = [package for package in ("agentsite.core", "agentsite.core.*", "agentsite.agent", "agentsite.agent.*")
               if package not in strict]
    assert not missing, f"add to the disallow_untyped_defs override of [tool.mypy]: {missing}"


def test_ci_runs_the_type_check_after_ruff():
    script = (ROOT / ".ci" / "run").read_text()
    assert "\nmypy\n" in script, ".ci/run does not run mypy"
    assert script.index("\nruff check .\n") < script.index("\nmypy\n"), "the type check runs after ruff"


# A parameter or a field that names a user or an id has the type the models give it: the user model
# (AbstractBaseUser), an int for a user's id (BigAutoField), a uuid.UUID for the apps' rows, never Any.
USER_OR_ID = re.compile(r"^(user|owner|account)$|_id$")
PRODUCT = ("agentsite", *APPS)


def _product_sources() -> list[Path]:
    return [path for root in PRODUCT for path in sorted((ROOT / root).rglob("*.py")) if "migrations" not in path.parts]


def _named_any(tree: ast.AST) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                if arg.annotation is not None:
                    found.append((arg.arg, arg.annotation, arg.lineno))
        elif isinstance(node, ast.ClassDef):
            found += [(item.target.id, item.annotation, item.lineno) for item in node.body
                      if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)]
    return [(name, line) for name, annotation, line in found
            if USER_OR_ID.search(name) and ast.unparse(annotation) in ("Any", "typing.Any", "'Any'")]


def test_no_parameter_that_names_a_user_or_an_id_is_typed_any():
    typed_any = [f"{path.relative_to(ROOT)}:{line} {name}: Any" for path in _product_sources()
                 for name, line in _named_any(ast.parse(path.read_text(encoding="utf-8")))]
    assert not typed_any, f"type each as the model says (the user model, int, uuid.UUID): {typed_any}"
