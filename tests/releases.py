"""A previous release of this repository, checked out beside the tree for the upgrade tests."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def checked_out(commit: str, tree: Path) -> Iterator[Path]:
    """`commit` in a git worktree at `tree` for the block's length (it needs the commit in this checkout's history)."""
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
    assert known.returncode == 0, (f"commit {commit} (the previous release) is not in this checkout's history: "
                                   "fetch it (git fetch --unshallow)")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit],
                   check=True, capture_output=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
