"""Reads of plugins: this process's view of the plugin directory."""

from __future__ import annotations

from plugins.loader import PluginState
from plugins.services import plugin_loader


def plugins_list() -> list[PluginState]:
    """This process's plugins, after loading what changed on disk (plugins.loader.PluginLoader.refresh)."""
    loader = plugin_loader()
    loader.refresh()
    return loader.states()
