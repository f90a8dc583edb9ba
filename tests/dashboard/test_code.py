"""The dashboard's code, read as files (no browser): modules small enough to hold in one's head, each helper
defined once, and pages that share only through the shell. The linter (Biome, in .ci/run) checks each module;
these check how the modules relate, which no lint rule says."""

import re
from pathlib import Path

import agentsite.dashboard

DASHBOARD = Path(agentsite.dashboard.__file__).parent / "static" / "agentsite" / "dashboard"
PAGES = DASHBOARD / "pages"
MAX_LINES = 400
# What the pages share, in the shell (docs/dashboard.md's layout); anything else a page needs is its own.
SHELL_MODULES = {"ui.js", "api.js"}
IMPORT = re.compile(r'^import\s[^;]*?\sfrom\s+"([^"]+)";', re.MULTILINE)
TOP_LEVEL_FUNCTION = re.compile(r"^(?:export\s+)?(?:async\s+)?function\s*\*?\s*([A-Za-z_$][\w$]*)", re.MULTILINE)


def modules() -> list[Path]:
    found = [path for path in DASHBOARD.rglob("*.js") if "vendor" not in path.relative_to(DASHBOARD).parts]
    assert len(found) > 10, f"the dashboard's modules are not where this test looks: {DASHBOARD}"
    return sorted(found)


def imports(module: Path) -> list[Path]:
    targets = IMPORT.findall(module.read_text())
    return [(module.parent / target).resolve() for target in targets if target.startswith(".")]


def page_of(module: Path) -> str | None:
    """The page a module belongs to: pages/<name>.js and everything under pages/<name>/; None for the shell."""
    if PAGES not in module.parents:
        return None
    first = module.relative_to(PAGES).parts[0]
    return first.removesuffix(".js")


def test_the_module_reader_finds_multi_line_imports():
    ui = (DASHBOARD / "ui.js").resolve()
    assert any(ui in imports(module) for module in modules())
    sample = 'import {\n  a,\n  b,\n} from "./x.js";\nimport { c } from "./y.js";\n'
    assert IMPORT.findall(sample) == ["./x.js", "./y.js"]


def test_no_dashboard_module_is_longer_than_a_reader_can_hold():
    long = {str(module.relative_to(DASHBOARD)): lines for module in modules()
            if (lines := len(module.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concern): {long}"


def test_each_top_level_function_is_defined_in_one_module():
    # `mount` is the page contract (app.js): every page defines its own.
    where: dict[str, list[str]] = {}
    for module in modules():
        for name in TOP_LEVEL_FUNCTION.findall(module.read_text()):
            where.setdefault(name, []).append(str(module.relative_to(DASHBOARD)))
    twice = {name: files for name, files in where.items() if len(files) > 1 and name != "mount"}
    assert not twice, f"defined in more than one module (keep one, in ui.js when pages share it): {twice}"


def test_the_shared_helpers_are_the_shells():
    ui = (DASHBOARD / "ui.js").read_text()
    for name in ("h", "errorBox", "loading", "field", "errorText", "fieldErrors", "formatTime", "confirmDialog", "put"):
        assert re.search(rf"^export function {name}\(", ui, re.MULTILINE), f"ui.js does not export {name}"


def test_a_page_imports_only_the_shell_and_its_own_modules():
    shell = {(DASHBOARD / name).resolve() for name in SHELL_MODULES} | {(DASHBOARD / "vendor").resolve()}
    wrong = []
    for module in modules():
        page = page_of(module)
        if page is None:
            continue
        for target in imports(module):
            if target in shell or (DASHBOARD / "vendor").resolve() in target.parents or page_of(target) == page:
                continue
            wrong.append(f"{module.relative_to(DASHBOARD)} imports {target.relative_to(DASHBOARD.resolve())}")
    assert not wrong, f"a page shares code with another page only through ui.js/api.js: {wrong}"
