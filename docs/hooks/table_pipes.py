"""An MkDocs hook: a pipe escaped inside a code span of a table row (`--only timing\\|corpus`),
as GitHub needs it, is shown as a plain pipe, as GitHub shows it. Python-Markdown's tables do
not split cells at a pipe inside a code span, and would show the backslash."""

from __future__ import annotations

import re

CODE = re.compile(r"(`+)(.+?)\1")


def on_page_markdown(markdown: str, **_: object) -> str:
    lines = markdown.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("|") and "\\|" in line:
            lines[i] = CODE.sub(lambda m: m.group(1) + m.group(2).replace("\\|", "|") + m.group(1), line)
    return "\n".join(lines)
