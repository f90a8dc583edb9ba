"""An import inside a function says why it is not at the module's top: a comment on its line, or just above it
(above a run of imports, the comment covers the run). The reasons that hold: start-up cost (a heavy module a
process may never need), an optional dependency, Django's app registry (a model, before the apps are ready),
a cycle between packages that cannot be removed."""

from __future__ import annotations

import ast

from tests.foundation.codeshape import ROOT, Module, comments, function_imports, pending, product_modules


def unexplained(module: Module) -> list[str]:
    """path:line of each import inside a function with no comment saying why."""
    found = comments(module)
    lines = module.path.read_text(encoding="utf-8").splitlines()
    imports = sorted(function_imports(module), key=lambda node: node.lineno)
    import_lines = {line for node in imports for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    problems = []
    for node in imports:
        above = node.lineno - 1
        # A run of imports (isort's groups, blank lines between them): its comment is above the run.
        while (above in import_lines or not lines[above - 1].strip()) and above not in found and above > 1:
            above -= 1
        if node.lineno in found or (above in found and lines[above - 1].lstrip().startswith("#")):
            continue
        where = module.path.relative_to(ROOT) if module.path.is_relative_to(ROOT) else module.path
        problems.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return problems


def test_every_import_inside_a_function_says_why():
    problems = [problem for module in product_modules() if not pending(module) for problem in unexplained(module)]
    assert not problems, ("imports inside functions without a comment saying why (hoist them to the top, or say "
                          "why not):\n" + "\n".join(problems))


def test_the_check_finds_an_unexplained_import(tmp_path):
    path = tmp_path / "planted.py"
    path.write_text(
        "import os\n\n\n"
        "def explained():\n    # PyAV: half a second to import, and only audio needs it\n    import av\n"
        "    import av.audio\n\n    import av.video\n\n\n"
        "def on_its_line():\n    import torch  # optional: the dense extra\n\n\n"
        "def unexplained():\n    x = 1  # a comment on another statement\n    import json\n\n\n"
        "def nested():\n    def inner():\n        from django.apps import apps\n    return inner\n")
    assert [problem.split(": ", 1)[1] for problem in unexplained(Module("planted", path, False))] == [
        "import json", "from django.apps import apps"]
