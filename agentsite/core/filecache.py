"""The cache of a deployment without Redis: files under the data directory, shared by every process of the
host, so that a count kept there (the login rate limit, accounts/ratelimit.py) is one count for all of them.

Django's FileBasedCache makes `add` and `incr` a read then a write, so two processes counting at once could lose
a count. Here `add`, `incr`/`decr` and `set` hold an exclusive lock (flock on `<dir>/.lock`) for their read and
write, and `incr` keeps the entry's expiry (Django's would stretch a rate-limit window).
"""

from __future__ import annotations

import fcntl
import os
import pickle
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.filebased import FileBasedCache


class SharedFileCache(FileBasedCache):
    """FileBasedCache whose read-modify-writes are atomic across the host's processes (see the module)."""

    if TYPE_CHECKING:  # FileBasedCache's own helpers, which django-stubs do not declare
        _dir: str

        def _createdir(self) -> None: ...
        def _key_to_file(self, key: Any, version: Any = None) -> str: ...
        def _is_expired(self, f: IO[bytes]) -> bool: ...

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self._createdir()
        fd = os.open(os.path.join(self._dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def add(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None) -> bool:
        with self._locked():
            if self.has_key(key, version):
                return False
            super().set(key, value, timeout, version)
            return True

    def set(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None) -> None:
        with self._locked():
            super().set(key, value, timeout, version)

    def incr(self, key: Any, delta: int = 1, version: Any = None) -> Any:
        with self._locked():
            fname = self._key_to_file(key, version)
            try:
                with open(fname, "rb") as f:
                    if self._is_expired(f):
                        raise ValueError(f"Key '{key}' not found")
                    f.seek(0)
                    expiry = pickle.load(f)
                    value = pickle.loads(zlib.decompress(f.read()))
            except FileNotFoundError:
                raise ValueError(f"Key '{key}' not found") from None
            value += delta
            self._write_at(fname, expiry, value)
            return value

    def _write_at(self, fname: str, expiry: float | None, value: Any) -> None:
        """Write value with an absolute expiry (as stored), atomically (a new file moved into place)."""
        fd, tmp_path = tempfile.mkstemp(dir=self._dir)
        try:
            with open(fd, "wb") as f:
                f.write(pickle.dumps(expiry, self.pickle_protocol))
                f.write(zlib.compress(pickle.dumps(value, self.pickle_protocol)))
            os.replace(tmp_path, fname)
        except BaseException:
            if os.path.exists(tmp_path):
                os.remove(tmp_path)
            raise
