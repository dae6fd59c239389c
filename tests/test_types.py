"""Types: mypy holds the graph, node, tool and core floors to their annotations, and every node to
the update it declares (sqlchorus/core/updates.py), whose keys have the state's own types."""

from __future__ import annotations

import hashlib
import importlib
import os
import pkgutil
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from platformdirs import user_cache_dir

from conftest import REPO
from sqlchorus import nodes
from sqlchorus.core import updates
from sqlchorus.core.list_search import ListState
from sqlchorus.core.state import SqlchorusState

CHECKED = ("graph", "nodes", "tools", "sqlchorus/core")
"""The folders ``[tool.mypy] files`` names (through the package's links, for the top three)."""

MYPY_CACHE = Path(user_cache_dir("sqlchorus")) / "mypy" / hashlib.sha256(str(REPO).encode()).hexdigest()[:12]
"""mypy's cache, per clone, in the user's cache folder rather than the repository: a warm run
takes seconds, a cold one (a fresh machine) most of a minute."""


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m mypy`` from the repository's top, with pyproject.toml's settings (and its
    ``files`` unless ``args`` names others)."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--cache-dir", str(MYPY_CACHE), *args],
        cwd=REPO, capture_output=True, text=True, check=False,
        env={**os.environ, "MYPYPATH": str(REPO)},  # a file outside the repository finds sqlchorus
    )


@pytest.mark.slow
def test_mypy_finds_no_type_errors():
    out = _mypy()
    report = out.stdout + out.stderr
    assert out.returncode == 0, f"mypy found type errors:\n{report}"
    checked = int(re.search(r"no issues found in (\d+) source files", report).group(1))
    files = {p.resolve() for folder in CHECKED for p in (REPO / folder).rglob("*.py")}
    assert checked >= len(files), f"mypy checked {checked} files; {CHECKED} hold {len(files)}:\n{report}"


def test_mypy_catches_a_node_update_of_the_wrong_type(tmp_path):
    """The check can fail: a generator's update whose ``candidates`` is not a list of
    candidates, or with a key no generator may write."""
    wrong = tmp_path / "wrong_nodes.py"
    wrong.write_text(
        "from sqlchorus.core.updates import GeneratorUpdate\n"
        "def generate_wrong() -> GeneratorUpdate:\n"
        "    return {'candidates': 'SELECT 1'}\n"
        "def generate_astray() -> GeneratorUpdate:\n"
        "    return {'answer': {'sql': 'SELECT 1'}}\n",
        encoding="utf-8",
    )
    out = _mypy(str(wrong))
    report = out.stdout + out.stderr
    assert out.returncode == 1, report
    assert re.search(r'wrong_nodes\.py:3: error: .*"candidates" has type "list\[Candidate\]".*\[typeddict-item\]', report), report
    assert re.search(r'wrong_nodes\.py:5: error: .*"answer".*"GeneratorUpdate".*\[typeddict-unknown-key\]', report), report


def _hints(typed_dict: type) -> dict[str, typing.Any]:
    return typing.get_type_hints(typed_dict)  # Annotated reducers stripped: the value's type


@pytest.mark.parametrize("update", updates.GRAPH_UPDATES + updates.LIST_UPDATES, ids=lambda u: u.__name__)
def test_every_update_key_has_its_states_type(update):
    state = SqlchorusState if update in updates.GRAPH_UPDATES else ListState
    own, theirs = _hints(update), _hints(state)
    assert not update.__required_keys__, "a node returns only the keys it writes: total=False"
    assert set(own) <= set(theirs), f"keys not in {state.__name__}"
    assert {k: own[k] for k in own} == {k: theirs[k] for k in own}


def _node_functions():
    for info in pkgutil.iter_modules(nodes.__path__):
        module = importlib.import_module(f"sqlchorus.nodes.{info.name}")
        yield info.name, module, getattr(module, info.name)


@pytest.mark.parametrize("name", [name for name, _, _ in _node_functions()])
def test_every_node_declares_its_update(name):
    module, fn = next((m, f) for n, m, f in _node_functions() if n == name)
    returns = typing.get_type_hints(fn).get("return")
    assert returns in updates.GRAPH_UPDATES + updates.LIST_UPDATES, f"{name} returns {returns}"
    if hasattr(module, "GENERATOR"):
        assert returns is updates.GeneratorUpdate
