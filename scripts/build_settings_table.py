"""Build ``sqlchorus/interfaces/settings_table.py``, the plain table the command line builds its
settings options from, so that ``sqlchorus --help`` and scoring do not import pydantic.

The table says what :class:`sqlchorus.config.settings.Settings` says of every field the command
line offers an option for (and of ``trace_dir``, whose variable and default ``trace show``
names): the option's shape, help, default, environment variable, choices, range and whether it
is a whole number. Run it after changing a field; the test suite fails while the two differ::

    python scripts/build_settings_table.py          # rewrites the table
    python scripts/build_settings_table.py --check  # exit 1 when it is out of date
"""

from __future__ import annotations

import argparse
import pprint
import sys
from pathlib import Path
from typing import Any

TABLE = Path(__file__).resolve().parent.parent / "sqlchorus" / "interfaces" / "settings_table.py"
HEADER = '''"""The command-line options of the settings fields, as a plain table, so that building the
commands' options (and ``sqlchorus --help``) does not import pydantic.

``OPTIONS`` is what :class:`sqlchorus.config.settings.Settings` says of each field the command
line offers (and of ``trace_dir``): its option's shape, help, default, environment variable,
choices and range. Written by ``scripts/build_settings_table.py``, which the test suite runs with
``--check``: do not edit it by hand.
"""

from __future__ import annotations

from typing import Any

'''


def build_table() -> dict[str, dict[str, Any]]:
    """The table from the Settings model, in the model's order."""
    from sqlchorus.config.settings import (
        SETTINGS_FIELDS,
        Settings,
        choices_of,
        default_of,
        env_name,
        is_whole,
        option_of,
        range_of,
    )

    table: dict[str, dict[str, Any]] = {}
    for name in SETTINGS_FIELDS:
        spec = option_of(name)
        if not spec and name != "trace_dir":
            continue
        bounds = range_of(name)
        default = default_of(name)
        table[name] = {
            "option": {k: tuple(v) if isinstance(v, list) else v for k, v in spec.items()},
            "help": Settings.help(name),
            "default": tuple(default) if isinstance(default, list) else default,
            "env": env_name(name),
            "choices": choices_of(name),
            "range": tuple(bounds) if bounds else None,
            "whole": is_whole(name),
        }
    return table


def source() -> str:
    return HEADER + "OPTIONS: dict[str, dict[str, Any]] = (\n" + pprint.pformat(
        build_table(), width=99, sort_dicts=False) + "\n)\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1, writing nothing, when the table is out of date")
    args = parser.parse_args(argv)
    text = source()
    current = TABLE.read_text(encoding="utf-8") if TABLE.exists() else ""
    if args.check:
        if current != text:
            print(f"{TABLE} is out of date: run python scripts/build_settings_table.py", file=sys.stderr)
            return 1
        return 0
    if current != text:
        TABLE.write_text(text, encoding="utf-8")
    print(f"{TABLE}: {len(build_table())} options")
    return 0


if __name__ == "__main__":
    sys.exit(main())
