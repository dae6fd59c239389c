"""One error family: every error sqlchorus defines derives from one root on the ground floor and
says its kind, exit code and HTTP status; the command line turns each into one line and its code."""

from __future__ import annotations

import importlib
import inspect
import re

import click
import grimp
import pytest
from click.testing import CliRunner

from sqlchorus.tools.errors import EXIT_BAD_INPUT, EXIT_CLUSTER, EXIT_INTERRUPTED, EXIT_NO_ANSWER, SqlchorusError

SIGNALS = {"sqlchorus.evaluation.runs.EvalInterrupted", "sqlchorus.core.deadline.Interrupted"}
"""Exceptions that carry Ctrl-C (a KeyboardInterrupt with what was kept), not an error."""


RUN_ON_IMPORT = {"sqlchorus.__main__", "sqlchorus.interfaces.studio"}
"""Modules whose import does the work (runs the command line, builds the graph): they define no
exception."""


def _defined_exceptions() -> list[type[BaseException]]:
    found = []
    for name in sorted(grimp.build_graph("sqlchorus").modules - RUN_ON_IMPORT):
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == name:
                found.append(value)
    return found


def test_every_error_of_sqlchorus_derives_from_the_one_root():
    errors = [e for e in _defined_exceptions() if f"{e.__module__}.{e.__qualname__}" not in SIGNALS]
    assert len(errors) > 30  # the guard's, the models', the checkpoints', the servers', ...
    assert [e.__qualname__ for e in errors if not issubclass(e, SqlchorusError)] == []


def test_the_root_is_on_the_ground_floor_and_every_error_says_what_it_is():
    assert SqlchorusError.__module__ == "sqlchorus.tools.errors"
    import sqlchorus
    from sqlchorus.config.errors import SqlchorusError as public

    assert sqlchorus.SqlchorusError is public is SqlchorusError
    for error in _defined_exceptions():
        if issubclass(error, SqlchorusError):
            assert re.fullmatch(r"[a-z]+(_[a-z]+)*", error.kind), error
            assert error.exit_code in (EXIT_NO_ANSWER, EXIT_BAD_INPUT, EXIT_CLUSTER, EXIT_INTERRUPTED), error
            assert 400 <= error.http_status < 600, error


def test_errors_of_a_standard_kind_are_still_caught_as_such():
    from sqlchorus.core.checkpoints import UnknownRunError
    from sqlchorus.core.models import ModelConfigError
    from sqlchorus.core.trace_file import TraceNotFoundError
    from sqlchorus.tools.sql.errors import QueryTimeoutError

    assert issubclass(ModelConfigError, ValueError) and issubclass(UnknownRunError, LookupError)
    assert issubclass(TraceNotFoundError, FileNotFoundError)
    assert (QueryTimeoutError.kind, QueryTimeoutError.http_status) == ("timeout", 400)


@pytest.mark.parametrize("error,code,said", [
    (type("NoAnswer", (SqlchorusError,), {"exit_code": EXIT_NO_ANSWER})("no candidate ran"), 1, "no candidate ran"),
    (SqlchorusError("bad option"), 2, "bad option"),
    (ValueError("not a number"), 2, "not a number"),
    (FileNotFoundError("no such file: x.json"), 2, "no such file: x.json"),
    (KeyboardInterrupt(), 130, "Interrupted."),
])
def test_the_command_line_reports_every_error_in_one_place(error, code, said):
    from sqlchorus.interfaces.cli import _reported

    @click.command()
    def failing():
        with _reported():
            raise error

    out = CliRunner().invoke(failing, [])
    assert out.exit_code == code
    assert out.output.strip() == f"Error: {said}"
    assert "Traceback" not in out.output
