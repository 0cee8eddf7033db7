"""The registry: lookups name the valid choices; the import-free catalog agrees with the imports."""

from __future__ import annotations

import pytest

from unlearnbench.registry import ARCHS, DATASETS, METHODS, STREAMS, Registry, UnknownNameError

REGISTRIES = [METHODS, STREAMS, DATASETS, ARCHS]


@pytest.mark.parametrize("registry", REGISTRIES, ids=lambda r: r.kind)
def test_catalog_read_from_source_equals_the_imported_registry(registry: Registry):
    catalog = registry.catalog()
    assert list(catalog) == registry.names()
    assert catalog == {name: registry.describe(name) for name in registry.names()}
    assert all(catalog.values()), "every entry has a one-line description"


@pytest.mark.parametrize("registry", REGISTRIES, ids=lambda r: r.kind)
def test_a_builtin_found_by_its_own_module_is_the_registered_one(registry: Registry):
    assert all(registry.builtin(name) is registry.get(name) for name in registry.builtins())


def test_unknown_name_lists_the_choices():
    with pytest.raises(UnknownNameError, match=r"unknown method 'nope'; choose one of: .*salun"):
        METHODS.get("nope")


def test_a_name_cannot_be_taken_twice():
    registry: Registry = Registry("thing", "unlearnbench.streams")
    registry.register("a")(int)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("a")(float)
