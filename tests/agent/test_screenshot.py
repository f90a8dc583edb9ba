"""computer_screenshot under a real Xvfb display, and without one."""

from __future__ import annotations

import base64
import shutil
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsite.agent.tools import ToolContext, registry

CTX = ToolContext(user_id=1, is_admin=True)  # the screenshot is an admin's tool


def free_display() -> int:
    for number in range(90, 200):
        if not Path(f"/tmp/.X11-unix/X{number}").exists() and not Path(f"/tmp/.X{number}-lock").exists():
            return number
    raise RuntimeError("no free X display number between :90 and :199")


@pytest.fixture
def xvfb_display() -> Iterator[str]:
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb); CI installs it")
    number = free_display()
    process = subprocess.Popen(["Xvfb", f":{number}", "-screen", "0", "800x600x24", "-nolisten", "tcp"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    socket_path = Path(f"/tmp/.X11-unix/X{number}")
    deadline = time.monotonic() + 5
    try:
        while not socket_path.exists():
            if process.poll() is not None:
                raise AssertionError(f"Xvfb :{number} exited: {process.stderr.read().decode(errors='replace')}")
            if time.monotonic() > deadline:
                raise AssertionError(f"Xvfb :{number} did not create {socket_path} within 5 s")
            time.sleep(0.02)
        yield f":{number}"
    finally:
        process.terminate()
        process.wait(5)
        process.stderr.close()


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", png[16:24])


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


async def test_a_display_that_cannot_be_reached_is_named_in_the_error(monkeypatch):
    monkeypatch.setenv("DISPLAY", f":{free_display()}")

    result = await registry.call("computer_screenshot", {}, CTX)

    assert result.is_error
    assert "Cannot capture the display :" in result.text
    assert "Cannot connect to display" in result.text


async def test_a_monitor_the_display_does_not_have_is_a_clear_error(xvfb_display, monkeypatch):
    monkeypatch.setenv("DISPLAY", xvfb_display)

    result = await registry.call("computer_screenshot", {"monitor": 5}, CTX)

    assert result.is_error
    assert "There is no monitor 5: this display has 1." in result.text
