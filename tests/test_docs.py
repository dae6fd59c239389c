"""The documentation: a short README that opens with the two commands, a docs/ site that builds
with mkdocs --strict (no broken link), a hand-written section for every CLI command, and a
command reference generated from the command line that is not stale."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from conftest import REPO
from sqlchorus.interfaces.cli import cli

DOCS = REPO / "docs"
README_MAX_LINES = 250


def commands(group: click.Group, prefix: str = "sqlchorus") -> list[tuple[str, click.Command]]:
    found = []
    for name, command in sorted(group.commands.items()):
        path = f"{prefix} {name}"
        if isinstance(command, click.Group):
            found.extend(commands(command, path))
        else:
            found.append((path, command))
    return found


def hand_written_pages() -> dict[Path, str]:
    """The docs pages people write: every Markdown file under docs/ but the generated reference."""
    return {page: page.read_text(encoding="utf-8") for page in sorted(DOCS.rglob("*.md"))
            if "reference" not in page.relative_to(DOCS).parts}


@pytest.mark.parametrize("path,command", commands(cli), ids=[p for p, _ in commands(cli)])
def test_command_documented_and_has_help(path, command):
    heading = f"### `{path}`"
    pages = [page for page, text in hand_written_pages().items() if heading in text.splitlines()]
    assert pages, f"no page under docs/ has a section {heading}"
    assert command.help and command.help.strip()


def test_readme_opens_with_the_two_commands():
    readme = (REPO / "README.md").read_text()
    block = readme.split("```", 2)[1]
    lines = [l.split("#")[0].strip() for l in block.splitlines()[1:] if l.strip()]
    assert lines == ["make demo", "make test"]


def test_readme_is_short_and_its_links_into_docs_hold():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES, "README.md is long: move the detail into docs/"
    targets = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)]*)?\)", readme)
    assert targets, "README.md links into no docs page"
    for target in targets:
        assert (REPO / target).is_file(), f"README.md links to {target}, which does not exist"


def test_command_reference_is_current():
    """docs/reference/commands.md is what scripts/build_cli_reference.py writes from the command
    line; after changing a command or an option, run it to write the new page."""
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "build_cli_reference.py"), "--check"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    reference = (DOCS / "reference" / "commands.md").read_text(encoding="utf-8")
    for path, _ in commands(cli):
        assert f"## `{path}`" in reference.splitlines(), path


def test_docs_site_builds_strict(tmp_path: Path):
    """mkdocs build --strict: a link to a page or an anchor that does not exist, or a page left out
    of the navigation, is an error."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "commands" / "index.html").is_file()
