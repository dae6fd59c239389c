"""The ``sqlchorus`` command: a thin shell over the library."""

from __future__ import annotations

import json
import sqlite3
import sys
from typing import Any

import click
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from sqlchorus.errors import SqlchorusError
from sqlchorus.models import ModelConfigError
from sqlchorus.presets import PRESET_NAMES
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


def _ask_options(fn: Any) -> Any:
    """The options ``ask`` and ``demo`` share."""
    options = [
        click.option("--db", "db", type=click.Path(dir_okay=False), help="SQLite database file (default: the bundled demo database)."),
        click.option("--model", envvar="SQLCHORUS_MODEL", help="Chat model for every role, as provider:model (env: SQLCHORUS_MODEL)."),
        click.option("--role-model", multiple=True, metavar="ROLE=MODEL", help=f"A model for one role ({', '.join(ROLES)}); repeatable."),
        click.option("--evidence", default="", help="A hint that defines terms used in the question."),
        click.option("--generator", "generators", multiple=True, metavar="NAME[=SAMPLES]", help="Generator branch to run (repeatable; default divide_conquer)."),
        click.option("--preset", type=click.Choice(PRESET_NAMES), default=None, help="Generators, selection and fixing chosen by cost: fast, balanced or full (explicit options win)."),
        click.option("--fix-rounds", type=click.IntRange(0, 10), default=3, show_default=True, help="Fixer rounds per broken candidate at most."),
        click.option("--schema-format", type=click.Choice(SCHEMA_FORMATS), default="m-schema", show_default=True, help="Schema view shown to the model."),
        click.option("--timeout", type=click.FloatRange(0.1, 3600), default=10.0, show_default=True, help="Time budget per SQL statement, in seconds."),
        click.option("--trace-dir", default="traces", show_default=True, type=click.Path(file_okay=False), help="Folder for the run's trace file."),
        click.option("--no-trace", is_flag=True, help="Write no trace file."),
        click.option("--otlp-endpoint", help="Also send spans to this OTLP/HTTP endpoint."),
        click.option("--no-cache", is_flag=True, help="Neither read nor write the persistent model response cache."),
        click.option("--cache-path", type=click.Path(dir_okay=False), help="Response cache file (default: responses.sqlite in $SQLCHORUS_CACHE or ~/.cache/sqlchorus)."),
        click.option("--prices", "prices_file", type=click.Path(dir_okay=False), envvar="SQLCHORUS_PRICES", help="JSON or TOML file of model prices, USD per million tokens (env: SQLCHORUS_PRICES)."),
        click.option("--model-timeout", type=click.FloatRange(1, 3600), default=120.0, show_default=True, help="Time budget per model call, in seconds."),
        click.option("--retries", type=click.IntRange(0, 10), default=2, show_default=True, help="Retries of a model call after a transient error."),
        click.option("--rate-limit", type=click.FloatRange(0.001, 1000), default=None, help="Most model requests per second."),
        click.option("--no-grammar", is_flag=True, help="Do not constrain local models with the schema grammar."),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _explain_preset(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    from sqlchorus.presets import explain_preset

    click.echo(explain_preset(value))
    ctx.exit(0)


@cli.command()
@click.argument("question")
@click.option("--explain-preset", type=click.Choice(PRESET_NAMES), is_eager=True, expose_value=False,
              callback=_explain_preset, help="Print what a preset runs and its expected model calls, then exit.")
@_ask_options
def ask(question: str, **options: Any) -> None:
    """Answer QUESTION with SQL checked against the database.

    Prints the chosen SQL, its result, the candidates with their status, and the cost.
    Exits 0 with an answer, 1 when no query could answer, 2 on bad input or configuration.
    """
    _ask(question, **options)


@cli.command()
@click.argument("question", default="How many customers do we have?")
@_ask_options
def demo(question: str, **options: Any) -> None:
    """Answer QUESTION (a sample one by default) over the bundled demo database.

    Uses the model named by --model or SQLCHORUS_MODEL. With none, it runs offline with
    local:smollm2, a 135M-parameter toy model, and says so before the answer.
    """
    if not options.get("model") and not options.get("role_model"):
        from sqlchorus.local_model import SMOLLM2_NOTICE

        click.secho(SMOLLM2_NOTICE, fg="yellow", err=True)
        options["model"] = "local:smollm2"
    _ask(question, **options)


def _keep_explicit(settings: Settings, values: dict[str, Any]) -> None:
    """Options typed on the command line win over a preset, even when they equal the default."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    for name, value in values.items():
        if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            setattr(settings, name, value)


def _ask(question: str, *, db: str | None, model: str | None, role_model: tuple[str, ...], evidence: str,
         generators: tuple[str, ...], preset: str | None, fix_rounds: int, schema_format: str, timeout: float, trace_dir: str,
         no_trace: bool, otlp_endpoint: str | None, no_cache: bool, cache_path: str | None,
         prices_file: str | None, model_timeout: float, retries: int, rate_limit: float | None,
         no_grammar: bool, as_json: bool) -> None:
    from sqlchorus.api import ask as run_ask

    try:
        roles = _parse_pairs(role_model, "--role-model")
        gens: dict[str, int] = {}
        for item in generators:
            name, _, samples = item.partition("=")
            gens[name.strip()] = int(samples) if samples else 1
        settings = Settings(
            model=model, models=roles, generators=gens or {"divide_conquer": 1}, fix_rounds=fix_rounds,
            preset=preset,
            schema_format=schema_format, sql_timeout_s=timeout,
            trace_dir=None if no_trace else trace_dir, otlp_endpoint=otlp_endpoint,
            cache=not no_cache, cache_path=cache_path, prices_file=prices_file,
            model_timeout_s=model_timeout, model_retries=retries, rate_limit=rate_limit,
            grammar=not no_grammar,
        )
        if preset:
            _keep_explicit(settings, {"fix_rounds": fix_rounds, "schema_format": schema_format})
        result = run_ask(question, db=db, evidence=evidence, settings=settings)
    except (SqlchorusError, ModelConfigError, SqlError, ValueError, OSError) as e:
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
    cached = f" ({cost['cached_calls']} from cache)" if cost["cached_calls"] else ""
    out.print(
        f"cost: ${cost['cost_usd']:.6f}, {cost['calls']} model call(s){cached}, {cost['input_tokens']} tokens in, "
        f"{cost['output_tokens']} out, {cost['seconds']:.2f} s ({cost['model_seconds']:.2f} s in models)"
    )
    if len(cost["by_node"]) > 1 or cost["cost_usd"]:
        out.print("  " + ", ".join(f"{node} ${c['cost_usd']:.6f}" for node, c in cost["by_node"].items()))
    if cost["unpriced_models"]:
        out.print(f"  no price for {', '.join(cost['unpriced_models'])} (counted at $0; see --prices)")
    if result.trace_path:
        out.print(f"trace: {result.trace_path}  (sqlchorus trace show {result.run_id})")


@cli.command("select")
@click.option("--candidates", "candidates_file", required=True, type=click.Path(exists=True, dir_okay=False), help="JSON Lines file: one {db, question, evidence, candidates} object a line.")
@click.option("--model", envvar="SQLCHORUS_SELECTION_MODEL", help="Selection model, as provider:model (env: SQLCHORUS_SELECTION_MODEL); none: fall back to the largest cluster.")
@click.option("--pairwise", type=click.Choice(["never", "low-confidence", "always"]), default="low-confidence", show_default=True, help="When the selection model compares candidates pairwise.")
@click.option("--max-clusters", type=click.IntRange(0, 50), default=4, show_default=True, help="Result clusters compared pairwise at most.")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), help="Write the JSON lines here instead of standard output.")
def select_command(candidates_file: str, model: str | None, pairwise: str, max_clusters: int, out_file: str | None) -> None:
    """Choose one SQL query per question among candidates from any source.

    Runs each candidate on its database, clusters them by result, votes, and when the vote is not
    confident asks the selection model to compare candidates pairwise (CHASE-SQL). Prints one
    JSON line per question: the chosen SQL, its index, its cluster, the votes and the confidence.
    Exits 2 on bad input, 1 when some question had no candidate that ran.
    """
    from sqlchorus.select import select_file

    try:
        settings = Settings(trace_dir=None, pairwise=pairwise, pairwise_max_clusters=max_clusters)
        sink = open(out_file, "w", encoding="utf-8") if out_file else None
    except (ValueError, OSError) as e:
        _fail(str(e))
        return
    unanswered = 0
    try:
        for result in select_file(candidates_file, model=model, settings=settings):
            unanswered += result.get("sql") is None
            line = json.dumps(result, default=str, ensure_ascii=False)
            if sink:
                sink.write(line + "\n")
            else:
                click.echo(line)
    except (SqlchorusError, ModelConfigError) as e:
        _fail(str(e))
    except (UnicodeDecodeError, OSError) as e:
        _fail(f"Cannot read {candidates_file} as JSON Lines text: {e}")
    finally:
        if sink:
            sink.close()
    if unanswered:
        sys.exit(EXIT_NO_ANSWER)


@cli.command()
@click.option("--db", "db", required=True, type=click.Path(dir_okay=False), help="SQLite database file to index.")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Folder of value index files (default: ~/.cache/sqlchorus/values).")
@click.option("--max-values", type=click.IntRange(1), default=100_000, show_default=True, help="Distinct values read per column at most.")
@click.option("--rebuild", is_flag=True, help="Build again even if an index of this database content exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the index's figures as one JSON object.")
def index(db: str, cache_dir: str | None, max_values: int, rebuild: bool, as_json: bool) -> None:
    """Build the value index of a database, once per database content.

    The index (MinHash LSH over every distinct text value, with exact and word lookups) is stored
    in a cache folder keyed by the database's content and reused until the database changes;
    `ask` builds it on first use. Columns that were skipped are listed with the reason.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from sqlchorus.tools.database import GuardedDatabase
    from sqlchorus.tools.value_index import ValueIndex

    try:
        database = GuardedDatabase(db)
    except SqlError as e:
        _fail(str(e))
        return
    with database, Progress(
        TextColumn("indexing values"), BarColumn(), MofNCompleteColumn(), TextColumn("columns"),
        TimeElapsedColumn(), console=Console(stderr=True), disable=as_json, transient=True,
    ) as bar:
        task = bar.add_task("index", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        try:
            if rebuild:
                built = ValueIndex.build(database, cache_dir=cache_dir, max_values_per_column=max_values, progress=progress)
            else:
                built = ValueIndex.load_or_build(database, cache_dir, max_values_per_column=max_values, progress=progress)
        except (OSError, sqlite3.Error, SqlError) as e:
            _fail(f"Cannot build the value index: {getattr(e, 'message', None) or e}")
            return
    with built:
        stats = dict(built.stats, path=str(built.path), skipped_columns=built.skipped)
    if as_json:
        click.echo(json.dumps(stats, default=str))
        return
    origin = "reused from the cache" if stats["from_cache"] else f"built in {stats['build_seconds']:.2f} s"
    click.echo(
        f"{stats['values']} distinct values from {stats['columns']} columns, {origin}; "
        f"{stats['bytes_on_disk'] / 1e6:.1f} MB at {stats['path']}"
    )
    for skip in built.skipped:
        click.echo(f"  skipped {skip['table']}.{skip['column']}: {skip['reason']}")


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


@cli.command("eval")
@click.option("--dataset", "dataset_name", required=True, metavar="spider-dev|bird-dev|bird-mini-dev|PATH", help="A built-in benchmark (read from SQLCHORUS_DATA) or a dataset JSON file.")
@click.option("--limit", type=click.IntRange(0), default=None, help="Evaluate only the first N questions.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True, help="Questions run at the same time (threads); also the scoring processes.")
@click.option("--preset", help="A preset of generators and selection (fast, balanced, full).")
@click.option("--model", envvar="SQLCHORUS_MODEL", help="Chat model for every role, as provider:model (env: SQLCHORUS_MODEL).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Run folder (default: evals/<dataset>-<timestamp>, or evals/<run-name>).")
@click.option("--run-name", help="Name the run folder evals/NAME, so the same command resumes it.")
@click.option("--no-resume", is_flag=True, help="Start over instead of keeping the questions already recorded in the run folder.")
@click.option("--predictions", type=click.Path(dir_okay=False), help="Score this prediction file (Spider pred.txt or BIRD JSON) without running the graph.")
@click.option("--no-trace", is_flag=True, help="Write no per-question trace files (default: <run folder>/traces).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the persistent model response cache.")
@click.option("--prices", "prices_file", type=click.Path(dir_okay=False), envvar="SQLCHORUS_PRICES", help="JSON or TOML file of model prices, USD per million tokens (env: SQLCHORUS_PRICES).")
@click.option("--export-pairs", "pairs_file", type=click.Path(dir_okay=False), help="Also write selection fine-tuning pairs (JSON Lines) from the run's labelled candidates.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
def eval_command(dataset_name: str, limit: int | None, workers: int, preset: str | None, model: str | None,
                 out_dir: str | None, run_name: str | None, no_resume: bool, predictions: str | None,
                 no_trace: bool, no_cache: bool, prices_file: str | None, pairs_file: str | None,
                 as_json: bool) -> None:
    """Run the graph on a benchmark's questions and score the predictions.

    Writes, in the run folder, records.jsonl (one record per question, as each finishes),
    the predictions in the benchmark's own submission format, gold.sql, summary.json and
    report.html. Running the same command again with the same --out or --run-name resumes
    without redoing finished questions. With --predictions, scores that file instead
    (written to --out only when given). Exits 0 when scored, 2 on bad input, 130 when
    interrupted.
    """
    from datetime import datetime
    from pathlib import Path

    from sqlchorus.evaluate import EvalError, open_dataset, run_eval, score_prediction_file

    progress = not as_json and sys.stderr.isatty()
    log = (lambda message: None) if as_json else (lambda message: click.echo(message, err=True))
    folder: Path | None = None
    pairs: dict[str, int] | None = None
    if predictions and pairs_file:
        _fail("--export-pairs needs the candidates of a run; it cannot be used with --predictions.")
        return
    try:
        dataset = open_dataset(dataset_name)
        if predictions:
            run = score_prediction_file(dataset, predictions, limit=limit, workers=workers,
                                        out_dir=out_dir, progress=progress)
        else:
            stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
            folder = Path(out_dir or Path("evals") / (run_name or f"{dataset.name}-{stamp}"))
            settings = Settings(model=model, cache=not no_cache, prices_file=prices_file,
                                trace_dir=None if no_trace else str(folder / "traces"))
            if preset:
                try:
                    from sqlchorus.presets import apply_preset
                except ImportError:
                    _fail("Presets are not available in this version of sqlchorus.")
                    return
                settings = apply_preset(settings, preset)
            run = run_eval(dataset, settings, out_dir=folder, limit=limit, workers=workers,
                           resume=not no_resume, progress=progress, log=log)
            if pairs_file:
                from sqlchorus.select import export_pairs

                labelled = [{**r, "db": r["db_path"]} for r in run.records if r.get("db_path")]
                pairs = export_pairs(labelled, pairs_file, settings=settings.replace(trace_dir=None))
                log(f"wrote {pairs['pairs']} selection pair(s) from {pairs['questions']} question(s) to {pairs_file}")
    except KeyboardInterrupt:
        where = f" Finished questions are in {folder / 'records.jsonl'}; rerun with --out {folder} to resume." if folder else ""
        _fail(f"Interrupted.{where}", 130)
        return
    except (EvalError, SqlchorusError, ModelConfigError, SqlError, ValueError, OSError) as e:
        _fail(str(e))
        return
    if as_json:
        out = {**run.summary, "out_dir": str(run.out_dir) if run.out_dir else None,
               "files": {kind: str(p) for kind, p in run.paths.items()}}
        if pairs is not None:
            out["pairs"] = pairs
        click.echo(json.dumps(out, default=str, ensure_ascii=False))
    else:
        _print_eval(run)


def _print_eval(run: Any) -> None:
    s = run.summary
    out = Console(highlight=False)
    ex = "n/a" if s["ex"] is None else f"{s['ex']:g}%"
    out.print(f"[bold]{s['dataset']}[/] ({s['benchmark']} semantics): EX {ex} on {s['n_scored']} question(s) scored, "
              f"{s['n_correct']} correct")
    if s["n_missing_db"]:
        out.print(f"[yellow]{s['n_missing_db']} question(s) not scored: their database is missing[/]")
    ran = run.n_run + run.n_resumed > 0  # a scored file has no candidates, so no upper bound
    table = Table("difficulty", "n", "EX", *(["upper bound"] if ran else []), "missing db", title="By difficulty")
    for level, v in s["by_difficulty"].items():
        bound = [_pct(s.get("upper_bound_by_difficulty", {}).get(level))] if ran else []
        table.add_row(level, str(v["n"]), _pct(v["ex"]), *bound, str(v["n_missing_db"]))
    out.print(table)
    if s.get("by_generator") and ran:
        gens = Table("chosen generator", "n", "EX", title="By generator")
        for name, v in s["by_generator"].items():
            gens.add_row(name, str(v["n"]), _pct(v["ex"]))
        out.print(gens)
        cost = s["cost"]
        out.print(f"upper bound with perfect selection: {_pct(s['upper_bound'])}")
        out.print(f"cost: ${cost['cost_usd']:.6f}, {cost['model_calls']} model call(s), "
                  f"{cost['input_tokens']} tokens in, {cost['output_tokens']} out; "
                  f"median {s['latency_s']['median']} s per question")
    errors = {k: s[k] for k in ("n_pred_errors", "n_timeouts", "n_gold_errors", "n_missing_prediction") if s.get(k)}
    if errors:
        out.print("errors: " + ", ".join(f"{k[2:].replace('_', ' ')} {v}" for k, v in errors.items()))
    for kind, path in run.paths.items():
        out.print(f"{kind}: {path}")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}%"


def main() -> None:  # pragma: no cover - console entry point
    cli()
