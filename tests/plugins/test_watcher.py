"""The real watchdog observer on a temporary plugin directory: additions, changes, bursts, removals, fixes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from agentsite.agent.tools import ToolContext, call_tool
from plugins.watcher import PluginWatcher, plugin_of
from tests.plugins.conftest import write

VERSION = '''
    from plugins.sdk import tool

    @tool
    def version() -> str:
        """Which version answers."""
        return "{version}"
'''


@pytest.fixture
def watcher(loader) -> Iterator[PluginWatcher]:
    watching = PluginWatcher(loader)
    watching.start()
    loader.load_all()
    yield watching
    watching.stop()


def answer(loader, name: str = "version") -> str:
    tool = next(tool for tool in loader.tools() if tool.name == name)
    return asyncio.run(call_tool(tool, {}, ToolContext())).text


def test_an_added_file_is_loaded(watcher, loader, plugin_dir, events):
    write(plugin_dir / "versioned.py", VERSION.format(version="one"))
    events.wait(lambda items: len(items) == 1, "the addition")
    assert (events.items[0].kind, events.items[0].name, events.items[0].tools) == ("added", "versioned",
                                                                                   ("version",))
    assert answer(loader) == "one"


def test_a_change_reloads_and_the_new_version_answers(watcher, loader, plugin_dir, events):
    path = write(plugin_dir / "versioned.py", VERSION.format(version="one"))
    events.wait(lambda items: len(items) == 1, "the addition")
    write(path, VERSION.format(version="two"))
    events.wait(lambda items: len(items) == 2, "the change")
    assert events.items[1].kind == "changed" and answer(loader) == "two"


def test_a_burst_of_twenty_writes_reloads_once_with_the_last_version(watcher, loader, plugin_dir, events):
    path = write(plugin_dir / "versioned.py", VERSION.format(version="0"))
    events.wait(lambda items: len(items) == 1, "the addition")
    for number in range(1, 21):  # back to back: well inside one debounce period
        write(path, VERSION.format(version=number))
    events.wait(lambda items: len(items) == 2, "the reload after the burst")
    # A marker plugin written now is reloaded after any reload of "versioned" still due (one reloading
    # thread, in order of due time): once it is in, a second reload of the burst would be in too.
    write(plugin_dir / "marker.py", VERSION.format(version="marker"))
    events.wait(lambda items: any(event.name == "marker" for event in items), "the marker's addition")
    assert [(event.name, event.kind) for event in events.items] == [
        ("versioned", "added"), ("versioned", "changed"), ("marker", "added")]
    assert answer(loader) == "20"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_debounce_reloads_once_after_the_last_event_of_a_burst(loader):
    clock = FakeClock()
    watching = PluginWatcher(loader, clock=clock)  # not started: its arithmetic alone, on a clock of ours
    for _ in range(20):  # twenty events, 10 ms apart
        watching.touched("versioned")
        clock.now += 0.01
    last = clock.now - 0.01
    assert watching._due(last + 0.499) == ([], last + 0.5)
    assert watching._due(last + 0.5) == (["versioned"], None)


def test_events_that_keep_coming_reload_at_most_max_wait_after_the_first(loader):
    clock = FakeClock()
    watching = PluginWatcher(loader, clock=clock)
    first = clock.now
    while clock.now < first + 3:  # an event every 100 ms for 3 s: the debounce alone would never fire
        watching.touched("busy")
        clock.now += 0.1
        if clock.now >= first + 2.0:
            break
        assert watching._due(clock.now)[0] == []
    assert watching._due(first + 2.0)[0] == ["busy"]


def test_a_removed_file_unregisters_its_tools(watcher, loader, plugin_dir, events):
    path = write(plugin_dir / "versioned.py", VERSION.format(version="one"))
    events.wait(lambda items: len(items) == 1, "the addition")
    path.unlink()
    events.wait(lambda items: len(items) == 2, "the removal")
    assert (events.items[1].kind, events.items[1].tools) == ("removed", ())
    assert loader.tools() == () and loader.state("versioned") is None


def test_a_broken_plugin_is_reported_and_loads_once_fixed(watcher, loader, plugin_dir, events):
    path = write(plugin_dir / "versioned.py", VERSION.format(version="one").replace("-> str:", "-> str"))
    events.wait(lambda items: len(items) == 1, "the failed load")
    state = loader.state("versioned")
    assert state.status == "error" and state.line == 4 and "SyntaxError" in state.error
    write(path, VERSION.format(version="fixed"))
    events.wait(lambda items: len(items) == 2 and not items[1].error, "the fixed load")
    assert loader.state("versioned").status == "loaded" and answer(loader) == "fixed"


def test_a_change_deep_inside_a_package_reloads_the_package(watcher, loader, plugin_dir, events):
    write(plugin_dir / "deep" / "inner" / "source.py", 'VALUE = "first"\n')
    write(plugin_dir / "deep" / "inner" / "__init__.py", "")
    write(plugin_dir / "deep" / "__init__.py", VERSION.replace('"{version}"', "VALUE").replace(
        "from plugins.sdk import tool", "from plugins.sdk import tool\n    from .inner.source import VALUE"))
    events.wait(lambda items: items and items[-1].tools == ("version",), "the package's load", timeout=5)
    assert answer(loader) == "first"
    count = len(events.items)
    write(plugin_dir / "deep" / "inner" / "source.py", 'VALUE = "second"\n')
    events.wait(lambda items: len(items) > count, "the reload after the submodule changed")
    assert answer(loader) == "second"


def test_a_save_by_rename_is_seen_as_a_change(watcher, loader, plugin_dir, events):
    path = write(plugin_dir / "versioned.py", VERSION.format(version="one"))
    events.wait(lambda items: len(items) == 1, "the addition")
    temporary = write(plugin_dir / ".versioned.py.swp", VERSION.format(version="renamed"))
    temporary.replace(path)  # how many editors save: write a temporary file, then rename it over the old one
    events.wait(lambda items: len(items) == 2, "the change")
    assert events.items[1].kind == "changed" and answer(loader) == "renamed"


def test_events_are_mapped_to_the_plugin_they_concern(plugin_dir):
    def of(relative: str, is_directory: bool = False) -> str | None:
        return plugin_of(plugin_dir, str(plugin_dir / relative), is_directory=is_directory)

    assert of("words.py") == "words"
    assert of("pkg/sub/module.py") == "pkg" and of("pkg/data.json") == "pkg" and of("pkg", True) == "pkg"
    assert of("notes.txt") is None and of(".hidden.py") is None and of("words.py~") is None
    assert of("pkg/__pycache__/x.cpython-311.pyc") is None and of("pkg/.x.swp") is None and of("") is None
    assert plugin_of(plugin_dir, "/elsewhere/words.py", is_directory=False) is None
