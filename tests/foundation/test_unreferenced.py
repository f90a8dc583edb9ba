"""No function or method that nothing references: vulture reads the product, its tests and bench/ (a function
only a test calls counts as referenced), with tests/foundation/vulture_whitelist.py for the names a framework
calls by convention. Packages in PENDING_OWNERS are not reported until their owners' work is merged."""

from __future__ import annotations

from pathlib import Path

from vulture import Vulture

from tests.foundation.codeshape import APPS, PENDING_OWNERS, ROOT

WHITELIST = ROOT / "tests" / "foundation" / "vulture_whitelist.py"
READ = [ROOT / top for top in ("agentsite", *APPS, "tests", "bench") if (ROOT / top).is_dir()]


def unreferenced(*paths: Path) -> list[str]:
    """vulture's unused functions and methods (path:line: what), at its 60% confidence."""
    vulture = Vulture()
    vulture.scavenge([str(path) for path in paths] + [str(WHITELIST)])
    return [f"{Path(item.filename).relative_to(ROOT) if Path(item.filename).is_relative_to(ROOT) else item.filename}:"
            f"{item.first_lineno}: unused {item.typ} {item.name!r}"
            for item in vulture.get_unused_code(min_confidence=60) if item.typ in ("function", "method")]


def reported(finding: str) -> bool:
    path = finding.split(":", 1)[0]
    parts = path.split("/")
    if parts[0] in ("tests", "bench") or "migrations" in parts:
        return False
    shell = parts[0] == "agentsite" and len(parts) == 2
    return (parts[0] if parts[0] != "agentsite" else "agentsite" if shell else "") not in PENDING_OWNERS \
        and ".".join(parts[:3]).removesuffix(".py") not in PENDING_OWNERS


def test_no_function_is_referenced_nowhere():
    found = [finding for finding in unreferenced(*READ) if reported(finding)]
    assert not found, ("functions nothing references (remove them, or add a framework's entry point to "
                       "tests/foundation/vulture_whitelist.py saying who calls it):\n" + "\n".join(found))


def test_the_check_finds_a_planted_unreferenced_function(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("def used():\n    return 1\n\n\ndef forgotten():\n    return 2\n\n\nprint(used())\n")
    assert [finding.split(": ", 1)[1] for finding in unreferenced(planted)] == [
        "unused function 'forgotten'"]
