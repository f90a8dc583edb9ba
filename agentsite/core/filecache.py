"""The cache of a deployment without Redis: files under the data directory, shared by every process of the
host (the workers of `serve --workers N`, a `manage.py` command), so that a count kept there (the login rate
limit, accounts/ratelimit.py) is one count for all of them.

Django's FileBasedCache reads and writes each entry atomically, but its `add` and `incr` are a read then a
write: two processes counting at once could both read 5 and both write 6. Here `add`, `incr`/`decr` and
`set` hold an exclusive lock (flock on `<dir>/.lock`) for their read and write, so that the counts of
concurrent processes add up. `incr` keeps the entry's expiry (Django's sets the default timeout again,
which would stretch a rate-limit window).

Invariants (tests/foundation/test_filecache.py): N processes each adding 1 k times to one key leave N×k;
`add` stores for exactly one of several racing processes; an incremented entry expires when it would have.
"""

from __future__ import annotations

import fcntl
import os
import pickle
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
        import tempfile

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
