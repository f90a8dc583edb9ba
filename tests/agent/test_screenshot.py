"""computer_screenshot under a real Xvfb display, and without one."""

from __future__ import annotations

import base64
import os
import select
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsite.agent.tools import ToolContext, registry
from tests.needs import program

CTX = ToolContext(user_id=1, is_admin=True)  # the screenshot is an admin's tool


def free_display() -> int:
    """A display number no X server serves now, for the error when DISPLAY cannot be reached. Above the
    numbers that Xvfb -displayfd takes (it starts at 0), so no parallel run's Xvfb lands on it."""
    for number in range(90, 200):
        if not Path(f"/tmp/.X11-unix/X{number}").exists() and not Path(f"/tmp/.X{number}-lock").exists():
            return number
    raise RuntimeError("no free X display number between :90 and :199")


@pytest.fixture
def xvfb_display() -> Iterator[str]:
    """A fresh Xvfb display. Xvfb picks a free display number itself and reports it (-displayfd): a number
    chosen here could be taken by a parallel run before Xvfb starts."""
    xvfb = program("Xvfb", "apt-get install xvfb")
    read_end, write_end = os.pipe()
    process = subprocess.Popen([xvfb, "-displayfd", str(write_end), "-screen", "0", "800x600x24", "-nolisten", "tcp"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(write_end,))
    os.close(write_end)
    try:
        with os.fdopen(read_end) as reported:
            ready, _, _ = select.select([reported], [], [], 10)
            number = reported.readline().strip() if ready else ""
        if not number.isdigit():
            process.kill()
            problem = process.stderr.read().decode(errors="replace")
            raise AssertionError(f"Xvfb reported no display within 10 s: {problem}")
        yield f":{number}"
    finally:
        process.terminate()
        process.wait(5)
        process.stderr.close()


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", png[16:24])


@pytest.mark.e2e
async def test_a_screenshot_of_the_display_comes_back_as_a_png_image(xvfb_display, monkeypatch):
    monkeypatch.setenv("DISPLAY", xvfb_display)

    result = await registry.call("computer_screenshot", {}, CTX)

    assert not result.is_error, result.text
    image, text = result.content
    assert image["type"] == "image" and image["mimeType"] == "image/png"
    assert png_size(base64.b64decode(image["data"])) == (800, 600)
    assert text == {"type": "text", "text": f"Screenshot of display {xvfb_display}: 800x600 pixels."}


async def test_without_a_display_the_screenshot_says_that_display_is_not_set(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)

    result = await registry.call("computer_screenshot", {}, CTX)

    assert result.is_error
    assert "DISPLAY is not set" in result.text


@pytest.mark.e2e
async def test_a_display_that_cannot_be_reached_is_named_in_the_error(monkeypatch):
    monkeypatch.setenv("DISPLAY", f":{free_display()}")

    result = await registry.call("computer_screenshot", {}, CTX)

    assert result.is_error
    assert "Cannot capture the display :" in result.text
    assert "Cannot connect to display" in result.text


@pytest.mark.e2e
async def test_a_monitor_the_display_does_not_have_is_a_clear_error(xvfb_display, monkeypatch):
    monkeypatch.setenv("DISPLAY", xvfb_display)

    result = await registry.call("computer_screenshot", {"monitor": 5}, CTX)

    assert result.is_error
    assert "There is no monitor 5: this display has 1." in result.text
