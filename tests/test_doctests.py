"""The runnable examples in the docstrings of ``tools/`` (and of the core modules that carry
some) are run, so an example that no longer holds fails here, as sqlglot's optimizer rules' do."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import sqlchorus.tools

CORE_WITH_EXAMPLES = ("sqlchorus.core.taught", "sqlchorus.core.rate_limits")


def _modules() -> list[str]:
    found = [m.name for m in pkgutil.walk_packages(sqlchorus.tools.__path__, "sqlchorus.tools.")]
    return sorted(found) + list(CORE_WITH_EXAMPLES)


@pytest.mark.parametrize("name", _modules())
def test_the_docstring_examples_hold(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed (run python -m doctest)"


def test_the_ground_floor_has_examples():
    attempted = sum(doctest.testmod(importlib.import_module(name), verbose=False,
                                    optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE).attempted
                    for name in _modules())
    assert attempted >= 30
