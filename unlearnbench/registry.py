"""One small generic registry: methods, guards, streams, datasets, archs and loggers are looked up by name.

Modelled on timm's model registry: a decorator registers a factory under a name with a one-line
description (the first line of its docstring), `get` raises a `UnknownNameError` that names the valid
choices, and `names()` drives the registry-wide parametrized tests.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Generic, TypeVar

from unlearnbench.errors import ConfigError

T = TypeVar("T")


class UnknownNameError(ValueError):
    """A name that no registry entry carries; the message lists the valid choices."""


class PluginImportError(ConfigError):
    """A plugin's entry point that fails to import: one line naming the plugin and its error."""


@functools.cache
def _installed(group: str) -> tuple[EntryPoint, ...]:
    """The installed entry points of `group`, read once per process: each read scans every installed distribution,
    and a suite's checks name four registries for each of its cells (a plugin installed while a process runs joins
    the next one)."""
    return tuple(entry_points(group=group))


class Registry(Generic[T]):
    """Name -> object map; built-ins are every module of `package`, plugins come from entry points."""

    def __init__(self, kind: str, package: str, entry_point_group: str | None = None):
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._prefixes: dict[str, Callable[[str], T]] = {}
        self._package = package
        self._entry_point_group = entry_point_group
        self._loaded = False
        self._definitions: list[tuple[str, ast.ClassDef | ast.FunctionDef]] | None = None

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `@METHODS.register("salun")`."""

        def decorator(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = obj
            return obj

        return decorator

    def register_prefix(self, prefix: str) -> Callable[[Callable[[str], T]], Callable[[str], T]]:
        """Decorator for an open family of names: `prefix:<rest>` resolves to `resolver(rest)`.

        `@ARCHS.register_prefix("timm")` makes `timm:<any timm model>` a valid arch; the resolver
        raises `UnknownNameError` for a `rest` it does not know. `names()` lists plain entries only.
        """

        def decorator(resolver: Callable[[str], T]) -> Callable[[str], T]:
            self._prefixes[prefix] = resolver
            return resolver

        return decorator

    def _load(self) -> None:
        """The built-ins; plugins are imported one by one, when their name is asked for (`_load_plugin`)."""
        if self._loaded:
            return
        self._loaded = True
        package = importlib.import_module(self._package)
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{self._package}.{module.name}")

    def _plugins(self) -> dict[str, EntryPoint]:
        """Entry points of the plugin group not shadowed by a built-in, by name (nothing imported)."""
        if not self._entry_point_group:
            return {}
        return {ep.name: ep for ep in _installed(self._entry_point_group) if ep.name not in self._entries}

    def _load_plugin(self, entry_point: EntryPoint) -> T:
        """Import one plugin. A broken plugin fails its own name only: every other name keeps working."""
        try:
            obj = entry_point.load()
        except Exception as error:  # any error of foreign code at import: report it, never crash the CLI
            detail = " ".join(f"{type(error).__name__}: {error}".split())
            raise PluginImportError(
                f"{self.kind} {entry_point.name!r} (plugin {entry_point.value}) failed to import: {detail}; "
                f"fix or uninstall the plugin"
            ) from error
        return self.register(entry_point.name)(obj)

    def get(self, name: str) -> T:
        self._load()
        if name in self._entries:
            return self._entries[name]
        plugin = self._plugins().get(name)
        if plugin is not None:
            return self._load_plugin(plugin)
        prefix, colon, rest = name.partition(":")
        if colon and prefix in self._prefixes:
            return self._prefixes[prefix](rest)
        families = "".join(f", {prefix}:<name>" for prefix in sorted(self._prefixes))
        raise UnknownNameError(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}{families}")

    def names(self) -> list[str]:
        """Built-ins and installed plugins (a plugin is not imported to be named)."""
        self._load()
        return sorted({*self._entries, *self._plugins()})

    def describe(self, name: str) -> str:
        """First line of the registered object's docstring."""
        doc = (self.get(name).__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def catalog(self) -> dict[str, str]:
        """Name -> description of every entry, read from source without importing it.

        Importing the methods imports Lightning (seconds); `unlearnbench list` must stay instant,
        so built-ins are found by parsing their `@X.register("name")` decorators and docstrings, and
        a plugin's docstring is read from its module's source the same way. A plugin whose source
        cannot be found or parsed is listed as broken, with the reason, instead of failing the list.
        """
        entries: dict[str, str] = {}
        for _, node in self._source_definitions():
            for name in _registered_names(node):
                entries[name] = _first_line(node)
        if self._entry_point_group:
            for entry_point in _installed(self._entry_point_group):
                if entry_point.name not in entries:
                    entries[entry_point.name] = _plugin_description(entry_point)
        return dict(sorted(entries.items()))

    def builtins(self) -> list[str]:
        """The built-in names, read from source like `catalog`: never a plugin's, installed or not."""
        return sorted(name for _, node in self._source_definitions() for name in _registered_names(node))

    def families(self) -> list[str]:
        """The prefixes of the open families of names (`timm` of `timm:<model>`), read from source like `catalog`."""
        return sorted(
            name
            for _, node in self._source_definitions()
            for name in _registered_names(node, decorator="register_prefix")
        )

    def builtin(self, name: str) -> T:
        """Built-in `name` (one of `builtins`), importing its own module only: `get` imports every built-in module,
        and a package may hold one that imports Lightning (`streams.base`), which a check made before it is
        imported (`early_checks.check_stream_size`) must not pay for."""
        if name not in self._entries:
            module = next(module for module, node in self._source_definitions() if name in _registered_names(node))
            importlib.import_module(module)
        return self._entries[name]

    def _source_definitions(self) -> list[tuple[str, ast.ClassDef | ast.FunctionDef]]:
        """The classes and functions of the built-in modules, parsed (not imported), each with its module's name;
        parsed once per process: `suite --check` names every cell's method, stream, dataset and arch, and parsing
        the sources for each cost 21 of its 31 CPU-seconds on the published suite's 324 cells."""
        if self._definitions is None:
            self._definitions = [
                (f"{self._package}.{path.stem}", node)
                for folder in importlib.util.find_spec(self._package).submodule_search_locations
                for path in sorted(Path(folder).glob("*.py"))
                for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
                if isinstance(node, ast.ClassDef | ast.FunctionDef)
            ]
        return self._definitions

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self.get(name)
        except UnknownNameError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def _first_line(node: ast.AST) -> str:
    return (ast.get_docstring(node) or "").strip().split("\n")[0]


def _plugin_description(entry_point: EntryPoint) -> str:
    """`(plugin) <first docstring line>` from the plugin's source, or `BROKEN: <why>`; imports nothing of it."""
    module_name, _, attribute = entry_point.value.partition(":")
    try:
        spec = importlib.util.find_spec(module_name.strip())
        source = Path(spec.origin).read_text() if spec and spec.origin else None
        if source is None:
            return f"BROKEN: plugin module {module_name.strip()} not found"
        tree = ast.parse(source)
    except Exception as error:  # foreign code: a syntax error or a failing parent package is a broken plugin
        return f"BROKEN: {' '.join(f'{type(error).__name__}: {error}'.split())}"
    name = attribute.strip().split(".")[0]
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name:
            return f"(plugin {entry_point.value}) {_first_line(node)}".rstrip()
    return f"(plugin {entry_point.value}) defined at run time"


def _registered_names(node: ast.ClassDef | ast.FunctionDef, decorator: str = "register") -> list[str]:
    """The names `node` is registered under by `@X.<decorator>("name")`."""
    return [
        call.args[0].value
        for call in node.decorator_list
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == decorator
        and call.args
        and isinstance(call.args[0], ast.Constant)
    ]


DATASETS: Registry = Registry("dataset", "unlearnbench.data")
ARCHS: Registry = Registry("arch", "unlearnbench.models")
STREAMS: Registry = Registry("stream", "unlearnbench.streams")
METHODS: Registry = Registry("method", "unlearnbench.methods", entry_point_group="unlearnbench.methods")
GUARDS: Registry = Registry("guard", "unlearnbench.guards")
LOGGERS: Registry = Registry("logger", "unlearnbench.loggers")
