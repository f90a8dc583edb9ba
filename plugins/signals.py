"""The internal event of a plugin (re)load: `plugin_reloaded.connect(receiver)`; the receiver gets `loader` and
`event`. Sent once per load, reload or removal, in the order of the changes, after the registry already offers
the new tools and the loader's lock is let go: from the thread that did it (the watcher's, or a request's) or
from another thread of the loader that was sending at the time. A receiver that raises is logged and does not stop
others."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from django.dispatch import Signal

plugin_reloaded = Signal()


@dataclass(frozen=True)
class PluginEvent:
    kind: Literal["added", "changed", "removed"]
    name: str
    tools: tuple[str, ...]  # the tools it offers now (none when removed or failed)
    error: str = ""  # why it failed to load (then it offers no tools); empty when it loaded or was removed
