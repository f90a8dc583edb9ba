"""This process's plugins: one loader and one watcher per process, started on first use.

Every process that serves tools (daphne, each task worker, `runmcp`) loads the plugin directory and watches it
itself the first time it lists or calls tools or asks for the plugins: a forked worker notices it is a new
process (its pid) and starts its own, since threads do not survive a fork. Changes on disk reach every process
through its own watcher and, once they settle, its own listings; `plugins_reload` reloads in the process that
serves the request, and every (re)load is announced (LOADED_TOPIC) so that the others load the files at their
next listing without waiting for them to settle.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading

from django.conf import settings

from agentsite.core import invalidation
from agentsite.core.errors import AppError
from plugins.loader import PluginLoader, PluginState, discover
from plugins.signals import PluginEvent, plugin_reloaded
from plugins.watcher import PluginWatcher

logger = logging.getLogger(__name__)

_BOOT = secrets.token_hex(6)  # with the pid: this process among the deployment's
LOADED_TOPIC = "plugins.loaded"  # announced with a plugin's name whenever a process (re)loads or drops it
_lock = threading.Lock()
_current: tuple[int, PluginLoader, PluginWatcher | None] | None = None


def plugin_loader() -> PluginLoader:
    """This process's loader: on first use (per process) the directory is watched and every plugin loaded."""
    current = _current
    if current is not None and current[0] == os.getpid():
        return current[1]
    return _start()


def _start() -> PluginLoader:
    global _current
    with _lock:
        current = _current
        if current is not None and current[0] == os.getpid():
            return current[1]
        if current is not None:  # inherited through a fork: its threads did not come along
            current[1].close()
        loader = PluginLoader(settings.AGENTSITE_PLUGIN_DIR, tool_timeout=settings.AGENTSITE_PLUGIN_TOOL_TIMEOUT_S)
        # What this process loads, it announces; what another announces, this one loads at its next listing
        # (plugins.loader: tell_loaded), so that no process serves an older version than one another lists.
        invalidation.subscribe(LOADED_TOPIC, _told)
        invalidation.listen()
        plugin_reloaded.connect(_announce, weak=False, dispatch_uid="plugins.services.announce")
        watcher = None
        if settings.AGENTSITE_PLUGIN_WATCH:
            watcher = PluginWatcher(loader)
            try:
                watcher.start()
            except OSError as exc:  # e.g. the inotify watch limit: plugins still load, reload on request
                logger.error("Cannot watch the plugin directory %s (%s); use POST /api/plugins/reload after a "
                             "change", loader.directory, exc)
                watcher = None
        else:
            loader.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        loader.load_all()  # before publishing: no caller sees this process's plugins half loaded
        _current = (os.getpid(), loader, watcher)
    return loader


def _told(key: str | None) -> None:
    current = _current
    if current is None or current[0] != os.getpid():
        return
    origin, _, name = (key or "").partition(":")
    if key is None or origin != _origin(current):  # not this process's own announcement
        current[1].tell_loaded(name or None)


def _announce(sender, loader: PluginLoader, event: PluginEvent, **kwargs) -> None:
    current = _current
    if current is not None and current[0] == os.getpid() and loader is current[1]:
        invalidation.announce(LOADED_TOPIC, f"{_origin(current)}:{event.name}")


def _origin(current: tuple[int, PluginLoader, PluginWatcher | None]) -> str:
    """This process's loader's name in announcements (a pid alone may repeat on another host)."""
    return f"{current[0]}-{id(current[1]):x}-{_BOOT}"


def stop() -> None:
    """Stop this process's watcher and unload its plugins (tests)."""
    global _current
    with _lock:
        current, _current = _current, None
    if current is not None and current[0] == os.getpid():
        if current[2] is not None:
            current[2].stop()
        current[1].close()


def plugins_reload(*, name: str | None = None) -> list[PluginState]:
    """Reload one plugin (or all) in this process now. Raises AppError 404 for a name that is neither in the
    directory nor loaded."""
    loader = plugin_loader()
    if name is None:
        loader.load_all()
    else:
        if loader.state(name) is None and name not in discover(loader.directory):
            raise AppError("not_found", f"There is no plugin named {name!r} in {loader.directory}.", 404)
        loader.reload(name)
    return loader.states()
