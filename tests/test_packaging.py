"""Everything installs under the one namespace ``sqlchorus``."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO


@pytest.mark.slow
def test_wheel_holds_only_sqlchorus(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(REPO)],
        check=True, cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("sqlchorus-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"sqlchorus", next(t for t in top if t.endswith(".dist-info"))}
    for package in ("graph", "nodes", "tools", "prompts"):
        assert f"sqlchorus/{package}/__init__.py" in names
    assert "sqlchorus/data/demo.sqlite" in names
    assert "sqlchorus/prompts/generate_divide_conquer.txt" in names


FLOORS = ("graph", "nodes", "tools", "prompts")

NAMESPACE_CHECK = """
import json, sys
import sqlchorus.graph.build, sqlchorus.nodes.select_candidate, sqlchorus.prompts, sqlchorus.tools.engines.sqlite
modules = (sqlchorus.graph.build, sqlchorus.nodes.select_candidate, sqlchorus.prompts, sqlchorus.tools.engines.sqlite)
floors = sorted({name.split(".")[0] for name in sys.modules} & set(sys.argv[1:]))
print(json.dumps({"names": [m.__name__ for m in modules], "top_level": floors}))
"""


@pytest.mark.slow
def test_namespace_imports():
    # Run from the repository's root, where graph/, nodes/, tools/ and prompts/ are importable as
    # top-level packages too: an import that reached one of them that way would load a second
    # copy of its modules beside the sqlchorus.* one, and would show here.
    out = subprocess.run([sys.executable, "-c", NAMESPACE_CHECK, *FLOORS], cwd=REPO, capture_output=True,
                         text=True, check=True)
    found = json.loads(out.stdout)
    assert found["names"] == ["sqlchorus.graph.build", "sqlchorus.nodes.select_candidate", "sqlchorus.prompts",
                              "sqlchorus.tools.engines.sqlite"]
    assert found["top_level"] == []
