"""Loading plugins: each `.py` file or package directory in the plugin directory, imported in isolation.

A plugin `<name>` is imported as `<namespace>.<name>` from its source on every load (no bytecode cache), after
every module of its old version is dropped; its state is swapped in one assignment, so a listing sees the old
tools or the new, never a mix. A plugin that fails gets `status: "error"` with the message and line and offers no
tools. Each change sends one `plugin_reloaded` signal and writes its audit row, after the loader's lock is let go.
Every process serves the version on disk: a listing (`refresh()`) reloads a plugin whose files changed once they
have settled for SETTLE_S, or at once when another process announced it loaded it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import re
import sys
import threading
import time
import traceback
import types
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal

from agentsite.agent.tools import StaticToolSource, Tool, ToolContext, ToolSource, registry
from agentsite.core.audit import audit
from plugins.sdk import PluginError, ToolDefinition, collecting
from plugins.signals import PluginEvent, plugin_reloaded

logger = logging.getLogger(__name__)

PLUGIN_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
SOURCE_PREFIX = "plugin:"
DEFAULT_TOOL_TIMEOUT_S = 30.0
BUILTIN = " builtin"  # the holder of a built-in tool's name (no plugin can be called this)
# How long a plugin's files must have stayed unchanged before a listing loads them (the watcher's debounce): a
# write in progress (a truncated file, half an editor's burst) is not loaded by a listing.
SETTLE_S = 0.5


@dataclass(frozen=True)
class Version:
    """What a plugin's files were when it was read: (relative path, mtime_ns, size, inode) of each file and
    directory. Two reads that compare equal saw the same files, unless a write kept all three within one
    tick of the file system's clock; a state loaded before its files settled is read again (`settled`)."""

    entries: tuple[tuple[str, int, int, int], ...] = ()

    @property
    def newest(self) -> float:
        """The latest change among the files, in seconds since the epoch (0 for none)."""
        return max((entry[1] for entry in self.entries), default=0) / 1e9


def version_of(path: Path) -> Version:
    """The Version of a plugin's file, or of its package directory (every file and directory in it but hidden
    ones and `__pycache__`); empty when it is gone."""
    entries: list[tuple[str, int, int, int]] = []
    try:
        stat = path.stat()
    except OSError:
        return Version()
    entries.append((".", stat.st_mtime_ns, stat.st_size, stat.st_ino))
    if path.is_dir():
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            for entry in [*dirs, *sorted(f for f in files if not f.startswith("."))]:
                full = os.path.join(root, entry)
                try:
                    stat = os.stat(full)
                except OSError:
                    continue  # removed while we walked: the next read sees the change
                entries.append((os.path.relpath(full, path), stat.st_mtime_ns, stat.st_size, stat.st_ino))
    return Version(tuple(entries))


@dataclass(frozen=True)
class PluginState:
    name: str
    path: str
    status: Literal["loaded", "error"]
    tools: tuple[Tool, ...] = ()
    error: str = ""
    line: int | None = None
    loaded_at: datetime | None = None  # when this state was reached (a load, or a failed attempt)
    blocked_by: str = ""  # the plugin whose tool name this one's clashed with: reloaded when that one changes
    version: Version = Version()  # the files this state was read from (read before the import)
    settled: bool = True  # whether they had stayed unchanged for SETTLE_S when read

    @property
    def tool_names(self) -> list[str]:
        return [tool.name for tool in self.tools]


def discover(directory: Path) -> dict[str, Path]:
    """The plugins in a directory by name: `<name>.py` files and `<name>/__init__.py` packages (a package wins
    over a file of the same name, as in Python). Hidden names and names starting with '_' are not plugins; a
    `.py` file whose name is not a Python identifier is listed, to be reported as an error.
    """
    found: dict[str, Path] = {}
    try:
        entries = sorted(directory.iterdir())
    except FileNotFoundError:
        return found
    for entry in entries:
        if entry.name.startswith((".", "_")):
            continue
        if entry.is_dir() and (entry / "__init__.py").is_file():
            found[entry.name] = entry
        elif entry.suffix == ".py" and entry.is_file() and not (entry.with_suffix("") / "__init__.py").is_file():
            found[entry.stem] = entry
    return found


class PluginLoader:
    def __init__(self, directory: Path | str, *, namespace: str = "agentsite_plugins",
                 tool_timeout: float = DEFAULT_TOOL_TIMEOUT_S, settle: float = SETTLE_S,
                 wall_clock: Callable[[], float] = time.time) -> None:
        """settle: SETTLE_S; wall_clock: seconds since the epoch, compared with the files' mtimes."""
        self.directory = Path(directory).resolve()
        self.settle = settle
        self.wall_clock = wall_clock
        self.namespace = namespace
        self.tool_timeout = tool_timeout
        self._lock = threading.RLock()
        # What a change announces (its signal, its audit row), queued in the order of the changes and sent
        # after the lock is let go, by one thread at a time (_deliver).
        self._outbox: deque[Callable[[], None]] = deque()
        self._delivering = threading.Lock()
        self._depth = 0  # how deeply the lock is held (changed only under it)
        self._told: set[str] = set()  # plugins another process announced it loaded (tell_loaded)
        self._told_lock = threading.Lock()
        self._states: dict[str, PluginState] = {}  # replaced whole on every change (copy on write)
        self._tools: tuple[Tool, ...] = ()
        self._finder = _PluginFinder(namespace, self.directory)

    # --- reads (no lock: they see one consistent snapshot) ---------------------------------------------------

    def states(self) -> list[PluginState]:
        return sorted(self._states.values(), key=lambda state: state.name)

    def state(self, name: str) -> PluginState | None:
        return self._states.get(name)

    def tools(self) -> tuple[Tool, ...]:
        return self._tools

    def is_current(self, name: str) -> bool:
        """Whether what this process holds of `name` is what the directory holds, read after it settled."""
        path = discover(self.directory).get(name)
        return not self._outdated(self._states.get(name), path, None if path is None else version_of(path))

    # --- changes -----------------------------------------------------------------------------------------

    def tell_loaded(self, name: str | None) -> None:
        """Another process loaded a version of `name` (None: of any plugin): the next listing here loads the files
        as they are if they differ from what this process holds, without waiting for them to settle. Cheap and
        thread-safe (an announcement's listener calls it)."""
        if name is None:
            try:
                names = {*self._states, *discover(self.directory)}
            except OSError:  # the next listing reads the directory again
                names = set(self._states)
        else:
            names = {name}
        with self._told_lock:
            self._told = self._told | names

    def _forget_told(self, name: str) -> None:
        with self._told_lock:
            self._told = self._told - {name}

    def refresh(self) -> list[PluginEvent]:
        """Reload every plugin whose files changed (added, edited, removed) and have stayed unchanged since
        for `settle` seconds: what a listing calls first, so that this process serves what another process
        already lists. A stat of each plugin's files when nothing changed; the loads, under the lock."""
        stale = self._stale()
        if not stale:
            return []
        with self._changing():  # another thread may have reloaded them meanwhile: decide again under the lock
            return [event for name in self._stale() if (event := self.reload(name)) is not None]

    def _stale(self) -> list[str]:
        found = discover(self.directory)
        states = self._states
        now = self.wall_clock()
        told = self._told
        stale = []
        for name in sorted(set(found) | set(states) | told):
            path = found.get(name)
            current = version_of(path) if path is not None else None
            state = states.get(name)
            if not self._outdated(state, path, current):
                if name in told:  # what was announced is what this process holds: a later write must settle
                    self._forget_told(name)
                continue
            if name in told and (state is None or current != state.version):
                stale.append(name)  # another process already serves what is on disk now
                continue
            # A removal settles with the directory (whose mtime a deletion moves), a change with the files.
            changed = current.newest if current is not None else _mtime(self.directory)
            if self._settled(changed, now):
                stale.append(name)
        return stale

    @staticmethod
    def _outdated(state: PluginState | None, path: Path | None, current: Version | None) -> bool:
        if state is None:
            return path is not None
        if path is None:
            return True
        return current != state.version or not state.settled

    def _settled(self, changed: float, now: float) -> bool:
        # A change dated in the future (a clock set back, another host's clock on shared storage) counts as
        # settled: waiting for it could take forever.
        return now - changed >= self.settle or changed - now > self.settle

    def load_all(self) -> list[PluginEvent]:
        """Load every plugin in the directory (again) and forget those that are gone."""
        with self._changing():
            names = sorted(set(discover(self.directory)) | set(self._states))
            return [event for name in names if (event := self.reload(name)) is not None]

    def reload(self, name: str) -> PluginEvent | None:
        """Bring the plugin `name` in line with the directory: load, reload or remove it. Returns the event sent
        (None when the plugin neither exists nor was known)."""
        with self._changing():
            path = discover(self.directory).get(name)
            before = self._states.get(name)
            if path is None:
                self._forget_told(name)
                if before is None:
                    return None
                self._drop_modules(name)
                self._set(name, None)
                event = self._emit("removed", before)
                self._retry_blocked_by(name)
                return event
            self._forget_told(name)
            state = self._load(name, path)
            self._set(name, state)
            if state.status == "error":
                logger.warning("Plugin %r failed to load: %s", name, state.error)
                self._outbox.append(partial(audit, "plugin.error", outcome="failure", target=f"plugin:{name}",
                                            details={"error": state.error[:500]}))
            else:
                logger.info("Plugin %r loaded with tools %s", name, ", ".join(state.tool_names) or "(none)")
                self._outbox.append(partial(audit, "plugin.load", target=f"plugin:{name}",
                                            details={"tools": list(state.tool_names)[:50]}))
            event = self._emit("changed" if before is not None else "added", state)
            self._retry_blocked_by(name)
            return event

    def _retry_blocked_by(self, name: str) -> None:
        """Plugins that failed on a tool name this one held may load now that it changed or went away."""
        for other in [state.name for state in self._states.values() if state.blocked_by == name]:
            self.reload(other)

    def close(self) -> None:
        """Unload every plugin and stop resolving this loader's namespace (tests; a process keeps its loader)."""
        with self._lock:
            for name in list(self._states):
                self._drop_modules(name)
            self._states, self._tools = {}, ()
            self._finder.uninstall()
            sys.modules.pop(self.namespace, None)

    # --- internals ---------------------------------------------------------------------------------------

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """The loader's lock; what the changes made under it announce is sent after it is let go. An audit row
        is a database write, which can wait seconds for SQLite's write lock, and a receiver may be slow: a
        listing that must load a change (refresh) never waits behind them, only behind another load."""
        with self._lock:
            self._depth += 1  # reloads nest (a clash retries others): deliver when the outermost lets go
            try:
                yield
            finally:
                self._depth -= 1
                outermost = self._depth == 0
        if outermost:
            self._deliver()

    def _deliver(self) -> None:
        # A thread that finds another delivering leaves its items to it: that one looks at the queue again
        # after letting go, so nothing queued is left behind.
        while self._outbox:
            if not self._delivering.acquire(blocking=False):
                return
            try:
                while self._outbox:
                    self._outbox.popleft()()
            finally:
                self._delivering.release()

    def _set(self, name: str, state: PluginState | None) -> None:
        states = dict(self._states)
        if state is None:
            states.pop(name, None)
        else:
            states[name] = state
        tools = tuple(tool for key in sorted(states) for tool in states[key].tools)
        self._states, self._tools = states, tools

    def _emit(self, kind: str, state: PluginState) -> PluginEvent:
        removed = kind == "removed"
        event = PluginEvent(kind=kind, name=state.name, tools=() if removed else tuple(state.tool_names),
                            error="" if removed else state.error)
        self._outbox.append(partial(self._send, event))
        return event

    def _send(self, event: PluginEvent) -> None:
        for _receiver, response in plugin_reloaded.send_robust(sender=type(self), loader=self, event=event):
            if isinstance(response, Exception):
                logger.error("A plugin_reloaded receiver failed: %r", response)

    def _load(self, name: str, path: Path) -> PluginState:
        now = datetime.now(UTC)
        shown = str(path)
        # Read before the import: a write during it leaves the state outdated, to be loaded again.
        version = version_of(path)
        read = {"version": version, "settled": self._settled(version.newest, self.wall_clock())}
        if not PLUGIN_NAME.match(name):
            return PluginState(name, shown, "error", error=(
                f"{path.name}: a plugin's name must start with a letter, hold only letters, digits and '_', and be "
                f"at most 64 characters long (this one has {len(name)}; rename the file)."), loaded_at=now, **read)
        self._finder.install()
        self._drop_modules(name)
        module_name = f"{self.namespace}.{name}"
        try:
            with collecting() as found:
                importlib.import_module(module_name)
            tools = self._tools_of(name, found)
        except (Exception, SystemExit) as exc:  # a boundary: a plugin's import can raise anything
            self._drop_modules(name)
            message, line = self._describe(exc, path)
            return PluginState(name, shown, "error", error=message, line=line, loaded_at=now,
                               blocked_by=getattr(exc, "blocked_by", ""), **read)
        return PluginState(name, shown, "loaded", tools=tools, loaded_at=now, **read)

    def _tools_of(self, name: str, found: list[ToolDefinition]) -> tuple[Tool, ...]:
        taken = {tool.name: other for other, state in self._states.items() if other != name for tool in state.tools}
        builtin = registry.source("builtin")
        if isinstance(builtin, StaticToolSource):
            for tool in builtin.tools():
                taken.setdefault(tool.name, BUILTIN)
        tools: list[Tool] = []
        for definition in found:
            holder = taken.get(definition.name)
            if holder is not None:
                shown = {BUILTIN: "the built-in tools", name: "this plugin (twice)"}.get(holder, SOURCE_PREFIX + holder)
                raise _AtLine(f"The tool name {definition.name!r} is already taken by {shown}; give it another "
                              "with @tool(name=...).", definition.line,
                              blocked_by="" if holder in (BUILTIN, name) else holder)
            taken[definition.name] = name
            tools.append(Tool(definition.name, definition.description, definition.input_schema, definition,
                              source=SOURCE_PREFIX + name, timeout=self.tool_timeout))
        return tuple(tools)

    def _describe(self, exc: BaseException, path: Path) -> tuple[str, int | None]:
        """The error message a plugin author reads: where (file, line), what, and for a bug its type."""
        if isinstance(exc, _AtLine):
            return self._where(path, exc.line) + str(exc), exc.line
        if isinstance(exc, SyntaxError) and exc.filename:
            detail = f"SyntaxError: {exc.msg}"
            return self._where(Path(exc.filename), exc.lineno) + detail, exc.lineno
        frame = None
        for candidate in traceback.extract_tb(exc.__traceback__):
            if _inside(Path(candidate.filename), path):  # the plugin's file, or a file of its package
                frame = candidate
        text = str(exc) if isinstance(exc, PluginError) else f"{type(exc).__name__}: {exc}"
        if isinstance(exc, SystemExit):
            text = f"the plugin called sys.exit({exc.code!r}) while being imported"
        if frame is None:
            return f"{path.name}: {text}", None
        return self._where(Path(frame.filename), frame.lineno) + text, frame.lineno

    def _where(self, file: Path, line: int | None) -> str:
        try:
            shown = file.resolve().relative_to(self.directory)
        except ValueError:
            shown = file
        return f"{shown}, line {line}: " if line else f"{shown}: "

    def _drop_modules(self, name: str) -> None:
        prefix = f"{self.namespace}.{name}"
        for module in [key for key in sys.modules if key == prefix or key.startswith(prefix + ".")]:
            sys.modules.pop(module, None)
        importlib.invalidate_caches()


class _AtLine(Exception):
    def __init__(self, message: str, line: int | None, *, blocked_by: str = "") -> None:
        super().__init__(message)
        self.line = line
        self.blocked_by = blocked_by


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime_ns / 1e9
    except OSError:
        return 0.0


def _inside(file: Path, root: Path) -> bool:
    try:
        resolved = file.resolve()
    except OSError:
        return False
    return resolved == root or root in resolved.parents


class _FreshSourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles from the source every time: no .pyc is read (a stale one could hide an edit made within the
    same second) and none is written into the plugin directory."""

    def get_code(self, fullname: str) -> types.CodeType:
        path = self.get_filename(fullname)
        return compile(self.get_data(path), path, "exec", dont_inherit=True)


class _PluginFinder(importlib.abc.MetaPathFinder):
    """Resolves `<namespace>.<plugin>[.<submodule>...]` to files under the plugin directory, and nothing else."""

    def __init__(self, namespace: str, directory: Path) -> None:
        self.namespace = namespace
        self.directory = directory

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)
        if self.namespace not in sys.modules:
            package = types.ModuleType(self.namespace, "The plugins this process has loaded (see plugins.loader).")
            package.__path__ = []  # a package with no files of its own: its children come from find_spec
            sys.modules[self.namespace] = package

    def uninstall(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.namespace + "."):
            return None
        parts = fullname.split(".")[len(self.namespace.split(".")):]
        base = self.directory.joinpath(*parts[:-1])
        leaf = parts[-1]
        package = base / leaf / "__init__.py"
        if package.is_file():
            return importlib.util.spec_from_file_location(
                fullname, package, loader=_FreshSourceLoader(fullname, str(package)),
                submodule_search_locations=[str(base / leaf)])
        module = base / f"{leaf}.py"
        if module.is_file():
            return importlib.util.spec_from_file_location(fullname, module,
                                                          loader=_FreshSourceLoader(fullname, str(module)))
        return None


class PluginToolSource(ToolSource):
    """Every loaded plugin's tools (each `Tool.source` is `plugin:<name>`), from the loader `get_loader` returns."""

    name = "plugins"

    def __init__(self, get_loader) -> None:
        self._get_loader = get_loader

    async def list_tools(self, ctx: ToolContext) -> list[Tool]:
        return self.list_tools_now(ctx)

    def list_tools_now(self, ctx: ToolContext) -> list[Tool]:
        loader = self._get_loader()
        if loader is None:
            return []
        loader.refresh()  # what another process already lists, this one serves too
        return list(loader.tools())  # a tuple, replaced whole on each change
