"""Reads of plugins: this process's view of the plugin directory."""

from __future__ import annotations

from plugins.loader import PluginState
from plugins.services import plugin_loader


def plugins_list() -> list[PluginState]:
    return plugin_loader().states()
