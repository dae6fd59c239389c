"""The import graph of the sqlchorus package: cycles, imports that run up a floor, late imports.

Builds the graph with grimp (import-linter's engine) from the source tree at ``--root`` and
prints one JSON line:

* ``modules``, ``imports``: sqlchorus modules, and distinct module-to-module imports among them;
* ``cycles``: import cycles, counted as groups of modules that reach each other (strongly
  connected components of more than one module), with ``modules_in_cycles`` and the largest
  group's size;
* ``upward_imports``: imports from a module to one on a higher floor, the floors being the layers
  of the import-linter contract in ``pyproject.toml`` (or ``--floors FILE``, a JSON object of
  module prefix to floor number, for a tree that has no contract);
* ``late_imports``: imports of sqlchorus modules made inside a function rather than at the top
  of a module (a late import can hide a cycle from the reader).

    python benchmarks/imports.py [--root DIR] [--floors FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _graph_edges(root: Path) -> dict:
    """Run grimp in a fresh interpreter that imports sqlchorus from ``root`` (not from wherever
    it is installed) and return its modules, edges and each edge's lines."""
    code = r"""
import json, grimp
g = grimp.build_graph("sqlchorus")
edges = []
for m in sorted(g.modules):
    for imported in sorted(g.find_modules_directly_imported_by(m)):
        details = g.get_import_details(importer=m, imported=imported)
        edges.append([m, imported, [[d["line_number"], d["line_contents"]] for d in details]])
files = {}
for m in g.modules:
    spec = __import__("importlib.util").util.find_spec(m)
    files[m] = spec.origin if spec else None
print(json.dumps({"modules": sorted(g.modules), "edges": edges, "files": files}))
"""
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=root)
    return json.loads(out.stdout)


def _components(modules: list[str], edges: list[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan's algorithm, iterative)."""
    graph: dict[str, list[str]] = {m: [] for m in modules}
    for a, b in edges:
        graph[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in modules:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    group.append(top)
                    if top == node:
                        break
                out.append(sorted(group))
    return out


def _floors_from_contract(root: Path) -> dict[str, int]:
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config.get("tool", {}).get("importlinter", {}).get("contracts", [])
    layers = next((c["layers"] for c in contracts if c.get("type") == "layers"), None)
    if layers is None:
        raise SystemExit("no layers contract in pyproject.toml; pass --floors FILE")
    floors: dict[str, int] = {}
    for height, layer in enumerate(reversed(layers)):
        for module in layer.replace("|", ":").split(":"):
            floors[module.strip()] = height
    return floors


def _floor(module: str, floors: dict[str, int]) -> int | None:
    best = max((p for p in floors if module == p or module.startswith(p + ".")), key=len, default=None)
    return floors[best] if best else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the source tree (default: this checkout)")
    parser.add_argument("--floors", type=Path, help="JSON object of module prefix to floor number")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    data = _graph_edges(root)
    modules = data["modules"]
    edges = [(a, b) for a, b, _ in data["edges"]]
    floors = json.loads(args.floors.read_text()) if args.floors else _floors_from_contract(root)

    groups = [g for g in _components(modules, edges) if len(g) > 1]
    upward = []
    for a, b in edges:
        fa, fb = _floor(a, floors), _floor(b, floors)
        if fa is not None and fb is not None and fb > fa:
            upward.append(f"{a} -> {b}")
    late = 0
    for a, _, lines in data["edges"]:
        path = data["files"].get(a)
        if not path:
            continue
        source = Path(path).read_text(encoding="utf-8").splitlines()
        late += sum(1 for number, _ in lines if source[number - 1][:1].isspace())
    print(json.dumps({
        "benchmark": "imports",
        "root": str(root),
        "modules": len(modules),
        "imports": len(edges),
        "cycles": len(groups),
        "modules_in_cycles": sum(len(g) for g in groups),
        "largest_cycle": max((len(g) for g in groups), default=0),
        "upward_imports": len(upward),
        "upward": upward,
        "late_imports": late,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
