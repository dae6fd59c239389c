"""mutmut's command line, with the guards' worker scripts still runnable once mutated.

The SQLite and DuckDB guards run their statements in a worker: the module's own file, started as
a script by an interpreter in isolated mode (``-I``; SQLite's also without site packages, ``-S``).
mutmut rewrites a mutated module to import its trampoline from the ``mutmut`` package. A worker
cannot import it (SQLite's, without site packages), or imports it under a name no mutant is
named after (DuckDB's, as ``__main__``, and SQLite's file, which it loads for the helpers they
share), where mutmut's recording of which test calls what fails and the worker does not start.
So each worker script's mutated copy gets a trampoline of its own for when it runs in a worker:
the mutant mutmut switched on (``MUTANT_UNDER_TEST``, in the environment the worker inherits),
else the original. The copy a test imports as a module keeps mutmut's.

    python benchmarks/mutation/mutmut_workers.py run [mutmut's arguments]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import mutmut.__main__ as mutmut_main

WORKERS = {
    "sqlchorus/tools/engines/sqlite_guard.py": "sqlchorus.tools.engines.sqlite_guard",
    "sqlchorus/tools/engines/duckdb_guard.py": "sqlchorus.tools.engines.duckdb_guard",
}
"""Each worker script, by its path as ``[tool.mutmut]`` names it, and its module's name."""

IMPORT = "from mutmut.mutation.trampoline import wrap_in_trampoline as _mutmut_mutated, MutantDict"

WORKER_TRAMPOLINE = '''if __name__ != {module!r}:
    # In a worker (this file run as a script, or loaded from the file by another worker script):
    # the mutant the tests switched on, else the original.
    import os as _mutmut_os
    MutantDict = dict

    def _mutmut_mutated(mutants, is_classmethod=False):
        def wrap(function):
            def trampoline(*args, **kwargs):
                module, _, name = _mutmut_os.environ.get("MUTANT_UNDER_TEST", "").rpartition(".")
                chosen = mutants.get(name) if module == {module!r} else None
                return (chosen or mutants["_mutmut_orig"])(*args, **kwargs)
            return trampoline
        return wrap
else:
    ''' + IMPORT


def worker_trampoline(text: str, module: str) -> str:
    """``text``, a mutated worker script, with its trampoline import made to work in the worker.

    >>> print(worker_trampoline("x = 1\\n" + IMPORT + "\\n", "m").splitlines()[-1])
        from mutmut.mutation.trampoline import wrap_in_trampoline as _mutmut_mutated, MutantDict
    """
    if IMPORT not in text:
        return text
    return text.replace(IMPORT, WORKER_TRAMPOLINE.replace("{module!r}", repr(module)), 1)


_create = mutmut_main.create_mutants_for_file


def create_mutants_for_file(filename: Path, output_path: Path) -> Any:
    result = _create(filename, output_path)
    module = WORKERS.get(Path(filename).as_posix())
    if module and not result.unmodified and not result.error:
        path = Path(output_path)
        path.write_text(worker_trampoline(path.read_text(encoding="utf-8"), module), encoding="utf-8")
    return result


# mutmut's pool of mutant writers is forked from this process, and finds the function by name.
mutmut_main.create_mutants_for_file = create_mutants_for_file

if __name__ == "__main__":
    sys.exit(mutmut_main.cli())
