"""One small generic registry: methods, guards, streams, datasets, archs and loggers are looked up by name.

Modelled on timm's model registry: a decorator registers a factory under a name with a one-line
description (the first line of its docstring), `get` raises a `UnknownNameError` that names the valid
choices, and `names()` drives the registry-wide parametrized tests.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(ValueError):
    """A name that no registry entry carries; the message lists the valid choices."""


class Registry(Generic[T]):
    """Name -> object map; built-ins are every module of `package`, plugins come from entry points."""

    def __init__(self, kind: str, package: str, entry_point_group: str | None = None):
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._prefixes: dict[str, Callable[[str], T]] = {}
        self._package = package
        self._entry_point_group = entry_point_group
        self._loaded = False

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
        if self._loaded:
            return
        self._loaded = True
        package = importlib.import_module(self._package)
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{self._package}.{module.name}")
        if self._entry_point_group:
            for entry_point in entry_points(group=self._entry_point_group):
                self.register(entry_point.name)(entry_point.load())

    def get(self, name: str) -> T:
        self._load()
        if name in self._entries:
            return self._entries[name]
        prefix, colon, rest = name.partition(":")
        if colon and prefix in self._prefixes:
            return self._prefixes[prefix](rest)
        families = "".join(f", {prefix}:<name>" for prefix in sorted(self._prefixes))
        raise UnknownNameError(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}{families}")

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def describe(self, name: str) -> str:
        """First line of the registered object's docstring."""
        doc = (self.get(name).__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def catalog(self) -> dict[str, str]:
        """Name -> description of every entry, read from source without importing it.

        Importing the methods imports Lightning (seconds); `unlearnbench list` must stay instant,
        so built-ins are found by parsing their `@X.register("name")` decorators and docstrings.
        Plugins are imported, since only their entry point knows where they live.
        """
        entries: dict[str, str] = {}
        for folder in importlib.util.find_spec(self._package).submodule_search_locations:
            for path in sorted(Path(folder).glob("*.py")):
                for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                    if isinstance(node, ast.ClassDef | ast.FunctionDef):
                        for name in _registered_names(node):
                            entries[name] = (ast.get_docstring(node) or "").strip().split("\n")[0]
        if self._entry_point_group:
            for entry_point in entry_points(group=self._entry_point_group):
                if entry_point.name not in entries:
                    entries[entry_point.name] = self.describe(entry_point.name)
        return dict(sorted(entries.items()))

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


def _registered_names(node: ast.ClassDef | ast.FunctionDef) -> list[str]:
    return [
        decorator.args[0].value
        for decorator in node.decorator_list
        if isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr == "register"
        and decorator.args
        and isinstance(decorator.args[0], ast.Constant)
    ]


DATASETS: Registry = Registry("dataset", "unlearnbench.data")
ARCHS: Registry = Registry("arch", "unlearnbench.models")
STREAMS: Registry = Registry("stream", "unlearnbench.streams")
METHODS: Registry = Registry("method", "unlearnbench.methods", entry_point_group="unlearnbench.methods")
GUARDS: Registry = Registry("guard", "unlearnbench.guards")
LOGGERS: Registry = Registry("logger", "unlearnbench.loggers")
