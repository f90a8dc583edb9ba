"""Secrets kept at rest in the database (a remote server's OAuth tokens): sealed with Fernet (AES-128-CBC and
HMAC-SHA256, from `cryptography`) under a key derived from the deployment's SECRET_KEY by HKDF-SHA256.

Contract: `seal(text, purpose=p)` returns ASCII text that `unseal(sealed, purpose=p)` turns back into `text`
with the same SECRET_KEY (or one of SECRET_KEY_FALLBACKS, so a rotated key still opens what it sealed); a
different purpose, key or any altered character raises SecretBoxError. The purpose keeps one use's sealed
values from opening as another's. Sealing the same text twice gives different results (a random IV).
"""

from __future__ import annotations

import base64
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

SALT = b"agentsite.secretbox"


class SecretBoxError(Exception):
    """A sealed value that does not open: altered, sealed for another purpose, or under a key no longer held."""


def seal(text: str, *, purpose: str) -> str:
    """`text` sealed under the current SECRET_KEY for `purpose`."""
    return _box(purpose, *_keys()).encrypt(text.encode()).decode("ascii")


def unseal(sealed: str, *, purpose: str) -> str:
    """The text `seal` sealed for `purpose`. Raises SecretBoxError."""
    try:
        return _box(purpose, *_keys()).decrypt(sealed.encode("ascii")).decode()
    except (InvalidToken, UnicodeError) as exc:
        raise SecretBoxError(f"A sealed {purpose} does not open (altered, or sealed under another key).") from exc


def _keys() -> tuple[str, ...]:
    # Read on every call: settings (and a test's override) apply at once; the derivation is cached below.
    return (str(settings.SECRET_KEY), *(str(key) for key in getattr(settings, "SECRET_KEY_FALLBACKS", ())))


@lru_cache(maxsize=32)
def _box(purpose: str, *keys: str) -> MultiFernet:
    return MultiFernet([Fernet(_derive(key, purpose)) for key in keys])


def _derive(key: str, purpose: str) -> bytes:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=SALT, info=purpose.encode())
    return base64.urlsafe_b64encode(hkdf.derive(key.encode()))
