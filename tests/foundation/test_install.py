"""What an install made the README's way (`pip install -e .`, with the pip a fresh venv has) must contain.

.ci/run installs exactly that way, so these fail in CI when a dependency only arrives through an extra
that an older pip does not resolve (trafilatura's `lxml[html_clean]`, spelled `html-clean` now).
"""

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def _dependencies() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(line) for line in project["dependencies"]]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (version,) = re.findall(r"==\s*([^,\s]+)", str(requirement.specifier))
            pins[canonicalize_name(requirement.name)] = version
    return pins


def test_web_fetch_can_extract_a_page_in_this_environment():
    import lxml.html.clean  # noqa: F401 - trafilatura's import, which fails when lxml_html_clean is missing

    from agentsite.agent.builtin.web_fetch import _html_text

    html = (b"<html><body><nav>menu</nav><article><h1>Title</h1><p>" + b"The main text of the page. " * 20
            + b"</p></article></body></html>")
    assert "The main text of the page." in _html_text(html, "https://example.com/", "markdown")


def test_lxml_html_clean_is_a_direct_dependency():
    names = {canonicalize_name(requirement.name) for requirement in _dependencies()}
    assert "lxml-html-clean" in names, "trafilatura needs lxml_html_clean; pip 23.2 does not resolve lxml[html_clean]"


def test_requirements_txt_pins_every_dependency_within_pyproject_ranges():
    pins = _pins()
    for requirement in _dependencies():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"requirements.txt does not pin {requirement.name} (a dependency in pyproject.toml)"
        assert requirement.specifier.contains(pins[name], prereleases=True), \
            f"requirements.txt pins {name}=={pins[name]}, outside pyproject.toml's {requirement}"
    extra = set(pins) - {canonicalize_name(requirement.name) for requirement in _dependencies()}
    assert not extra, f"requirements.txt pins what pyproject.toml does not depend on: {sorted(extra)}"
