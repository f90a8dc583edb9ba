"""Docstrings and comments say what and why: a module docstring of at most MAX_MODULE_DOCSTRING_LINES lines, no
issue numbers in a docstring (history belongs to git, figures to bench/RESULTS.md), and every repository path a
docstring or comment names exists."""

from __future__ import annotations

import ast
import re

from tests.foundation.codeshape import ROOT, Module, comments, pending, product_modules

MAX_MODULE_DOCSTRING_LINES = 12
# A path of this repository: one of its top-level directories, then at least one more part.
TOP = ("agentsite", "accounts", "sessions_app", "compat", "mcpbridge", "knowledge", "scheduler", "workflows",
       "voice", "plugins", "usage", "catalogue", "uploads", "organisation", "tests", "bench", "docs", "examples",
       r"\.ci")
PATH = re.compile(r"(?<![\w./<-])((?:" + "|".join(TOP) + r")/[\w./-]*\w)")
ISSUE = re.compile(r"\bissues? #?\d+\b|(?<![\w&/#])#\d+\b", re.IGNORECASE)


def docstrings(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node, clean=False)
            if text is not None:
                found.append((node.body[0].lineno, text))
    return found


def problems(module: Module) -> list[str]:
    where = module.path.relative_to(ROOT) if module.path.is_relative_to(ROOT) else module.path
    tree = module.tree()
    found = []
    module_doc = ast.get_docstring(tree, clean=False)
    if module_doc and len(module_doc.strip("\n").splitlines()) > MAX_MODULE_DOCSTRING_LINES:
        found.append(f"{where}: a module docstring of {len(module_doc.strip().splitlines())} lines "
                     f"(at most {MAX_MODULE_DOCSTRING_LINES}: what and why)")
    texts = docstrings(tree)
    found += [f"{where}:{line}: an issue number ({match.group(0)!r}) in a docstring"
              for line, text in texts for match in ISSUE.finditer(text)]
    for line, text in texts + list(comments(module).items()):
        for path in PATH.findall(text):
            if "*" not in path and not (ROOT / path.rstrip(".")).exists():
                found.append(f"{where}:{line}: names {path}, which does not exist")
    return found


def test_docstrings_are_short_carry_no_issue_numbers_and_name_only_paths_that_exist():
    found = [problem for module in product_modules() if not pending(module) for problem in problems(module)]
    assert not found, "\n".join(found)


def test_the_check_finds_planted_violations(tmp_path):
    path = tmp_path / "planted.py"
    path.write_text('"""A module.\n\nAs measured in issue 41.\n' + "More.\n" * 12 + '"""\n\n\n'
                    "def f():\n    '''Fixed in #12; see agentsite/core/errors.py.'''\n"
                    "    # moved to agentsite/core/nowhere.py (docs/api.md stays)\n")
    assert [problem.split(": ", 1)[1] for problem in problems(Module("planted", path, False))] == [
        "a module docstring of 15 lines (at most 12: what and why)",
        "an issue number ('issue 41') in a docstring",
        "an issue number ('#12') in a docstring",
        "names agentsite/core/nowhere.py, which does not exist",
    ]
