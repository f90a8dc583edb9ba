"""The data directory: everything the server writes, and the secrets generated on first start."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

SECRETS_FILE = "config.json"


def data_dir() -> Path:
    path = Path(os.environ.get("AGENTSITE_DATA_DIR", "./data")).expanduser().resolve()
    # The database holds the provider key and refresh tokens: nothing the server writes is for other
    # local users, so files are created 0600 and the directory is 0700.
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
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
    os.chmod(path, 0o600)


def load_secrets(directory: Path) -> dict[str, str]:
    """Return the Django secret key and JWT signing key, generating them on first start."""
    path = directory / SECRETS_FILE
    stored: dict[str, str] = {}
    if path.exists():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ImproperlyConfigured(f"{path} is not valid JSON ({exc}); fix it or remove it to regenerate.") from exc
    wanted = {"secret_key": 50, "jwt_signing_key": 64}
    missing = [key for key in wanted if not stored.get(key)]
    if not missing:
        return stored
    for key in missing:
        stored[key] = secrets.token_urlsafe(wanted[key])
    if path.exists():
        write_private(path, json.dumps(stored, indent=2))
        return stored
    # Two processes starting together (web and worker) must agree on one key: the first link wins.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.new")
    write_private(tmp, json.dumps(stored, indent=2))
    try:
        os.link(tmp, path)
    except FileExistsError:
        return load_secrets(directory)
    finally:
        tmp.unlink(missing_ok=True)
    return stored
