"""No import cycle inside a package: the module graph of each package (an app, a package of agentsite/) is read
with `ast`, imports inside functions included (a cycle held together by an import in a function is still one),
and every cycle found is printed."""

from __future__ import annotations

from tests.foundation.codeshape import Module, cycles, module_graph, pending, product_modules


def test_no_package_has_an_import_cycle():
    modules = [module for module in product_modules() if not pending(module)]
    found = cycles(module_graph(modules))
    assert not found, "import cycles inside a package:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


def test_the_check_finds_a_planted_cycle_and_prints_it(tmp_path):
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from planted.b import thing\n")
    (package / "b.py").write_text("def thing():\n    from . import c\n")
    (package / "c.py").write_text("import planted.a\n")
    (package / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from planted import a\n")
    (package / "e.py").write_text("from planted import d\n")  # no cycle through d: its import is TYPE_CHECKING's
    modules = [Module(f"planted.{path.stem}", path, False) for path in sorted(package.glob("[a-z].py"))]
    modules.append(Module("planted", package / "__init__.py", True))
    assert cycles(module_graph(modules)) == [["planted.a", "planted.b", "planted.c", "planted.a"]]


def test_modules_of_two_packages_are_no_cycle_of_one():
    graph = module_graph([module for module in product_modules()
                          if module.name in ("agentsite.agent.tools", "agentsite.core.errors")])
    assert graph == {"agentsite.agent.tools": set(), "agentsite.core.errors": set()}
