"""One catalogue of error codes (agentsite.core.errors.ERROR_CODES): every code the code base can answer is in it, with
the status it is raised with.

The product code is read with `ast`: every call that takes an error code (AppError, the envelope helpers, /v1's
`invalid`) and every `{"code": ...}` literal (SSE error events) is found, and each literal code must be a member
of the catalogue, raised with one of its statuses where the status is written out.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from agentsite.core.errors import _STATUS_CODES, ERROR_CODES
from tests.foundation.test_architecture import APPS, ROOT

PACKAGES = ("agentsite", *APPS)  # the product: the shell's packages and every app
# Callables whose arguments carry a code: name -> (position of the code, position of the status or None).
CODE_TAKERS = {"AppError": (0, 2), "error_response": (0, 2), "envelope": (0, None), "openai_envelope": (0, 2),
               "envelope_for": (1, 3), "invalid": (2, None)}
CODE = re.compile(r"[a-z][a-z_]*")


def product_files() -> Iterator[Path]:
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                yield path


def _name(function: ast.expr) -> str | None:
    return function.id if isinstance(function, ast.Name) else function.attr if isinstance(function, ast.Attribute) \
        else None


def _argument(call: ast.Call, position: int | None, keyword: str) -> ast.expr | None:
    for item in call.keywords:
        if item.arg == keyword:
            return item.value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None


def raised_codes() -> list[tuple[str, int | None, str]]:
    """(code, status or None, where) of every literal code in the product code."""
    found: list[tuple[str, int | None, str]] = []
    for path in product_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call) and _name(node.func) in CODE_TAKERS:
                code_at, status_at = CODE_TAKERS[_name(node.func)]
                code = _argument(node, code_at, "code")
                status = _argument(node, status_at, "status")
                if isinstance(code, ast.Constant) and isinstance(code.value, str) and CODE.fullmatch(code.value):
                    value = status.value if isinstance(status, ast.Constant) and isinstance(status.value, int) \
                        else None
                    found.append((code.value, value, where))
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "code" and isinstance(value, ast.Constant) \
                            and isinstance(value.value, str):
                        found.append((value.value, None, where))
    return found


def test_the_scan_finds_the_codes_the_code_base_raises():
    codes = {code for code, _status, _where in raised_codes()}
    # If the scan stopped finding calls (a helper renamed), this test would pass by finding nothing.
    assert {"invalid", "not_found", "upstream_error", "unknown_field", "message_too_long", "model_not_found"} <= codes
    assert len(codes) >= 20, sorted(codes)


def test_every_code_the_code_base_raises_is_in_the_catalogue_with_its_status():
    problems = []
    for code, status, where in raised_codes():
        entry = ERROR_CODES.get(code)
        if entry is None:
            problems.append(f"{where}: {code!r} is not in agentsite.core.errors.ERROR_CODES (add it with its status "
                            f"and meaning, and to docs/api.md)")
        elif status is not None and status not in entry.statuses:
            problems.append(f"{where}: {code!r} raised with {status}, the catalogue says {entry.statuses}")
    assert not problems, "\n".join(problems)


def test_the_codes_chosen_by_status_are_in_the_catalogue():
    for status, code in _STATUS_CODES.items():
        assert code in ERROR_CODES and status in ERROR_CODES[code].statuses, (status, code)


def test_every_catalogue_entry_says_what_it_means():
    for code, entry in ERROR_CODES.items():
        assert CODE.fullmatch(code), code
        assert entry.statuses and all(400 <= status < 600 for status in entry.statuses), code
        assert entry.meaning.endswith(".") and len(entry.meaning) > 20, code
