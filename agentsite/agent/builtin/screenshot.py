"""computer_screenshot: a PNG of the server's display (X11 on Linux) via mss."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import sys
from typing import Any

from agentsite.agent.tooltypes import Tool, ToolContext, ToolError, ToolResult

logger = logging.getLogger(__name__)


def capture_png(monitor: int = 1) -> tuple[bytes, tuple[int, int], str]:
    """(PNG bytes, (width, height), display name); raises ToolError naming the cause when there is no display."""
    # Optional: mss needs a display, and is imported on the first screenshot only.
    import mss
    import mss.tools

    display = os.environ.get("DISPLAY", "")
    if sys.platform.startswith("linux") and not display:
        raise ToolError("There is no display to capture: DISPLAY is not set (a headless server needs an X "
                        "server such as Xvfb, with DISPLAY pointing at it).")
    options: dict[str, Any] = {"display": display} if sys.platform.startswith("linux") else {}
    try:
        with mss.MSS(**options) as screen:
            monitors = screen.monitors
            if not 0 <= monitor < len(monitors):
                raise ToolError(f"There is no monitor {monitor}: this display has {len(monitors) - 1}.")
            shot = screen.grab(monitors[monitor])
            # to_png() returns None only when given a file to write; here it returns the bytes.
            return mss.tools.to_png(shot.rgb, shot.size), (shot.width, shot.height), display  # type: ignore[return-value]
    except mss.ScreenShotError as exc:
        raise ToolError(f"Cannot capture the display {display or '(default)'}: {exc}") from None


async def computer_screenshot(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    png, (width, height), display = await asyncio.to_thread(capture_png, arguments.get("monitor", 1))
    return ToolResult([
        {"type": "image", "data": base64.b64encode(png).decode("ascii"), "mimeType": "image/png"},
        {"type": "text", "text": f"Screenshot of display {display or '(default)'}: {width}x{height} pixels."},
    ])


SCREENSHOT_TOOL = Tool(
    name="computer_screenshot",
    description="Take a screenshot of the server's display and return it as a PNG image.",
    input_schema={
        "type": "object",
        "properties": {"monitor": {"type": "integer", "minimum": 0, "default": 1,
                                   "description": "1 for the first monitor (the default), 0 for all of them."}},
        "additionalProperties": False,
    },
    call=computer_screenshot,
    timeout=20.0,
)
