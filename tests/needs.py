"""What a test needs from the machine (a system program, an optional package).

Without it a test skips, saying what to install, except under CI=true (.ci/run, which installs everything
the suite uses): there it fails, so that a run can never pass by skipping what it was meant to test.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def unavailable(reason: str) -> NoReturn:
    """Skip with the reason; under CI=true, fail with it."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: a missing requirement fails the run instead of skipping)", pytrace=False)
    pytest.skip(reason)


def program(name: str, install: str) -> str:
    """The path of a program on PATH, or unavailable() saying how to install it (e.g. "apt-get install xvfb")."""
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} is not installed ({install}; .ci/run installs it)")
    return path


def dense_model() -> None:
    """The dense embedding model's files (the `dense` extra, which the dev extra installs), or unavailable()."""
    from knowledge import dense

    if dense.model_files() is None:
        unavailable(f"The dense embedding model is not installed ({dense.INSTALL_HINT})")


def module(name: str, install: str) -> None:
    """An importable Python module, or unavailable() saying which extra installs it (call inside a test/fixture)."""
    import importlib

    try:
        importlib.import_module(name)
    except ImportError:
        unavailable(f"the Python module {name} is not installed ({install})")
