"""The ``sqlchorus`` command: a thin shell over the library."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from sqlchorus.errors import SqlchorusError
from sqlchorus.models import ModelConfigError
from sqlchorus.settings import ROLES, SCHEMA_FORMATS, Settings
from sqlchorus.tools.database import SqlError

EXIT_NO_ANSWER = 1
EXIT_BAD_INPUT = 2


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    click.secho("Error: ", err=True, fg="red", bold=True, nl=False)
    click.echo(message, err=True)
    sys.exit(code)


@click.group()
@click.version_option(package_name="sqlchorus")
def cli() -> None:
    """sqlchorus: ask a question about a SQLite database, get checked SQL and its answer."""


def _parse_pairs(values: tuple[str, ...], what: str) -> dict[str, str]:
    pairs = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise click.BadParameter(f"{item!r} is not of the form NAME=VALUE.", param_hint=what)
        pairs[key.strip()] = value.strip()
    return pairs


@cli.command()
@click.argument("question")
@click.option("--db", "db", type=click.Path(dir_okay=False), help="SQLite database file (default: the bundled demo database).")
@click.option("--model", envvar="SQLCHORUS_MODEL", help="Chat model for every role, as provider:model (env: SQLCHORUS_MODEL).")
@click.option("--role-model", multiple=True, metavar="ROLE=MODEL", help=f"A model for one role ({', '.join(ROLES)}); repeatable.")
@click.option("--evidence", default="", help="A hint that defines terms used in the question.")
@click.option("--generator", "generators", multiple=True, metavar="NAME[=SAMPLES]", help="Generator branch to run (repeatable; default divide_conquer).")
@click.option("--fix-rounds", type=click.IntRange(0, 10), default=3, show_default=True, help="Fixer rounds per broken candidate at most.")
@click.option("--schema-format", type=click.Choice(SCHEMA_FORMATS), default="m-schema", show_default=True, help="Schema view shown to the model.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=10.0, show_default=True, help="Time budget per SQL statement, in seconds.")
@click.option("--trace-dir", default="traces", show_default=True, type=click.Path(file_okay=False), help="Folder for the run's trace file.")
@click.option("--no-trace", is_flag=True, help="Write no trace file.")
@click.option("--otlp-endpoint", help="Also send spans to this OTLP/HTTP endpoint.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def ask(question: str, db: str | None, model: str | None, role_model: tuple[str, ...], evidence: str,
        generators: tuple[str, ...], fix_rounds: int, schema_format: str, timeout: float, trace_dir: str,
        no_trace: bool, otlp_endpoint: str | None, as_json: bool) -> None:
    """Answer QUESTION with SQL checked against the database.

    Prints the chosen SQL, its result, the candidates with their status, and the cost.
    Exits 0 with an answer, 1 when no query could answer, 2 on bad input or configuration.
    """
    from sqlchorus.api import ask as run_ask

    try:
        roles = _parse_pairs(role_model, "--role-model")
        gens: dict[str, int] = {}
        for item in generators:
            name, _, samples = item.partition("=")
            gens[name.strip()] = int(samples) if samples else 1
        settings = Settings(
            model=model, models=roles, generators=gens or {"divide_conquer": 1}, fix_rounds=fix_rounds,
            schema_format=schema_format, sql_timeout_s=timeout,
            trace_dir=None if no_trace else trace_dir, otlp_endpoint=otlp_endpoint,
        )
        result = run_ask(question, db=db, evidence=evidence, settings=settings)
    except (SqlchorusError, ModelConfigError, SqlError, ValueError) as e:
        _fail(str(e))
        return
    if as_json:
        click.echo(json.dumps(result.to_dict(), default=str, ensure_ascii=False))
    else:
        _print_result(result)
    if not result.ok:
        if not as_json:
            click.secho("No answer: ", err=True, fg="red", bold=True, nl=False)
            click.echo(result.error, err=True)
        sys.exit(EXIT_NO_ANSWER)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (bytes, bytearray)):
        return f"<blob {len(value)} bytes>"
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _print_result(result: Any, *, max_rows: int = 20) -> None:
    out = Console(highlight=False)
    if result.sql:
        out.print(Syntax(result.sql, "sql", word_wrap=True))
    if result.columns:
        table = Table(*result.columns, title=f"{len(result.rows)} row(s){' (truncated)' if result.truncated else ''}")
        for row in result.rows[:max_rows]:
            table.add_row(*(_cell(v) for v in row))
        out.print(table)
        if len(result.rows) > max_rows:
            out.print(f"... {len(result.rows) - max_rows} more row(s); use --json for all of them")
    if result.candidates:
        cands = Table("candidate", "status", "rows", "fixes", "error", title="Candidates")
        for c in result.candidates:
            chosen = " *" if c["id"] == result.selection.get("chosen") else ""
            cands.add_row(c["id"] + chosen, c["status"], _cell(c.get("row_count")), str(c["fix_attempts"]), _cell(c.get("error") or ""))
        out.print(cands)
    for e in result.errors:
        out.print(f"[yellow]note[/] {e['node']}: {e['message']}")
    cost = result.cost
    out.print(
        f"cost: {cost['calls']} model call(s), {cost['input_tokens']} tokens in, {cost['output_tokens']} out, "
        f"{cost['seconds']:.2f} s ({cost['model_seconds']:.2f} s in models)"
    )
    if result.trace_path:
        out.print(f"trace: {result.trace_path}  (sqlchorus trace show {result.run_id})")


@cli.group()
def trace() -> None:
    """Read the traces of earlier runs."""


@trace.command("show")
@click.argument("run")
@click.option("--trace-dir", default="traces", show_default=True, type=click.Path(file_okay=False), help="Folder of trace files.")
def trace_show(run: str, trace_dir: str) -> None:
    """Print run RUN (its id, a unique prefix of it, or a trace file) as a tree with timings."""
    from sqlchorus.graph.trace_file import TraceNotFoundError, find_trace, load_spans, render_tree

    try:
        roots = load_spans(find_trace(run, trace_dir))
    except (TraceNotFoundError, ValueError, OSError) as e:
        _fail(str(e))
        return
    for line in render_tree(roots):
        click.echo(line)


def main() -> None:  # pragma: no cover - console entry point
    cli()
