"""Loading plugins: each `.py` file or package directory in the plugin directory, imported in isolation.

Invariants:
- A plugin `<name>` is imported as the module `<namespace>.<name>` (default namespace `agentsite_plugins`),
  so it never shadows or is shadowed by an installed module, and a package plugin's relative imports work.
  Its source is compiled from the file on every load (no bytecode cache is read or written), so a change
  within the same second, or one that keeps the file's size, is never missed.
- A (re)load drops every `<namespace>.<name>` and `<namespace>.<name>.*` module first: nothing of the old
  version is reused. It then swaps the plugin's state in one assignment: a listing sees the old tools or the
  new, never a mix, and a call already running finishes on the function it started with.
- Loads are serialised by one lock per loader. A plugin that fails (syntax error, an exception or
  `sys.exit` at import, a tool whose signature cannot become a schema, a name that clashes) gets
  `status: "error"` with the message and the failing line, and offers no tools: the file on disk is what
  runs, never a hidden older version. Nothing a plugin raises at import leaves this module.
- Each load, reload or removal sends one `plugin_reloaded` signal (`plugins.signals`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import re
import sys
import threading
import traceback
import types
from dataclasses import dataclass
from datetime import UTC, datetime
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
                 tool_timeout: float = DEFAULT_TOOL_TIMEOUT_S) -> None:
        self.directory = Path(directory).resolve()
        self.namespace = namespace
        self.tool_timeout = tool_timeout
        self._lock = threading.RLock()
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

    # --- changes -----------------------------------------------------------------------------------------

    def load_all(self) -> list[PluginEvent]:
        """Load every plugin in the directory (again) and forget those that are gone."""
        with self._lock:
            names = sorted(set(discover(self.directory)) | set(self._states))
            return [event for name in names if (event := self.reload(name)) is not None]

    def reload(self, name: str) -> PluginEvent | None:
        """Bring the plugin `name` in line with the directory: load, reload or remove it. Returns the event sent
        (None when the plugin neither exists nor was known)."""
        with self._lock:
            path = discover(self.directory).get(name)
            before = self._states.get(name)
            if path is None:
                if before is None:
                    return None
                self._drop_modules(name)
                self._set(name, None)
                event = self._emit("removed", before)
                self._retry_blocked_by(name)
                return event
            state = self._load(name, path)
            self._set(name, state)
            if state.status == "error":
                logger.warning("Plugin %r failed to load: %s", name, state.error)
                audit("plugin.error", outcome="failure", target=f"plugin:{name}", details={"error": state.error[:500]})
            else:
                logger.info("Plugin %r loaded with tools %s", name, ", ".join(state.tool_names) or "(none)")
                audit("plugin.load", target=f"plugin:{name}", details={"tools": list(state.tool_names)[:50]})
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
        for _receiver, response in plugin_reloaded.send_robust(sender=type(self), loader=self, event=event):
            if isinstance(response, Exception):
                logger.error("A plugin_reloaded receiver failed: %r", response)
        return event

    def _load(self, name: str, path: Path) -> PluginState:
        now = datetime.now(UTC)
        shown = str(path)
        if not PLUGIN_NAME.match(name):
            return PluginState(name, shown, "error", error=(
                f"{path.name}: a plugin's name must start with a letter, hold only letters, digits and '_', and be "
                f"at most 64 characters long (this one has {len(name)}; rename the file)."), loaded_at=now)
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
                               blocked_by=getattr(exc, "blocked_by", ""))
        return PluginState(name, shown, "loaded", tools=tools, loaded_at=now)

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
        return list(loader.tools()) if loader is not None else []  # a tuple, replaced whole on each change
