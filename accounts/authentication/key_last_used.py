"""`last_used_at` of the API keys (and other credentials: `LastUsed(model)`) in use, written off the request
path: at most once a minute per key per process, by a thread, with a queryset update (no signal, so no cache is
dropped); a killed process loses at most that minute."""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import UTC, datetime
from typing import Any

from django.db import close_old_connections, connection

from accounts.models import ApiKey

logger = logging.getLogger(__name__)


class LastUsed:
    """`last_used_at` of the keys in use, written off the request path: `touch` costs a dict lookup, and at most
    once a minute per key (per process) hands the time to a thread that writes it (a queryset update: no
    signal, so no cache is dropped)."""

    INTERVAL_S = 60.0

    def __init__(self, model: Any = ApiKey) -> None:
        self._model = model  # the credential's model: a row with `last_used_at`
        self._touched: dict[int, float] = {}  # key id -> monotonic time last handed to the writer
        self._pending: dict[int, float] = {}  # key id -> Unix time to write
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: tuple[int, threading.Thread] | None = None

    def touch(self, key_id: int) -> None:
        now = time.monotonic()
        last = self._touched.get(key_id)
        if last is not None and now - last < self.INTERVAL_S:
            return
        with self._lock:
            self._touched[key_id] = now
            self._pending[key_id] = time.time()
            if self._thread is None or self._thread[0] != os.getpid() or not self._thread[1].is_alive():
                thread = threading.Thread(target=self._run, name=f"agentsite-last-used-{self._model.__name__}",
                                          daemon=True)
                self._thread = (os.getpid(), thread)
                thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Write what is pending (sync: the database)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        try:
            close_old_connections()
            for key_id, at in pending.items():
                self._model.objects.filter(pk=key_id).update(last_used_at=datetime.fromtimestamp(at, UTC))
        except Exception:  # noqa: BLE001 - a missed last_used_at must never fail anything
            logger.warning("Could not record when API keys were last used", exc_info=True)
        finally:
            connection.close()


last_used = LastUsed()
