"""Watching the plugin directory (watchdog, recursive) and reloading the plugins whose files change.

An event is mapped to the plugin it concerns (a top-level `<name>.py`, or anything in `<name>/`; hidden files,
editor back-ups and `__pycache__` concern none). Events are debounced per plugin (`debounce` after the last, at
most `max_wait` after the first), and reloads run one at a time on the watcher's thread. Whether a reload adds,
changes or removes is the loader's decision from what the directory holds, never the event's type.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from plugins.loader import SETTLE_S, PluginLoader

logger = logging.getLogger(__name__)

DEBOUNCE_S = SETTLE_S  # a listing loads a change no sooner than this after the last write either
MAX_WAIT_S = 2.0
_IGNORED_SUFFIXES = ("~", ".swp", ".swx", ".swo", ".tmp", ".pyc")
_RELEVANT = {"created", "modified", "deleted", "moved", "closed"}


def plugin_of(directory: Path, path: str, *, is_directory: bool) -> str | None:
    """The name of the plugin a changed path belongs to (None: no plugin's)."""
    try:
        parts = Path(path).relative_to(directory).parts
    except ValueError:
        return None
    if not parts or any(part.startswith(".") or part == "__pycache__" for part in parts):
        return None
    if parts[-1].endswith(_IGNORED_SUFFIXES) or parts[-1].startswith("#"):
        return None
    first = parts[0]
    if len(parts) > 1 or is_directory:
        return first
    return first[:-3] if first.endswith(".py") else None


class PluginWatcher:
    def __init__(self, loader: PluginLoader, *, debounce: float = DEBOUNCE_S, max_wait: float = MAX_WAIT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """clock: seconds, monotonic; the debounce's arithmetic reads it (a test may pass its own)."""
        self.loader = loader
        self.clock = clock
        self.debounce = debounce
        self.max_wait = max_wait
        self._pending: dict[str, tuple[float, float]] = {}  # plugin → (first event, last event), monotonic
        self._wake = threading.Condition()
        self._stopping = False
        self._observer: Observer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Watch the directory (created if missing) and start the reloading thread. Call load_all() after."""
        self.loader.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._thread = threading.Thread(target=self._run, name="plugin-reloader", daemon=True)
        self._thread.start()
        observer = Observer()
        observer.daemon = True
        observer.schedule(_Handler(self), str(self.loader.directory), recursive=True)
        observer.start()
        self._observer = observer

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def touched(self, name: str) -> None:
        """Note an event for the plugin `name` (the reload follows after the debounce)."""
        now = self.clock()
        with self._wake:
            first, _last = self._pending.get(name, (now, now))
            self._pending[name] = (first, now)
            self._wake.notify_all()

    def _due(self, now: float) -> tuple[list[str], float | None]:
        due, next_at = [], None
        for name, (first, last) in self._pending.items():
            at = min(last + self.debounce, first + self.max_wait)
            if at <= now:
                due.append(name)
            else:
                next_at = at if next_at is None else min(next_at, at)
        return due, next_at

    def _run(self) -> None:
        while True:
            with self._wake:
                while True:
                    if self._stopping:
                        return
                    due, next_at = self._due(self.clock())
                    if due:
                        for name in due:
                            del self._pending[name]
                        break
                    self._wake.wait(None if next_at is None else max(0.0, next_at - self.clock()))
            for name in due:
                try:
                    if not self.loader.is_current(name):  # a listing may have loaded this version already
                        self.loader.reload(name)
                except Exception:  # a boundary: the loader reports plugin failures itself; this is our bug
                    logger.exception("Reloading the plugin %r failed", name)


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: PluginWatcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _RELEVANT:
            return
        paths = [event.src_path, getattr(event, "dest_path", "")]
        for path in filter(None, paths):
            name = plugin_of(self.watcher.loader.directory, str(path), is_directory=event.is_directory)
            if name is not None:
                self.watcher.touched(name)
