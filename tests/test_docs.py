"""Every CLI command is documented in README.md and has help text."""

from __future__ import annotations

import click
import pytest

from conftest import REPO
from sqlchorus.interfaces.cli import cli


def commands(group: click.Group, prefix: str = "sqlchorus") -> list[tuple[str, click.Command]]:
    found = []
    for name, command in sorted(group.commands.items()):
        path = f"{prefix} {name}"
        if isinstance(command, click.Group):
            found.extend(commands(command, path))
        else:
            found.append((path, command))
    return found


@pytest.mark.parametrize("path,command", commands(cli), ids=[p for p, _ in commands(cli)])
def test_command_documented_and_has_help(path, command):
    readme = (REPO / "README.md").read_text()
    assert f"### `{path}`" in readme, f"README.md has no section for {path}"
    assert command.help and command.help.strip()


def test_readme_opens_with_the_two_commands():
    readme = (REPO / "README.md").read_text()
    block = readme.split("```", 2)[1]
    lines = [l.split("#")[0].strip() for l in block.splitlines()[1:] if l.strip()]
    assert lines == ["make demo", "make test"]
