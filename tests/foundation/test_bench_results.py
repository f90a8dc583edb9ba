"""bench/RESULTS.md opens with the current figure of each measure, one table (the measure, agentsite's figure, the
floor or peer beside it, the machine, the date, the script), and every benchmark in bench/ has a row there; the
history follows below it."""

from __future__ import annotations

import re

from tests.foundation.codeshape import ROOT

RESULTS = ROOT / "bench" / "RESULTS.md"
COLUMNS = ["measure", "agentsite (current)", "floor, peer or target", "machine", "date (UTC)", "script"]
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}\b")


def current_table(text: str) -> list[list[str]]:
    """The rows of the table that must open the file: the first section, `## Current figures`, before anything
    else but the title and a few lines of introduction. Raises AssertionError saying what is wrong."""
    sections = re.split(r"^## ", text, flags=re.MULTILINE)
    assert len(sections) > 1 and sections[1].startswith("Current figures\n"), \
        "the first section of bench/RESULTS.md must be `## Current figures`"
    assert "|" not in sections[0], "no table before `## Current figures`"
    lines = [line for line in sections[1].splitlines() if line.startswith("|")]
    assert lines, "`## Current figures` holds no table"
    header, rule, *rows = ([cell.strip() for cell in line.strip("|").split("|")] for line in lines)
    assert header == COLUMNS, f"the table's columns must be {COLUMNS}, not {header}"
    assert all(set(cell) <= set("-: ") for cell in rule)
    for row in rows:
        assert len(row) == len(COLUMNS), f"a row of {len(row)} cells: {row}"
        assert all(row[index] for index in (0, 1, 3, 4, 5)), f"an empty cell: {row}"
        assert DATE.match(row[4]), f"the date of {row[0]!r} is not YYYY-MM-DD: {row[4]!r}"
    return rows


def scripts_missing(text: str, scripts: list[str]) -> list[str]:
    named = " ".join(row[5] for row in current_table(text))
    return [script for script in scripts if f"bench/{script}" not in named]


def test_results_open_with_the_current_figures_of_every_benchmark():
    scripts = sorted(path.name for path in (ROOT / "bench").glob("*.py"))
    assert scripts_missing(RESULTS.read_text(encoding="utf-8"), scripts) == []


def test_the_check_refuses_a_diary_and_a_missing_benchmark():
    table = ("| " + " | ".join(COLUMNS) + " |\n|---|---|---|---|---|---|\n"
             "| first token | 1.4 ms | relay 1.3 ms | AMD | 2026-11-26 | `bench/compat.py` |\n")
    assert scripts_missing(f"# Results\n\n## Current figures\n\n{table}\n## History\n", ["compat.py", "kb.py"]) \
        == ["kb.py"]
    for diary in (f"# Results\n\n## 2026-11-22: the first run\n\n{table}",
                  f"# Results\n\n{table}\n## Current figures\n\n{table}",
                  f"# Results\n\n## Current figures\n\n{table.replace('2026-11-26', 'last week')}"):
        try:
            current_table(diary)
        except AssertionError:
            continue
        raise AssertionError(f"accepted: {diary!r}")
