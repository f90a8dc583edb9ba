"""The product's source read with `ast`, for the checks of its shape: the module graph of each package (its import
cycles), the imports inside functions, and the docstrings and comments. Shared by test_import_cycles.py,
test_function_imports.py and test_docstrings.py."""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.foundation.test_architecture import APPS, ROOT

__all__ = ["APPS", "ROOT"]
# Packages whose owners are reshaping them at the same time: skipped by these checks until that work is merged
# (then this set is emptied). Besides the apps: "agentsite" is the project shell (the modules at the top of
# agentsite/, not its packages), and agentsite.agent.providers the provider registry.
PENDING_OWNERS: set[str] = set()


@dataclass(frozen=True)
class Module:
    name: str  # dotted: agentsite.agent.tools
    path: Path
    is_package: bool  # an __init__.py

    @property
    def package(self) -> str:
        """The package a cycle must not cross inside: an app, a package of agentsite/, or the shell."""
        parts = self.name.split(".")
        if parts[0] != "agentsite":
            return parts[0]
        return ".".join(parts[:2]) if len(parts) > 2 or (len(parts) == 2 and self.is_package) else "agentsite"

    def tree(self) -> ast.Module:
        return ast.parse(self.path.read_text(encoding="utf-8"), filename=str(self.path))


def product_modules(root: Path = ROOT) -> list[Module]:
    """Every module of the product (agentsite and the apps), migrations left out."""
    modules = []
    for top in ("agentsite", *APPS):
        for path in sorted((root / top).rglob("*.py")) if (root / top).is_dir() else []:
            if "migrations" in path.relative_to(root).parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            modules.append(Module(".".join(parts[:-1] if is_package else parts), path, is_package))
    return modules


def pending(module: Module) -> bool:
    """Whether the module is one PENDING_OWNERS skips: in a pending app, the shell, or a pending module."""
    top = module.name.split(".")[0]
    return (top != "agentsite" and top in PENDING_OWNERS) or module.package in PENDING_OWNERS \
        or module.name in PENDING_OWNERS


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """The ids of the nodes under `if TYPE_CHECKING:` (never imported at run time)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for child in ast.walk(node))
    return skipped


def imported_names(module: Module, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names an import statement may load: the module, and each imported name as a submodule."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    return [target, *(f"{target}.{alias.name}" for alias in node.names)]


def module_graph(modules: list[Module]) -> dict[str, set[str]]:
    """module -> the modules of its own package it imports (at the top or inside a function, TYPE_CHECKING not)."""
    by_name = {module.name: module for module in modules}
    graph: dict[str, set[str]] = {}
    for module in modules:
        tree = module.tree()
        skipped = _type_checking_nodes(tree)
        edges = set()
        for node in ast.walk(tree):
            if id(node) in skipped or not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in imported_names(module, node):
                while name and name not in by_name:  # a name imported from a module: the module
                    name = name.rpartition(".")[0]
                if name and name != module.name and by_name[name].package == module.package:
                    edges.add(name)
        graph[module.name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a closed path, its first module repeated at its end) per strongly connected component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative (no recursion limit)
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_closed_path(graph, set(component)) for component in sorted(components)]


def _closed_path(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside the component."""
    start = min(component)
    paths = {successor: [start, successor] for successor in sorted(graph[start] & component)}
    frontier = list(paths)
    while start not in paths:
        following = []
        for node in frontier:
            for successor in sorted(graph[node] & component):
                if successor not in paths:
                    paths[successor] = [*paths[node], successor]
                    following.append(successor)
        frontier = following
    return paths[start]


def comments(module: Module) -> dict[int, str]:
    """line -> the comment on it."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(module.path.read_text(encoding="utf-8")).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string
    return found


def function_imports(module: Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements inside a function (at any depth), TYPE_CHECKING blocks not."""
    tree = module.tree()
    skipped = _type_checking_nodes(tree)  # nested functions: each import once
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skipped:
                    skipped.add(id(node))
                    yield node
