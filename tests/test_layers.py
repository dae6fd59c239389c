"""The floors of the codebase: contracts kept, no import cycles, no hidden late imports, every
third-party import declared."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import grimp
import pytest

from conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
LAYERS = next(c for c in PYPROJECT["tool"]["importlinter"]["contracts"] if c["type"] == "layers")["layers"]

LATE_IMPORTS_ALLOWED = {"sqlchorus.interfaces.cli", "sqlchorus.evaluation.runs", "sqlchorus.evaluation.datasets",
                        "sqlchorus.evaluation.scoring"}
"""Modules that may import sqlchorus modules inside functions, each commented: the CLI, so that
``sqlchorus --help`` answers before LangGraph is imported; evaluation runs, datasets and scoring, so
that scoring a prediction file on SQLite loads neither the graph nor a SQL parser (the other
engines' guards parse)."""


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("sqlchorus")


def test_import_linter_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_every_module_is_on_a_floor(graph):
    floors = [m.strip() for layer in LAYERS for m in re.split(r"[:|]", layer)]
    loose = [
        m for m in graph.modules
        if m != "sqlchorus" and not any(m == f or m.startswith(f + ".") for f in floors)
    ]
    assert loose == [], "modules on no floor of the layers contract in pyproject.toml"


def test_no_import_cycles(graph):
    cycles = [
        f"{a} -> {b}"
        for a in sorted(graph.modules)
        for b in sorted(graph.find_modules_directly_imported_by(a))
        if graph.chain_exists(importer=b, imported=a)
    ]
    assert cycles == []


def _late_imports(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlchorus"):
                lines.append(node.lineno)
            elif isinstance(node, ast.Import) and any(a.name.startswith("sqlchorus") for a in node.names):
                lines.append(node.lineno)
    return lines


def test_no_late_imports_hide_a_dependency(graph):
    late = {}
    for module in graph.modules:
        origin = importlib.util.find_spec(module).origin
        found = _late_imports(Path(origin))
        if found:
            late[module] = found
    assert set(late) <= LATE_IMPORTS_ALLOWED, late


def _distribution(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_third_party_import_is_declared():
    project = PYPROJECT["project"]
    declared = {_distribution(r) for r in project["dependencies"]}
    extras = {
        _distribution(r)
        for name, reqs in project["optional-dependencies"].items() if name not in ("test", "bench")
        for r in reqs
    }
    external = grimp.build_graph("sqlchorus", include_external_packages=True)
    imported = {m for m in external.modules if "." not in m and m != "sqlchorus"}
    stdlib = set(sys.stdlib_module_names)
    owners = metadata.packages_distributions()
    # Optional runtimes need not be installed here; the one whose import name differs from its
    # distribution's is named.
    not_installed = {"llama_cpp": ["llama-cpp-python"]}
    undeclared = {}
    for name in sorted(imported - stdlib):
        dists = {d.lower().replace("_", "-") for d in owners.get(name) or not_installed.get(name, [name])}
        if not dists & (declared | extras):
            undeclared[name] = sorted(dists)
    assert undeclared == {}, "imported but not declared in pyproject.toml"


RUN_PATH = REPO / "sqlchorus" / "runs" / "session.py"
"""Where every run is prepared (``Session.open_run``) and run."""


def _run_steps(paths: list[Path]) -> list[str]:
    """Places in ``paths`` that build a run's trace or call log, or run a graph with a runtime
    context of their own."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name in ("RunTracer", "CallLog") or (
                    name in ("invoke", "stream", "ainvoke", "astream") and any(k.arg == "context" for k in node.keywords)):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {name}")
    return found


def test_every_run_is_prepared_in_one_place():
    # The floors below runs define these steps; above them, only the run path takes them.
    above = [p for p in sorted((REPO / "sqlchorus").rglob("*.py"))
             if p != RUN_PATH and p.relative_to(REPO / "sqlchorus").parts[0] in ("runs", "evaluation", "interfaces")]
    assert len(above) > 20
    assert _run_steps(above) == []
    assert {line.split()[-1] for line in _run_steps([RUN_PATH])} >= {"RunTracer", "CallLog", "invoke"}
