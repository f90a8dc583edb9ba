"""The data directory: everything the server writes, and the secrets generated on first start.

Importing the settings writes nothing (`manage.py help` must not create ./data): the settings only
read what exists (the environment, config.json). The directory is created when something first
writes into it (the SQLite backend in agentsite.core.db.sqlite3, `serve`, the secrets), and the secrets
are generated when something first needs one (see `secret_lazy`).
"""

from __future__ import annotations

import json
import os
import secrets
from collections import UserString
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

SECRETS_FILE = "config.json"
# Each secret: the key in config.json, the variable that overrides it, and its generated length (bytes).
SECRETS = {"secret_key": ("AGENTSITE_SECRET_KEY", 50), "jwt_signing_key": ("AGENTSITE_JWT_SIGNING_KEY", 64)}
# HS256 wants a key at least as long as its hash (32 bytes); PyJWT warns below that.
MIN_SECRET_CHARS = 32


def data_dir_path() -> Path:
    """Where the data directory is (AGENTSITE_DATA_DIR, default ./data); nothing is created."""
    return Path(os.environ.get("AGENTSITE_DATA_DIR", "./data")).expanduser().resolve()


def data_dir_ensure(path: Path | None = None) -> Path:
    """Create the data directory (0700) if needed, and make the files this process creates private."""
    path = path or data_dir_path()
    # The database holds the provider key and refresh tokens: nothing the server writes is for other
    # local users, so files are created 0600 (SQLite's included: it opens with 0644 & ~umask).
    os.umask(0o077)
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.stat().st_uid == os.getuid():
            path.chmod(0o700)
    except OSError as exc:
        raise ImproperlyConfigured(f"AGENTSITE_DATA_DIR {path} cannot be created: {exc}") from exc
    return path


def write_private(path: Path, text: str) -> None:
    """Write a file readable only by its owner (0600), replacing any earlier one atomically."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
    os.chmod(path, 0o600)


# --- secrets ----------------------------------------------------------------------------------------

def secrets_read(directory: Path) -> dict[str, str]:
    """The secrets known without writing anything: the environment's, else config.json's if it exists.

    Raises ImproperlyConfigured naming the variable (too short) or the file (not JSON).
    """
    found = {key: value for key, value in _secrets_file(directory).items() if key in SECRETS and value}
    for key, (variable, _length) in SECRETS.items():
        value = os.environ.get(variable, "")
        if value:
            if len(value) < MIN_SECRET_CHARS:
                raise ImproperlyConfigured(f"{variable} must be at least {MIN_SECRET_CHARS} characters long.")
            found[key] = value
    return found


def secrets_ensure(directory: Path) -> dict[str, str]:
    """Every secret, generating the missing ones into config.json (0600) on first start."""
    found = secrets_read(directory)
    if all(key in found for key in SECRETS):
        return found
    data_dir_ensure(directory)
    path = directory / SECRETS_FILE
    stored = _secrets_file(directory)
    generated = {key: stored.get(key) or secrets.token_urlsafe(length) for key, (_env, length) in SECRETS.items()}
    if stored:  # an existing file lacking a key: complete it
        write_private(path, json.dumps({**stored, **generated}, indent=2))
    elif not _secrets_file_create(path, generated):
        return secrets_ensure(directory)  # another process created it first: take its keys
    return secrets_read(directory)


def secret_lazy(directory: Path, key: str) -> str | LazySecret:
    """The secret as a str when it is known now; otherwise a LazySecret that generates it on first use."""
    known = secrets_read(directory).get(key)
    return known if known else LazySecret(directory, key)


class LazySecret(UserString):
    """A secret generated (and written to config.json) the first time its text is used.

    Django only ever turns SECRET_KEY into text (force_bytes/str for signing and hashing), so this defers
    the first write to the first request, task or token that needs the key. It is truthy without being
    resolved: Django checks `not SECRET_KEY` on every read, and django-q2 reads it during django.setup().
    PyJWT needs a real str: see SettingsDict.
    """

    def __init__(self, directory: Path, key: str) -> None:  # no super().__init__: `data` is computed
        self._directory, self._key, self._value = directory, key, ""

    @property
    def data(self) -> str:  # type: ignore[override]
        if not self._value:
            self._value = secrets_ensure(self._directory)[self._key]
        return self._value

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"<LazySecret {self._key}>"  # never the secret itself (debug pages, logs)


class SettingsDict(dict):
    """A settings dict (SIMPLE_JWT) whose LazySecret values are read as real strs.

    simplejwt reads SIGNING_KEY with `SIMPLE_JWT[name]` once, when it builds its token backend on the
    first token made or checked (rest_framework_simplejwt.state); PyJWT rejects anything but str/bytes.
    """

    def __getitem__(self, name: str) -> Any:
        return _resolved(super().__getitem__(name))

    def get(self, name: str, default: Any = None) -> Any:
        return _resolved(super().get(name, default))


def _resolved(value: Any) -> Any:
    return str(value) if isinstance(value, LazySecret) else value


def _secrets_file(directory: Path) -> dict[str, str]:
    path = directory / SECRETS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ImproperlyConfigured(f"{path} cannot be read ({exc}).") from exc
    try:
        stored = json.loads(text)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{path} is not valid JSON ({exc}); fix it or remove it to regenerate.") from exc
    if not isinstance(stored, dict):
        raise ImproperlyConfigured(f"{path} must hold a JSON object; fix it or remove it to regenerate.")
    return stored


def _secrets_file_create(path: Path, stored: dict[str, str]) -> bool:
    """Create config.json unless it exists. Two processes starting together (web and worker) must agree
    on one key, so the file appears whole or not at all: the first hard link wins."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.new")
    write_private(tmp, json.dumps(stored, indent=2))
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True
