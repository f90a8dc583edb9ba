"""The loader on real files: isolation, reloads, failures with their lines, clashes, packages, events."""

from __future__ import annotations

import asyncio
import shutil
import sys

from agentsite.agent.tools import ToolContext, call_tool
from tests.plugins.conftest import EXAMPLE, write

CTX = ToolContext(user_id=3)

REVERSE = '''
    from plugins.sdk import tool

    @tool
    def reverse(text: str) -> str:
        """Reverse a text."""
        return text[::-1]
'''


def tools_of(loader) -> dict:
    return {tool.name: tool for tool in loader.tools()}


async def run(loader, name: str, **arguments) -> str:
    result = await call_tool(tools_of(loader)[name], arguments, CTX)
    assert not result.is_error, result.text
    return result.text


async def test_a_file_plugin_loads_with_its_tools_under_its_source(loader, plugin_dir, events):
    write(plugin_dir / "words.py", REVERSE)
    loaded = loader.load_all()
    state = loader.state("words")
    assert (state.status, state.tool_names, state.error, state.path) == ("loaded", ["reverse"], "",
                                                                         str(plugin_dir / "words.py"))
    assert tools_of(loader)["reverse"].source == "plugin:words"
    assert await run(loader, "reverse", text="abc") == "cba"
    assert [(event.kind, event.name, event.tools) for event in loaded] == [("added", "words", ("reverse",))]
    assert events.items == loaded  # the signal carried the same event


async def test_the_example_plugin_loads_and_its_tools_answer(loader, plugin_dir):
    shutil.copy(EXAMPLE, plugin_dir / "textkit.py")
    loader.load_all()
    assert loader.state("textkit").tool_names == ["text_stats", "slugify", "convert_temperature", "whoami"]
    assert await run(loader, "slugify", text="Héllo, Wörld!  Again") == "hello-world-again"
    assert await run(loader, "text_stats", text="One two. Three!") == '{"words":3,"characters":15,"sentences":2}'
    assert await run(loader, "convert_temperature", value=212, from_unit="fahrenheit", to_unit="celsius") == \
        "100 celsius"
    assert await run(loader, "whoami") == "user 3"


async def test_a_change_reimports_from_source_even_within_the_same_second_and_size(loader, plugin_dir, events):
    path = write(plugin_dir / "answer.py", '''
        from plugins.sdk import tool

        @tool
        def answer() -> str:
            """The answer."""
            return "aaa"
    ''')
    loader.load_all()
    assert await run(loader, "answer") == "aaa"
    path.write_text(path.read_text().replace("aaa", "bbb"))  # same size, same second: a stale .pyc would win
    event = loader.reload("answer")
    assert await run(loader, "answer") == "bbb"
    assert (event.kind, event.tools) == ("changed", ("answer",))
    assert not list(plugin_dir.rglob("*.pyc"))  # nothing written into the plugin directory


async def test_a_reload_drops_the_old_modules_so_no_state_survives(loader, plugin_dir):
    write(plugin_dir / "counter" / "__init__.py", "from . import tools\n")
    write(plugin_dir / "counter" / "state.py", "calls = []\n")
    write(plugin_dir / "counter" / "tools.py", '''
        from plugins.sdk import tool
        from .state import calls

        @tool
        def count() -> int:
            """Count calls."""
            calls.append(1)
            return len(calls)
    ''')
    loader.load_all()
    old_state = sys.modules[f"{loader.namespace}.counter.state"]
    assert [await run(loader, "count") for _ in range(3)] == ["1", "2", "3"]
    loader.reload("counter")
    assert sys.modules[f"{loader.namespace}.counter.state"] is not old_state
    assert await run(loader, "count") == "1"


async def test_a_package_plugin_with_submodules_and_relative_imports(loader, plugin_dir):
    write(plugin_dir / "maths" / "__init__.py", "from .ops import double, halve  # noqa\n")
    write(plugin_dir / "maths" / "helpers.py", "def twice(n):\n    return 2 * n\n")
    write(plugin_dir / "maths" / "ops.py", '''
        from plugins.sdk import tool
        from .helpers import twice

        @tool
        def double(n: int) -> int:
            """Double a number."""
            return twice(n)

        @tool
        async def halve(n: float) -> float:
            """Halve a number."""
            return n / 2
    ''')
    loader.load_all()
    assert loader.state("maths").tool_names == ["double", "halve"]
    assert await run(loader, "double", n=21) == "42"
    assert await run(loader, "halve", n=5) == "2.5"
    write(plugin_dir / "maths" / "helpers.py", "def twice(n):\n    return n + n + 1\n")
    loader.reload("maths")
    assert await run(loader, "double", n=21) == "43"  # the submodule's new version


def test_a_plugin_does_not_shadow_an_installed_module_of_its_name(loader, plugin_dir):
    write(plugin_dir / "json.py", REVERSE)
    loader.load_all()
    import json

    assert loader.state("json").status == "loaded" and json.dumps([1]) == "[1]"
    assert sys.modules["json"] is json


def test_a_syntax_error_is_reported_with_its_line_and_offers_no_tools(loader, plugin_dir):
    write(plugin_dir / "broken.py", 'from plugins.sdk import tool\n\n\ndef f(:\n    pass\n')
    loader.load_all()
    state = loader.state("broken")
    assert state.status == "error" and state.tools == () and state.line == 4
    assert state.error.startswith("broken.py, line 4: SyntaxError:")


def test_an_exception_at_import_names_the_file_and_line_inside_a_package(loader, plugin_dir):
    write(plugin_dir / "weather" / "__init__.py", "from . import client  # noqa\n")
    write(plugin_dir / "weather" / "client.py", 'import os\n\nKEY = os.environ["WEATHER_KEY_THAT_IS_NOT_SET"]\n')
    loader.load_all()
    state = loader.state("weather")
    assert state.status == "error" and state.line == 3
    assert state.error == "weather/client.py, line 3: KeyError: 'WEATHER_KEY_THAT_IS_NOT_SET'"
    assert f"{loader.namespace}.weather" not in sys.modules and f"{loader.namespace}.weather.client" not in sys.modules


def test_sys_exit_at_import_is_a_failure_not_the_end_of_the_process(loader, plugin_dir):
    write(plugin_dir / "quitter.py", "import sys\nsys.exit(3)\n")
    loader.load_all()
    state = loader.state("quitter")
    assert state.status == "error" and state.line == 2 and "sys.exit(3)" in state.error


def test_a_signature_that_cannot_become_a_schema_names_the_decorated_line(loader, plugin_dir):
    write(plugin_dir / "loose.py", '''
        from plugins.sdk import tool


        @tool
        def anything(value) -> str:
            """No hint."""
            return str(value)
    ''')
    loader.load_all()
    state = loader.state("loose")
    assert state.status == "error" and state.line == 4
    assert state.error == "loose.py, line 4: the tool 'anything': the parameter 'value' has no type hint."


def test_a_name_clash_with_a_builtin_within_a_plugin_or_between_plugins_is_an_error(loader, plugin_dir):
    write(plugin_dir / "fetcher.py", REVERSE.replace("def reverse", "def web_fetch"))
    twin = REVERSE.replace("def reverse", "def twin")
    write(plugin_dir / "twice.py", twin + twin.split("\n", 2)[2])
    write(plugin_dir / "a_words.py", REVERSE)
    write(plugin_dir / "b_words.py", REVERSE)
    loader.load_all()
    assert "'web_fetch' is already taken by the built-in tools" in loader.state("fetcher").error
    twice = loader.state("twice")
    assert "'twin' is already taken by this plugin (twice)" in twice.error and twice.line == 8  # the second @tool
    assert loader.state("a_words").status == "loaded"
    b_words = loader.state("b_words")
    assert b_words.status == "error" and "already taken by plugin:a_words" in b_words.error and b_words.line == 3
    assert [tool.source for tool in loader.tools()] == ["plugin:a_words"]


def test_a_plugin_blocked_by_a_clash_loads_once_the_holder_lets_the_name_go(loader, plugin_dir, events):
    holder = write(plugin_dir / "a_words.py", REVERSE)
    write(plugin_dir / "b_words.py", REVERSE)
    loader.load_all()
    assert loader.state("b_words").status == "error"
    holder.unlink()
    loader.reload("a_words")
    assert loader.state("b_words").status == "loaded"
    assert [(event.kind, event.name) for event in events.items][-2:] == [("removed", "a_words"),
                                                                        ("changed", "b_words")]


def test_fixing_a_broken_plugin_loads_it(loader, plugin_dir):
    path = write(plugin_dir / "words.py", REVERSE.replace("text: str", "text: str,,"))
    loader.load_all()
    assert loader.state("words").status == "error"
    write(path, REVERSE)
    event = loader.reload("words")
    assert (event.kind, event.tools, event.error) == ("changed", ("reverse",), "")
    assert loader.state("words").status == "loaded"


def test_removal_unregisters_the_tools_and_files_that_are_not_plugins_are_ignored(loader, plugin_dir, events):
    path = write(plugin_dir / "words.py", REVERSE)
    write(plugin_dir / "notes.txt", "not a plugin")
    write(plugin_dir / "_private.py", REVERSE)
    write(plugin_dir / "data" / "readme.md", "a directory without __init__.py")
    write(plugin_dir / "bad-name.py", REVERSE)
    loader.load_all()
    assert sorted(state.name for state in loader.states()) == ["bad-name", "words"]
    assert "must start with a letter" in loader.state("bad-name").error
    path.unlink()
    event = loader.reload("words")
    assert (event.kind, event.name, event.tools) == ("removed", "words", ())
    assert loader.state("words") is None and loader.tools() == ()
    assert loader.reload("words") is None  # neither there nor known: nothing to do, no event
    assert [event.kind for event in events.items] == ["added", "added", "removed"]


# What the in-flight plugin below waits on: set by the test, read by the plugin (which imports this module).
GATE: dict[str, asyncio.Event] = {}


async def test_a_call_in_flight_finishes_on_the_old_version_while_new_calls_get_the_new(loader, plugin_dir):
    GATE.update(entered=asyncio.Event(), release=asyncio.Event())
    path = write(plugin_dir / "slow.py", '''
        from plugins.sdk import tool
        from tests.plugins.test_loader import GATE

        @tool
        async def version() -> str:
            """Which version answers."""
            GATE["entered"].set()
            await GATE["release"].wait()
            return "v1"
    ''')
    loader.load_all()
    in_flight = asyncio.create_task(run(loader, "version"))
    async with asyncio.timeout(5):
        await GATE["entered"].wait()  # the old version is running
    write(path, '''
        from plugins.sdk import tool

        @tool
        async def version() -> str:
            """Which version answers."""
            return "v2"
    ''')
    await asyncio.to_thread(loader.reload, "slow")
    assert await run(loader, "version") == "v2"
    assert not in_flight.done()
    GATE["release"].set()
    async with asyncio.timeout(5):
        assert await in_flight == "v1"


def test_a_receiver_that_raises_does_not_stop_the_load(loader, plugin_dir):
    from plugins.signals import plugin_reloaded

    def failing(**kwargs):
        raise RuntimeError("receiver bug")

    plugin_reloaded.connect(failing, weak=False)
    try:
        write(plugin_dir / "words.py", REVERSE)
        loader.load_all()
    finally:
        plugin_reloaded.disconnect(failing)
    assert loader.state("words").status == "loaded"


async def test_a_plugin_tool_has_the_registrys_time_limit(plugin_dir):
    from plugins.loader import PluginLoader

    strict = PluginLoader(plugin_dir, namespace="agentsite_test_plugins_strict", tool_timeout=0.2)
    try:
        write(plugin_dir / "sleepy.py", '''
            import asyncio
            from plugins.sdk import tool

            @tool
            async def nap() -> str:
                """Wait for ever."""
                await asyncio.Event().wait()
                return "rested"
        ''')
        strict.load_all()
        async with asyncio.timeout(10):  # only the tool's own limit can end the call
            result = await call_tool(tools_of(strict)["nap"], {}, CTX)
        assert result.is_error and "did not finish within 0.2 seconds" in result.text
    finally:
        strict.close()


def test_a_plugin_name_over_64_characters_is_refused_for_its_length(loader, plugin_dir):
    write(plugin_dir / f"{'x' * 65}.py", REVERSE)
    loader.load_all()
    error = loader.state("x" * 65).error
    assert "at most 64 characters" in error and "65" in error
