"""The plugin SDK: schemas from type hints (pydantic), validation before the call, results as text."""

from __future__ import annotations

import asyncio
import json
import threading
from enum import StrEnum
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from agentsite.agent.tools import Tool, ToolContext, ToolResult, call_tool
from plugins.sdk import PluginError, collecting, define, definition_of, tool

CTX = ToolContext(user_id=7)


def as_tool(function) -> Tool:
    definition = definition_of(function) or define(function)
    return Tool(definition.name, definition.description, definition.input_schema, definition, source="plugin:t")


async def call(function, arguments: dict) -> ToolResult:
    return await call_tool(as_tool(function), arguments, CTX)


class Colour(StrEnum):
    red = "red"
    blue = "blue"


class Box(BaseModel):
    width: int
    label: str = "box"


def test_bare_decorator_keeps_the_function_and_takes_name_and_docstring():
    @tool
    def reverse(text: str) -> str:
        """Reverse a text.

        Longer explanation."""
        return text[::-1]

    assert reverse("abc") == "cba"  # still callable as a plain function
    definition = definition_of(reverse)
    assert definition.name == "reverse"
    assert definition.description == "Reverse a text.\n\nLonger explanation."
    assert definition.input_schema == {"type": "object", "properties": {"text": {"type": "string"}},
                                       "required": ["text"], "additionalProperties": False}


def test_name_and_description_keywords_win():
    @tool(name="add_numbers", description="Add two integers.")
    async def add(a: int, b: int = 2) -> int:
        """Ignored docstring."""
        return a + b

    definition = definition_of(add)
    assert (definition.name, definition.description) == ("add_numbers", "Add two integers.")
    assert definition.input_schema["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer", "default": 2}}
    assert definition.input_schema["required"] == ["a"]


def test_models_enums_literals_defaults_and_annotated_descriptions_become_the_schema():
    @tool
    def paint(box: Box, colour: Colour = Colour.red, finish: Literal["matte", "gloss"] = "matte",
              coats: Annotated[int, Field(ge=1, le=5, description="How many coats.")] = 1,
              note: Annotated[str, "A note for the painter."] = "") -> str:
        """Paint a box."""
        return ""

    schema = definition_of(paint).input_schema
    properties = schema["properties"]
    assert properties["box"] == {"$ref": "#/$defs/Box"}
    assert schema["$defs"]["Box"]["required"] == ["width"]
    assert schema["$defs"]["Colour"]["enum"] == ["red", "blue"]
    assert properties["colour"]["default"] == "red"
    assert properties["finish"]["enum"] == ["matte", "gloss"]
    assert properties["coats"] == {"type": "integer", "minimum": 1, "maximum": 5, "default": 1,
                                   "description": "How many coats."}
    assert properties["note"]["description"] == "A note for the painter."
    assert schema["required"] == ["box"]


async def test_arguments_are_validated_and_converted_before_the_call():
    seen = []

    @tool
    def paint(box: Box, colour: Colour = Colour.red) -> str:
        """Paint a box."""
        seen.append((box, colour))
        return f"{box.label} {box.width} {colour.value}"

    assert (await call(paint, {"box": {"width": 3}, "colour": "blue"})).text == "box 3 blue"
    assert seen == [(Box(width=3), Colour.blue)] and isinstance(seen[0][1], Colour)
    bad = await call(paint, {"box": {"width": "wide"}})
    assert bad.is_error and "box/width" in bad.text
    unknown = await call(paint, {"box": {"width": 1}, "size": 2})
    assert unknown.is_error and "size" in unknown.text
    assert len(seen) == 1  # neither bad call reached the function


async def test_return_values_become_text_a_string_as_is_anything_else_as_json():
    @tool
    def as_string() -> str:
        """s"""
        return '{"not": "parsed"}'

    @tool
    def as_model() -> Box:
        """m"""
        return Box(width=2)

    @tool
    def as_list() -> list:
        """l"""
        return [1, "two", None, {"three": 3.5}]

    @tool
    def as_result() -> ToolResult:
        """r"""
        return ToolResult([{"type": "image", "data": "aGk=", "mimeType": "image/png"}])

    assert (await call(as_string, {})).text == '{"not": "parsed"}'
    assert json.loads((await call(as_model, {})).text) == {"width": 2, "label": "box"}
    assert json.loads((await call(as_list, {})).text) == [1, "two", None, {"three": 3.5}]
    assert (await call(as_result, {})).content[0]["type"] == "image"


async def test_an_exception_is_a_tool_error_and_a_result_that_is_not_json_too():
    @tool
    def broken(x: int) -> str:
        """b"""
        raise ValueError(f"cannot take {x}")

    @tool
    def opaque() -> object:
        """o"""
        return threading.Lock()

    failed = await call(broken, {"x": 4})
    assert failed.is_error and "ValueError: cannot take 4" in failed.text
    odd = await call(opaque, {})
    assert odd.is_error and "JSON" in odd.text


async def test_a_sync_tool_runs_off_the_event_loop_and_an_async_one_on_it():
    loop_thread = threading.get_ident()
    threads = {}

    @tool
    def blocking() -> str:
        """b"""
        threads["sync"] = threading.get_ident()
        return "ok"

    @tool
    async def awaiting() -> str:
        """a"""
        await asyncio.sleep(0)
        threads["async"] = threading.get_ident()
        return "ok"

    await call(blocking, {})
    await call(awaiting, {})
    assert threads["sync"] != loop_thread and threads["async"] == loop_thread


async def test_a_tool_context_parameter_receives_the_caller_and_stays_out_of_the_schema():
    @tool
    def whoami(greeting: str, ctx: ToolContext) -> str:
        """w"""
        return f"{greeting} {ctx.user_id}"

    @tool
    def maybe(ctx: ToolContext | None = None) -> str:
        """m"""
        return str(ctx.user_id)

    assert list(definition_of(whoami).input_schema["properties"]) == ["greeting"]
    assert (await call(whoami, {"greeting": "hi"})).text == "hi 7"
    assert definition_of(maybe).input_schema["properties"] == {}
    assert (await call(maybe, {})).text == "7"


@pytest.mark.parametrize(("source", "message"), [
    ("def f(*args) -> str:\n    'd'", "*args and **kwargs"),
    ("def f(**kw) -> str:\n    'd'", "*args and **kwargs"),
    ("def f(a) -> str:\n    'd'", "'a' has no type hint"),
    ("def f(a: int, /) -> str:\n    'd'", "positional-only"),
    ("def f(a: threading.Lock) -> str:\n    'd'", "cannot become a JSON schema"),
    ("def f(a: 'Missing') -> str:\n    'd'", "type hints cannot be read"),
    ("def f(a: int) -> str:\n    pass", "docstring"),
])
def test_signatures_that_cannot_become_a_schema_are_refused_with_what_to_fix(source, message):
    namespace: dict = {"threading": threading}
    exec(source, namespace)  # noqa: S102 - a test building functions from source
    with pytest.raises(PluginError, match=message.replace("*", r"\*").replace("(", r"\(")):
        tool(namespace["f"])


@pytest.mark.parametrize(("name", "message"), [("has space", "1-64 letters"), ("x" * 65, "1-64 letters"),
                                               ("web__fetch", "reserved")])
def test_tool_names_the_providers_or_the_registry_cannot_take_are_refused(name, message):
    def f() -> str:
        """d"""
        return ""

    with pytest.raises(PluginError, match=message):
        tool(name=name)(f)


def test_collecting_gathers_the_definitions_made_in_its_block_only():
    @tool
    def before() -> str:
        """b"""
        return ""

    with collecting() as found:
        @tool
        def inside() -> str:
            """i"""
            return ""

    assert [definition.name for definition in found] == ["inside"]
