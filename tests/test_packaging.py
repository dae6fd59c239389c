"""Everything installs under the one namespace ``sqlchorus``."""

from __future__ import annotations

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


def test_namespace_imports():
    import sqlchorus.graph.build
    import sqlchorus.nodes.select_candidate
    import sqlchorus.prompts
    import sqlchorus.tools.database

    for module in (sqlchorus.graph.build, sqlchorus.nodes.select_candidate, sqlchorus.tools.database):
        assert module.__name__.startswith("sqlchorus.")
