"""A previous release of this repository, checked out beside the tree for the upgrade tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

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


@contextmanager
def fresh_database(data_dir: Path) -> Iterator[dict[str, str]]:
    """The environment of a process on a new, empty database of the backend this run uses: its own data
    directory, and on PostgreSQL a database made for it and dropped after (no Redis, no settings module, no
    PYTHONPATH: the caller says which tree runs)."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    env.update(AGENTSITE_DATA_DIR=str(data_dir))
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres:", "postgresql:")):
        yield env
        return
    import psycopg  # only on the PostgreSQL pass: SQLite runs need no driver

    name = f"upgrade_{uuid.uuid4().hex[:12]}"
    # Made and dropped from the server's maintenance database: the run's own DATABASE_URL may name a database
    # that does not exist (a CI shard's, whose test database pytest-django names after it).
    maintenance = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    env["DATABASE_URL"] = urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
    try:
        yield env
    finally:
        with psycopg.connect(maintenance, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_step(module: str, step: str, env: dict[str, str]) -> dict:
    """`python -m <module> <step>` in this tree with `env` (an upgrade test's half, in a process of its own): the
    JSON its last line prints. Fails the test with the step's output when it fails."""
    done = subprocess.run([sys.executable, "-m", module, step], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{step}:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])
