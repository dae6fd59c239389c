"""The generator branches a graph can run, by name, with what each costs in model calls.

Nothing here names a generator. Each describes itself once, with a ``GENERATOR`` object
(:class:`sqlchorus.core.generator.Generator`) in its own node module or in a plugin's module
named under the entry point group ``sqlchorus.generators``; :mod:`sqlchorus.config.catalog`
discovers them, and this registry serves them to the graph assembly, the cost explanation and
the debugger, with each search subgraph's import path resolved to its function.
``Settings.generators`` chooses which branches a graph has and how many samples each draws.

:data:`GENERATORS` is a live view: it reads the catalog on each use, so a generator the catalog
finds later (a plugin installed in a test, after :func:`sqlchorus.config.catalog.clear`) is there
too.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from sqlchorus.config import catalog
from sqlchorus.config.errors import GeneratorPluginError
from sqlchorus.config.settings import SettingsError
from sqlchorus.core.generator import Generator

V = TypeVar("V")

_registry: tuple[tuple[Any, ...], dict[str, Generator]] = ((), {})


def registry() -> dict[str, Generator]:
    """The discovered generators by key, in their order.

    Raises:
        GeneratorPluginError: a discovered description that is not a :class:`Generator`, or
            whose search subgraph's import path does not resolve.
    """
    global _registry
    described = catalog.generators()
    if _registry[0] is not described:
        found: dict[str, Generator] = {}
        for generator in described:
            if not isinstance(generator, Generator):
                raise GeneratorPluginError(
                    f"Generator {generator.key!r} is not described by sqlchorus.core.generator.Generator.")
            if isinstance(generator.search, str):
                try:
                    generator = replace(generator, search=pkgutil.resolve_name(generator.search))
                except (ImportError, AttributeError, ValueError) as e:
                    raise GeneratorPluginError(
                        f"Generator {generator.key!r} names a search {generator.search!r} that cannot be "
                        f"imported ({type(e).__name__}: {e}).") from e
            found[generator.key] = generator
        _registry = (described, found)
    return _registry[1]


class LiveView(Mapping[str, V]):
    """A read-only mapping worked out afresh from the discovered generators at each use."""

    def __init__(self, make: Callable[[], Mapping[str, V]]):
        self._make = make

    def __getitem__(self, key: str) -> V:
        return self._make()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._make())

    def __len__(self) -> int:
        return len(self._make())

    def __repr__(self) -> str:
        return repr(dict(self._make()))


GENERATORS: Mapping[str, Generator] = LiveView(registry)
"""Every generator by key, in generator order."""


def enabled(generators: dict[str, int]) -> list[tuple[str, Generator, int]]:
    """``(name, generator, samples)`` for each generator named in settings, in settings order.

    Raises:
        SettingsError: a name that no generator registered (a ``ValueError`` too).
    """
    known = registry()
    unknown = [name for name in generators if name not in known]
    if unknown:
        raise SettingsError([("generators", "generators",
                              f"Unknown generator(s) {unknown}; available: {', '.join(sorted(known))}.")])
    return [(name, known[name], samples) for name, samples in generators.items()]
