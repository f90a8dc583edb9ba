"""Fixtures for the plugin tests: a temporary plugin directory, a loader on it (its own module namespace), and
the events its loads send."""

from __future__ import annotations

import itertools
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from plugins.loader import PluginLoader
from plugins.signals import PluginEvent, plugin_reloaded

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plugins" / "textkit.py"
_namespaces = itertools.count()


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip())
    return path


class Events:
    """The plugin_reloaded events of one loader, in order; wait() blocks until a condition holds."""

    def __init__(self, loader: PluginLoader) -> None:
        self.loader = loader
        self.items: list[PluginEvent] = []
        self._changed = threading.Condition()

    def __call__(self, sender, loader, event, **kwargs) -> None:
        if loader is self.loader:
            with self._changed:
                self.items.append(event)
                self._changed.notify_all()

    def wait(self, check: Callable[[list[PluginEvent]], bool], what: str, timeout: float = 5.0) -> list[PluginEvent]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not check(self.items):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}; events: {self.items}")
                self._changed.wait(left)
            return list(self.items)


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "plugins"
    directory.mkdir()
    return directory


@pytest.fixture
def loader(plugin_dir: Path) -> Iterator[PluginLoader]:
    made = PluginLoader(plugin_dir, namespace=f"agentsite_test_plugins_{next(_namespaces)}", tool_timeout=5.0)
    yield made
    made.close()


@pytest.fixture
def events(loader: PluginLoader) -> Iterator[Events]:
    recorder = Events(loader)
    plugin_reloaded.connect(recorder, weak=False)
    yield recorder
    plugin_reloaded.disconnect(recorder)
