"""An example plugin: small text and unit tools. Copy this file into the plugin directory to load it
(`<data dir>/plugins/`, or AGENTSITE_PLUGIN_DIR); it is not loaded by default."""

from __future__ import annotations

import re
import unicodedata
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from plugins.sdk import ToolContext, tool


class TextStats(BaseModel):
    words: int
    characters: int
    sentences: int


@tool
def text_stats(text: Annotated[str, "The text to measure."]) -> TextStats:
    """Count the words, characters and sentences of a text."""
    sentences = [part for part in re.split(r"[.!?]+", text) if part.strip()]
    return TextStats(words=len(text.split()), characters=len(text), sentences=len(sentences))


@tool
def slugify(text: str, separator: Literal["-", "_"] = "-") -> str:
    """Turn a title into a URL slug: ASCII, lower case, words joined by the separator."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return separator.join(re.findall(r"[a-z0-9]+", ascii_text.lower()))


class Unit(StrEnum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"
    kelvin = "kelvin"


@tool(name="convert_temperature", description="Convert a temperature between celsius, fahrenheit and kelvin.")
async def convert(value: float, from_unit: Unit,
                  to_unit: Annotated[Unit, Field(description="The unit wanted.")]) -> str:
    celsius = {Unit.celsius: value, Unit.fahrenheit: (value - 32) * 5 / 9, Unit.kelvin: value - 273.15}[from_unit]
    result = {Unit.celsius: celsius, Unit.fahrenheit: celsius * 9 / 5 + 32, Unit.kelvin: celsius + 273.15}[to_unit]
    return f"{round(result, 2):g} {to_unit.value}"


@tool
def whoami(ctx: ToolContext) -> str:
    """Say which user the tool runs for (a tool can take the caller as a ToolContext parameter)."""
    return f"user {ctx.user_id}" if ctx.user_id is not None else "nobody (an anonymous caller)"
