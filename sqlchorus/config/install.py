"""How to install an extra, said the way that works where sqlchorus runs from.

In a checkout installed with ``pip install -e .`` the package is not on the index under the name
a user would type; the hint there is ``pip install -e '.[extra]'`` in the checkout's folder.
"""

from __future__ import annotations

from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]


def in_checkout() -> bool:
    """Whether sqlchorus runs from a source checkout (its pyproject.toml beside the package)."""
    pyproject = _CHECKOUT / "pyproject.toml"
    try:
        return 'name = "sqlchorus"' in pyproject.read_text(encoding="utf-8")
    except OSError:
        return False


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'sqlchorus[extra]'``, or from a
    checkout ``pip install -e '.[extra]'`` in its folder."""
    if in_checkout():
        return f"pip install -e '.[{extra}]' (in {_CHECKOUT})"
    return f"pip install 'sqlchorus[{extra}]'"
