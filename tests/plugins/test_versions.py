"""Every process serves the plugin version on disk: a listing loads what changed once it has settled.

Two loaders on one directory stand for two processes (each its own module namespace, as each worker has its
own interpreter); `PluginToolSource.list_tools_now` is how every door lists plugin tools.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsite.agent.tools import ToolContext, call_tool
from plugins.loader import SETTLE_S, PluginLoader, PluginToolSource
from plugins.signals import plugin_reloaded
from plugins.watcher import PluginWatcher
from tests.plugins.conftest import write

VERSION = '''
    from plugins.sdk import tool

    @tool
    def version() -> str:
        """Which version answers."""
        return "{version}"
'''
_namespaces = itertools.count()


class Clock:
    """Wall-clock seconds that stand still: `now()` takes the real time (just after a write), `settle()` moves
    past the debounce (instead of waiting for the files to settle)."""

    def __init__(self) -> None:
        self.at = time.time()

    def __call__(self) -> float:
        return self.at

    def now(self) -> None:
        self.at = time.time()

    def settle(self) -> None:
        self.at = time.time() + SETTLE_S + 0.01


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def other(plugin_dir: Path, clock: Clock) -> Iterator[PluginLoader]:
    """A second process's loader on the same directory."""
    made = PluginLoader(plugin_dir, namespace=f"agentsite_other_plugins_{next(_namespaces)}", tool_timeout=5.0,
                        wall_clock=clock)
    yield made
    made.close()


def listed(loader: PluginLoader) -> str | None:
    """What `version` answers in a listing of this loader's tools (None: not listed)."""
    tools = {tool.name: tool for tool in PluginToolSource(lambda: loader).list_tools_now(ToolContext())}
    if "version" not in tools:
        return None
    return asyncio.run(call_tool(tools["version"], {}, ToolContext())).text


def test_a_listing_serves_the_version_another_process_already_loaded(loader, other, plugin_dir, clock):
    path = write(plugin_dir / "versioned.py", VERSION.format(version="one"))
    loader.load_all()
    other.load_all()
    write(path, VERSION.format(version="two"))
    loader.reload("versioned")  # this process's watcher was first
    clock.settle()
    assert listed(other) == "two"  # the other process's watcher has not fired: its listing loaded it
    assert other.state("versioned").settled


def test_a_listing_leaves_a_file_still_being_written_until_it_settles(other, plugin_dir, clock):
    path = write(plugin_dir / "versioned.py", VERSION.format(version="one"))
    clock.settle()
    assert listed(other) == "one"
    path.write_text("")  # a write in progress: truncated
    clock.now()
    assert listed(other) == "one"
    write(path, VERSION.format(version="two"))
    clock.now()
    assert listed(other) == "one"
    clock.settle()
    assert listed(other) == "two"


def test_a_listing_adds_and_removes_plugins_as_the_directory_says(other, plugin_dir, clock):
    assert listed(other) is None
    path = write(plugin_dir / "versioned.py", VERSION.format(version="one"))
    clock.settle()
    assert listed(other) == "one" and other.state("versioned").status == "loaded"
    path.unlink()
    clock.now()
    assert listed(other) == "one"  # the directory changed just now: a save by delete-and-create may be under way
    clock.settle()
    assert listed(other) is None and other.state("versioned") is None


def test_a_change_deep_inside_a_package_is_seen_by_a_listing(other, plugin_dir, clock):
    write(plugin_dir / "deep" / "inner" / "__init__.py", "")
    write(plugin_dir / "deep" / "inner" / "source.py", 'VALUE = "first"\n')
    write(plugin_dir / "deep" / "__init__.py", VERSION.replace('"{version}"', "VALUE").replace(
        "from plugins.sdk import tool", "from plugins.sdk import tool\n    from .inner.source import VALUE"))
    clock.settle()
    assert listed(other) == "first"
    write(plugin_dir / "deep" / "inner" / "source.py", 'VALUE = "second"\n')
    clock.settle()
    assert listed(other) == "second"
    (plugin_dir / "deep" / "inner" / "source.py").unlink()  # a removed submodule: the package now fails
    clock.settle()
    assert listed(other) is None and other.state("deep").status == "error"


def test_a_version_read_before_it_settled_is_read_again_even_when_the_files_look_the_same(other, plugin_dir, clock):
    path = write(plugin_dir / "versioned.py", VERSION.format(version="aaa"))
    other.load_all()  # read at once (an explicit reload): not settled
    assert not other.state("versioned").settled
    stat = path.stat()
    path.write_text(path.read_text().replace("aaa", "bbb"))  # same size, same inode
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime: one tick of a coarse clock
    clock.settle()
    assert listed(other) == "bbb"
    reloads = []
    plugin_reloaded.connect(receiver := lambda sender, loader, event, **kw: reloads.append(event), weak=False)
    try:
        assert listed(other) == "bbb" and reloads == []  # settled now: listings only stat the files
    finally:
        plugin_reloaded.disconnect(receiver)


def test_a_listing_loads_the_last_write_of_a_burst_while_the_watcher_is_held_up(loader, plugin_dir):
    """The watcher loaded a version from the middle of a burst (no tools), then its thread was held up (here a
    slow receiver; in a server an audit row waiting for SQLite's write lock): a listing still serves the
    last write within the debounce, instead of the plugin staying unlisted until the watcher is free."""
    path = write(plugin_dir / "versioned.py", VERSION.format(version="0"))
    loader.load_all()
    release, held = threading.Event(), threading.Event()

    def slow(sender, loader, event, **kwargs) -> None:
        if event.tools == ():
            held.set()
            release.wait(30)

    plugin_reloaded.connect(slow, weak=False)
    watching = PluginWatcher(loader)
    watching.start()
    try:
        path.write_text("")  # the middle of a burst: the watcher loads it, and is held up announcing it
        assert held.wait(10), "the watcher did not reload the truncated file"
        for number in range(1, 21):
            write(path, VERSION.format(version=number))
        written = time.monotonic()
        while (answer := listed(loader)) != "20":
            assert answer in {None, *map(str, range(1, 20))}  # nothing older than the truncated file
            assert time.monotonic() - written < SETTLE_S + 3, "the listing never loaded the last write"
            time.sleep(0.02)
        # Not a listing that waited for the watcher to be free either (a margin for a loaded machine).
        assert time.monotonic() - written < SETTLE_S + 3, "the listing waited behind the held-up watcher"
    finally:
        release.set()
        watching.stop()
        plugin_reloaded.disconnect(slow)


def test_a_plugin_another_process_announced_it_loaded_is_loaded_without_waiting_to_settle(other, plugin_dir, clock):
    path = write(plugin_dir / "versioned.py", VERSION.format(version="one"))
    clock.settle()
    assert listed(other) == "one"
    write(path, VERSION.format(version="two"))  # and another process reloaded it at once (POST .../reload)
    clock.now()
    assert listed(other) == "one"  # not settled, and nobody said it runs elsewhere
    other.tell_loaded("versioned")
    assert listed(other) == "two"
    path.unlink()
    other.tell_loaded("versioned")  # removed elsewhere: let go without waiting for the directory to settle
    assert listed(other) is None
    write(path, VERSION.format(version="three"))
    other.tell_loaded(None)  # announcements may have been missed: every plugin is looked at
    assert listed(other) == "three"


def test_an_announcement_of_the_version_held_here_does_not_hurry_a_later_write(other, plugin_dir, clock):
    path = write(plugin_dir / "versioned.py", VERSION.format(version="one"))
    clock.settle()
    assert listed(other) == "one"
    other.tell_loaded("versioned")  # another process loaded the same files (say, at its start)
    assert listed(other) == "one"
    path.write_text("")  # a write in progress, later: it must settle, the announcement is spent
    clock.now()
    assert listed(other) == "one"
