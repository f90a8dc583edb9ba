"""The built-in tools: web_fetch, web_search, computer_screenshot (registered as the tool source "builtin")."""

from __future__ import annotations

from agentsite.agent.builtin.screenshot import SCREENSHOT_TOOL
from agentsite.agent.builtin.web_fetch import WEB_FETCH_TOOL
from agentsite.agent.builtin.web_search import WEB_SEARCH_TOOL
from agentsite.agent.tooltypes import Tool


def builtin_tools() -> list[Tool]:
    return [WEB_FETCH_TOOL, WEB_SEARCH_TOOL, SCREENSHOT_TOOL]
