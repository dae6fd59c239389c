"""Build ``docs/reference/commands.md``, the command reference, from the command line itself.

It walks the click group :data:`sqlchorus.interfaces.cli.cli`, groups such as ``examples`` and
``trace`` included, and writes for every command its usage line, its help text and its options
(names, help, and the defaults, ranges, environment variables and requirements as ``--help``
shows them), with a link to the page that describes the command at length (the docs page that
has its ``### `sqlchorus X``` section). Run it after changing a command or an option; the test
suite fails while the page and the command line differ::

    python scripts/build_cli_reference.py          # rewrites the page
    python scripts/build_cli_reference.py --check  # exit 1 when it is out of date
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGE = DOCS / "reference" / "commands.md"
HEADER = """# Command reference

<!-- Written by scripts/build_cli_reference.py from the command line itself; do not edit by
hand. The test suite runs it with --check. -->

Every command and every option, as `sqlchorus COMMAND --help` prints them, generated from the
command line itself; the first section lists the commands. What each command does at length is
on its page, linked under each command; an overview is on [Commands](../commands.md). Every
command also takes `--help`.
"""


def walk(group: click.Group, ctx: click.Context) -> list[tuple[click.Command, click.Context]]:
    """Every command under ``group`` with its context, depth first, in name order; a group comes
    before its own commands."""
    found = []
    for name in sorted(group.commands):
        command = group.commands[name]
        if getattr(command, "hidden", False):
            continue
        sub = click.Context(command, info_name=name, parent=ctx)
        found.append((command, sub))
        if isinstance(command, click.Group):
            found.extend(walk(command, sub))
    return found


def escape(text: str) -> str:
    """Text as Markdown shows it literally: HTML-like ``<name>`` and the characters that would
    start emphasis or links are escaped (an ``_`` inside a word needs nothing). Code spans the
    help writes in backticks (`eval`) stay code spans, when the backticks pair up."""
    if text.count("`") % 2 == 0 and "`" in text:
        return "".join(part if part.startswith("`") else escape(part)
                       for part in re.split(r"(`[^`]*`)", text))
    text = text.replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = re.sub(r"([`*\[\]])", r"\\\1", text)
    return re.sub(r"(?<!\w)_|_(?!\w)", r"\\_", text)


def paragraphs(help_text: str) -> list[str]:
    """A command's help as click shows it: cleaned, cut at ``\\f``, paragraphs rewrapped (one
    marked ``\\b`` keeps its lines)."""
    text = inspect.cleandoc(help_text).split("\f")[0]
    out = []
    for block in re.split(r"\n\s*\n", text):
        if block.startswith("\b"):
            out.append("  \n".join(escape(line) for line in block[1:].strip("\n").splitlines()))
        elif block.strip():
            out.append(escape(" ".join(line.strip() for line in block.splitlines())))
    return out


def code(text: str) -> str:
    """``text`` as a code span, fenced with more backticks than it holds."""
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def described_at() -> dict[str, str]:
    """Where each command is described at length: its ``### `sqlchorus X``` section's page and
    anchor, from the hand-written pages (never this one)."""
    places: dict[str, str] = {}
    for page in sorted(DOCS.rglob("*.md")):
        if page == PAGE:
            continue
        for line in page.read_text(encoding="utf-8").splitlines():
            match = re.fullmatch(r"### `(sqlchorus [^`]+)`", line.strip())
            if match and match.group(1) not in places:
                rel = Path("..") / page.relative_to(DOCS)
                places[match.group(1)] = f"{rel.as_posix()}#{match.group(1).replace(' ', '-')}"
    return places


def section(command: click.Command, ctx: click.Context, places: dict[str, str]) -> str:
    path = ctx.command_path
    lines = [f"## `{path}`", "", "```text", command.get_usage(ctx), "```", ""]
    for paragraph in paragraphs(command.help or ""):
        lines += [paragraph, ""]
    if path in places:
        lines += [f"Described at length: [{path}]({places[path]}).", ""]
    if isinstance(command, click.Group):
        lines += ["Commands:", ""]
        for name in sorted(command.commands):
            sub = command.commands[name]
            lines.append(f"- [`{path} {name}`](#{path.replace(' ', '-')}-{name}): "
                         f"{escape(sub.get_short_help_str(limit=200))}")
        lines.append("")
    options = []
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option) or param.hidden or "--help" in param.opts:
            continue  # arguments are in the usage line; every command takes --help
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, text = record
        extra = ""
        if text.endswith("]") and "  [" in text:
            text, _, extra = text.rpartition("  [")
            extra = "[" + extra
        item = f"- {code(names)}"
        if text.strip():
            item += f": {escape(' '.join(text.split()))}"
        if extra:
            item += f" {code(extra)}"
        options.append(item)
    if options:
        lines += ["Options:", "", *options, ""]
    return "\n".join(lines)


def source() -> str:
    from sqlchorus.interfaces.cli import cli

    root = click.Context(cli, info_name="sqlchorus")
    places = described_at()
    commands = [(cli, root), *walk(cli, root)]
    return "\n".join([HEADER] + [section(command, ctx, places) for command, ctx in commands])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1, writing nothing, when the page is out of date")
    args = parser.parse_args(argv)
    text = source()
    current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if args.check:
        if current != text:
            print(f"{PAGE} is out of date: run python scripts/build_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    if current != text:
        PAGE.parent.mkdir(parents=True, exist_ok=True)
        PAGE.write_text(text, encoding="utf-8")
    print(f"{PAGE}: {text.count(chr(10) + '## ')} commands")
    return 0


if __name__ == "__main__":
    sys.exit(main())
