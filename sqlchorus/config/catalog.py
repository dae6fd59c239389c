"""The generator catalog: every generator description, found at run time rather than imported.

Each generator describes itself once, with a ``GENERATOR`` object in its own module (a
:class:`sqlchorus.core.generator.Generator`). Two places hold such modules:

* the ``sqlchorus.nodes`` package, whose modules are scanned for a ``GENERATOR`` attribute;
* any installed distribution that names one under the entry point group
  ``sqlchorus.generators`` (``echo = my_package.generate_echo:GENERATOR``), so a plugin package
  adds a generator without a change to sqlchorus, as ``llm`` plugins add models.

The catalog sits on the config floor because the presets need it: a preset's generators are the
descriptions that name the preset in their ``presets``. Settings and presets may not import the
nodes, which are floors above them and import the settings themselves; so the dependency is
turned around explicitly: the catalog imports the description modules by name, with importlib,
the first time a description is asked for (never at import), and this floor reads only the
:class:`Described` attributes it needs. The floors above (the registry in
:mod:`sqlchorus.graph.generators`, and through it the graph, the cost explanation and the
scripted models) read the same catalog, so there is one discovery and one list of generators.

Discovery runs once per process; :func:`clear` forgets what it found (a test that installs a
plugin calls it before and after).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from typing import Any, Protocol, runtime_checkable

from sqlchorus.config.errors import GeneratorPluginError

NODES_PACKAGE = "sqlchorus.nodes"
"""The package whose modules are scanned for a ``GENERATOR`` description."""
ENTRY_POINT_GROUP = "sqlchorus.generators"
"""The entry point group under which other distributions name generator descriptions."""
ATTRIBUTE = "GENERATOR"


@runtime_checkable
class Described(Protocol):
    """What the config floor reads of a generator description."""

    key: str
    order: int
    presets: Mapping[str, int]


@cache
def generators() -> tuple[Any, ...]:
    """Every generator description, the shipped ones and the plugins', by ``order`` then key.

    Raises:
        ValueError: two descriptions with the same key.
        GeneratorPluginError: a plugin that cannot be loaded, or a ``GENERATOR`` attribute or
            entry point that is not a description.
    """
    found: dict[str, tuple[Any, str]] = {}

    def add(described: Any, origin: str) -> None:
        if not isinstance(described, Described):
            raise GeneratorPluginError(f"{origin} is not a generator description: {described!r}")
        seen = found.get(described.key)
        if seen is not None and seen[0] is not described:
            raise ValueError(f"Generator {described.key!r} is described twice: in {seen[1]} and in {origin}.")
        found[described.key] = (described, origin)

    package = importlib.import_module(NODES_PACKAGE)
    for info in sorted(pkgutil.iter_modules(package.__path__, f"{NODES_PACKAGE}."), key=lambda m: m.name):
        described = getattr(importlib.import_module(info.name), ATTRIBUTE, None)
        if described is not None:
            add(described, info.name)
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        origin = f"entry point {entry.name} = {entry.value}"
        try:
            loaded = entry.load()
        except Exception as e:  # a broken plugin is named, not a traceback
            raise GeneratorPluginError(
                f"The generator plugin {origin} cannot be loaded ({type(e).__name__}: {e}); "
                "fix or uninstall the package that provides it."
            ) from e
        add(loaded, origin)
    return tuple(sorted((d for d, _ in found.values()), key=lambda d: (d.order, d.key)))


def clear() -> None:
    """Forget the descriptions found, so that the next read discovers them again."""
    generators.cache_clear()


def preset_generators(preset: str) -> dict[str, int]:
    """The generators preset ``preset`` runs, with the samples each draws, in generator order."""
    return {d.key: d.presets[preset] for d in generators() if preset in d.presets}
