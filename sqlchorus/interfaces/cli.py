"""The ``sqlchorus`` command: a thin shell over the library.

Each command imports the machinery it runs (the graph, evaluation, the value index) when it
runs, not at the top of this module, so that ``sqlchorus --help`` and a mistyped option answer
at once instead of after LangGraph's import.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from sqlchorus.interfaces.settings_table import OPTIONS
from sqlchorus.tools.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_NO_ANSWER, SqlchorusError
from sqlchorus.tools.json_values import BLOB_TYPES, blob_text

if TYPE_CHECKING:
    from rich.console import Console

    from sqlchorus.config.settings import Settings

# rich is imported by the functions that print with it, so --help and the JSON outputs do not load it;
# Settings (pydantic) by the commands that build settings, so --help and scoring a prediction file
# do not load it: the options come from a plain table of its fields (settings_table).


def _fail(message: str, code: int = EXIT_BAD_INPUT, *, abandon_threads: bool = False) -> None:
    """Say what went wrong on stderr and exit with ``code``.

    ``abandon_threads``: work still running in threads is left behind. Python's exit would wait
    for those threads (a model call can take minutes), so the process ends at once instead.
    """
    click.secho("Error: ", err=True, fg="red", bold=True, nl=False)
    click.echo(message, err=True)
    if abandon_threads:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


@contextlib.contextmanager
def _reported(interrupted: Callable[[], str] = lambda: "Interrupted.") -> Iterator[None]:
    """Where the command line turns an error into one line and an exit code: sqlchorus's own
    errors exit with theirs (:mod:`sqlchorus.tools.errors`), any other bad value or unreadable
    file with EXIT_BAD_INPUT, Ctrl-C with EXIT_INTERRUPTED after the message ``interrupted()``
    gives then."""
    try:
        yield
    except KeyboardInterrupt:
        _fail(interrupted(), EXIT_INTERRUPTED)
    except SqlchorusError as e:
        _fail(str(e), e.exit_code)
    except (ValueError, OSError) as e:
        _fail(str(e))


@click.group()
@click.version_option(package_name="sqlchorus")
def cli() -> None:
    """sqlchorus: ask a question about a SQLite database, get checked SQL and its answer."""


# -- options derived from Settings -------------------------------------------------------------


class _ShownChoice(click.Choice):
    """Lists a field's choices in --help; Settings checks the value, with the message a Python
    argument or an environment variable gets."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value


class _ShownIntRange(click.IntRange):
    """Shows a whole-number field's range in --help; Settings parses and checks the value."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value


class _ShownFloatRange(click.FloatRange):
    """Shows a number field's range in --help; Settings parses and checks the value."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value


CLI_DEFAULTS = {"trace_dir": "traces"}
"""Where the command line's defaults differ from a program's: its traces (and checkpoints) go to
./traces, where a program's go to the per-user data folder (``auto``)."""


def _options_of(name: str, aliases: tuple[str, ...] = ()) -> list[Any]:
    """The click options of settings field ``name``, from the field: flag, help, default, choices
    or range (shown here, checked by Settings), environment variable, and a ``--no-...`` flag
    where it has one; ``aliases`` are other names of its flag."""
    field = OPTIONS[name]
    spec, help_text, env = field["option"], field["help"], field["env"]
    default = CLI_DEFAULTS.get(name, field["default"])
    options = []
    if spec.get("flag"):
        kwargs: dict[str, Any] = {"help": help_text}
        if spec.get("pairs"):
            kwargs.update(multiple=True, metavar=spec["metavar"], help=help_text + " Repeatable.")
        else:
            choices, bounds = field["choices"], field["range"]
            if choices:
                kwargs["type"] = _ShownChoice(choices)
            elif bounds:
                low, high, low_open, high_open = bounds
                shown = _ShownIntRange if field["whole"] else _ShownFloatRange
                kwargs["type"] = shown(low, high, min_open=low_open, max_open=high_open)
            elif spec.get("path"):
                kwargs["type"] = click.Path(file_okay=spec["path"] != "dir", dir_okay=spec["path"] == "dir")
            if default is not None:
                kwargs.update(default=default, show_default=True)
        if env:
            kwargs["help"] = f"{kwargs['help']} (env: {env})"
        options.append(click.option(spec["flag"], *aliases, name, **kwargs))
    if spec.get("negate"):
        flag, _, negate_help = spec["negate"]
        options.append(click.option(flag, f"{name}__negated", is_flag=True, help=negate_help))
    return options


SERVER_ONLY: tuple[str, ...] = ("run_heartbeat_s", "max_pending_runs", "keep_runs", "keep_days")
"""Settings fields that only a server (``serve``, ``mcp``, ``ui``) uses (and ``prune``, the last two)."""
SERVER_OPTIONS: tuple[str, ...] = tuple(name for name, field in OPTIONS.items() if field["option"])
"""Every settings field the command line offers, in the order of ``Settings``: a server's options."""
RUN_OPTIONS: tuple[str, ...] = tuple(name for name in SERVER_OPTIONS if name not in SERVER_ONLY)
"""The settings fields of a command that runs questions itself (``ask``, ``demo``, ``debug``, ``eval``)."""


def settings_options(*names: str, aliases: dict[str, tuple[str, ...]] | None = None) -> Any:
    """Decorate a command with the options of these settings fields (``aliases``: other flag
    names, by field)."""

    def decorate(fn: Any) -> Any:
        for name in reversed(names):
            for option in reversed(_options_of(name, (aliases or {}).get(name, ()))):
                fn = option(fn)
        return fn

    return decorate


def typed_settings(options: dict[str, Any], *, names: tuple[str, ...] = RUN_OPTIONS, **fixed: Any) -> Settings:
    """Settings from the options a user typed, and from the environment (``SQLCHORUS_<FIELD>``,
    which Settings reads), with a preset applied under them: an option typed always wins, even
    at its default value.

    Pops the settings options from ``options``, leaving the command's own.

    Raises:
        SettingsError: a value Settings refuses, naming the option (or variable) it came from.
    """
    from sqlchorus.config.settings import Settings, SettingsError

    ctx = click.get_current_context()
    typed: dict[str, Any] = dict(fixed)
    flags: dict[str, str] = {}
    for name in names:
        spec = OPTIONS[name]["option"]
        value = options.pop(name, None)
        negated = options.pop(f"{name}__negated", False)
        if spec.get("flag") and ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            typed[name], flags[name] = value, spec["flag"]
        if negated:
            typed[name], flags[name] = spec["negate"][1], spec["negate"][0]
    for name, default in CLI_DEFAULTS.items():
        if name in names and name not in typed and not os.environ.get(OPTIONS[name]["env"] or ""):
            typed[name] = default
    try:
        settings = Settings(**typed)
    except SettingsError as e:
        raise e.naming(flags) from None
    if settings.allow_writable_role:
        # What this command opens without its settings at hand (scoring's readers, an engine's
        # databases found by name) follows the same choice: open_database reads the variable.
        os.environ["SQLCHORUS_ALLOW_WRITABLE_ROLE"] = "1"
    return settings


STORE_FIELDS: tuple[str, ...] = ("trace_dir", "checkpoints")
"""The settings fields that name where runs are kept."""


def _names_a_store() -> bool:
    """Whether the command line names where runs are kept (``--trace-dir``, ``--checkpoints`` or
    their ``--no-...`` forms): a command that reads runs then reads that store alone, and
    otherwise every store a run may be in (:mod:`sqlchorus.runs.run_stores`)."""
    ctx = click.get_current_context()
    return any(ctx.get_parameter_source(param) is ParameterSource.COMMANDLINE
               for name in STORE_FIELDS for param in (name, f"{name}__negated"))


def _explain_preset(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    from sqlchorus.graph.expected_calls import explain_preset

    with _reported():
        text = explain_preset(value)
    click.echo(text)
    ctx.exit(0)


_DB = click.option("--db", "db", type=click.Path(dir_okay=False),
                   help="The database: a SQLite file, a DuckDB file (.duckdb, or duckdb:///path), a PostgreSQL URL "
                        "(postgresql://user@host/name; password from PGPASSWORD or ~/.pgpass) or a MySQL/MariaDB URL "
                        "(mysql://user@host/name; password from ~/.my.cnf or MYSQL_PWD) (default: the bundled "
                        "demo database).")
_EVIDENCE = click.option("--evidence", default="", help="A hint that defines terms used in the question.")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
_VERBOSE = click.option("--verbose", "-v", is_flag=True,
                        help="Print a line as each step ends, with its time (on a terminal a live line shows it anyway).")


class _LiveSteps:
    """The steps running now and for how long, as one live line on a terminal (rich)."""

    def __init__(self) -> None:
        self._time = time.monotonic
        self._lock = threading.Lock()
        self._running: dict[str, float] = {}
        self._started = self._time()

    def __call__(self, event: Any) -> None:
        with self._lock:
            if event.kind == "start":
                self._running[event.node] = self._time()
            else:
                self._running.pop(event.node, None)

    def __rich__(self) -> str:
        now = self._time()
        with self._lock:
            steps = ", ".join(f"{node} {now - since:.1f} s" for node, since in self._running.items())
        return f"[bold]thinking[/] {now - self._started:.0f} s  [dim]{steps or '...'}[/]"


def _step_lines(event: Any) -> None:
    if event.kind == "end":
        click.echo(f"  step {event.node}: {event.seconds:.2f} s", err=True)


def _progress_display(verbose: bool, quiet: bool) -> Any:
    """A context manager giving the progress callback for one run: a live line on a terminal,
    a line per step with --verbose elsewhere, or nothing."""
    from contextlib import contextmanager

    @contextmanager
    def display():
        if not quiet and sys.stderr.isatty():
            from rich.console import Console
            from rich.live import Live

            steps = _LiveSteps()
            with Live(steps, console=Console(stderr=True), refresh_per_second=4, transient=True):
                yield steps
        elif verbose:
            yield _step_lines
        else:
            yield None

    return display()


@cli.command()
@click.argument("question")
@click.option("--explain-preset", type=click.Choice(OPTIONS["preset"]["choices"]), is_eager=True, expose_value=False,
              callback=_explain_preset, help="Print what a preset runs and its expected model calls, then exit.")
@_DB
@_EVIDENCE
@settings_options(*RUN_OPTIONS)
@_JSON
@_VERBOSE
def ask(question: str, **options: Any) -> None:
    """Answer QUESTION with SQL checked against the database.

    Prints the chosen SQL, its result, the candidates with their status, and the cost.
    Exits 0 with an answer, 1 when no query could answer, 2 on bad input or configuration.
    """
    _ask(question, options)


DEMO_QUESTION = "Which customers have no email address on record?"
"""The demo's sample question: one the offline toy model, on the tiny preset, answers."""


@cli.command()
@click.argument("question", default=DEMO_QUESTION)
@_DB
@_EVIDENCE
@settings_options(*RUN_OPTIONS)
@_JSON
@_VERBOSE
def demo(question: str, **options: Any) -> None:
    """Answer QUESTION (a sample one by default) over the bundled demo database.

    Uses the model named by --model or SQLCHORUS_MODEL. With none, it runs offline with
    local:smollm2, a 135M-parameter toy model, on the tiny preset (one short prompt under a
    grammar), and says so before the answer: a real model is what gives real answers.
    """
    _ask(question, options, offline=True)


def _offline(settings: Settings) -> Settings:
    """``settings`` for the demo: as they are when they name a model (an option or
    SQLCHORUS_MODEL), else with local:smollm2 on the tiny preset, unless a preset was chosen."""
    if settings.model or settings.models:
        return settings
    from sqlchorus.core.local_model import SMOLLM2_NOTICE

    click.secho(SMOLLM2_NOTICE, fg="yellow", err=True)
    chosen = "preset" in settings.model_fields_set
    return settings.replace(model="local:smollm2", **({} if chosen else {"preset": "tiny"}))


def _refuse_early(question: str, evidence: str | None, db: str | None, limit: int,
                  models: list[Any] | None = None) -> tuple[str, str]:
    """Refuse what is wrong with a run's input before anything is built (the graph, the models,
    the database's schema and index take seconds to import and open): an empty or over-long
    question (over ``limit`` characters) or hint, a database file that is not there, and, when
    ``models`` (the settings' model and role models) is given, no model at all or a name that is
    not ``provider:model`` of a known provider. Returns the question and hint as checked, which
    the run takes without checking them again.

    Raises:
        EmptyQuestionError, QuestionTooLongError, DatabaseOpenError, ModelConfigError.
    """
    from sqlchorus.config.errors import NO_MODEL_HELP, ModelConfigError
    from sqlchorus.config.question import checked_question
    from sqlchorus.tools.engines.names import file_of, require_file

    checked = checked_question(question, evidence or "", limit)
    path = file_of(db) if db else None
    if path is not None:
        require_file(path)
    if models is not None:
        named = [m for m in models if m is not None and not (isinstance(m, str) and not m.strip())]
        if not named:
            raise ModelConfigError(NO_MODEL_HELP)
        _check_model_names(named)
    return checked


def _check_model_names(models: list[Any]) -> None:
    """Refuse a model name (the settings' model or a role's) whose provider is unknown or whose
    form its provider cannot take, before any model is built.

    Raises:
        ModelConfigError.
    """
    from sqlchorus.config.model_names import check_model_name

    for spec in models:
        if isinstance(spec, str) and spec.strip():
            check_model_name(spec)


def _ask(question: str, options: dict[str, Any], *, offline: bool = False) -> None:
    db, evidence, as_json = options.pop("db"), options.pop("evidence"), options.pop("as_json")
    verbose = options.pop("verbose")
    with _reported():
        settings = typed_settings(options)
        named = [settings.model, *settings.models.values()]
        # The demo with no model named runs the offline one; a model it is given is checked.
        models = None if offline and not any(named) else named
        question, evidence = _refuse_early(question, evidence, db, settings.max_question_chars, models)
    from sqlchorus.runs.result import answer_json
    from sqlchorus.runs.session import ask as run_ask

    with _reported():
        if offline:
            settings = _offline(settings)
        with _progress_display(verbose, quiet=as_json) as progress:
            result = run_ask(question, db=db, evidence=evidence, settings=settings, progress=progress)
    if as_json:
        click.echo(json.dumps(answer_json(result), ensure_ascii=False))
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
    if isinstance(value, BLOB_TYPES):
        return blob_text(value)
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _print_result(result: Any, *, max_rows: int = 20) -> None:
    from rich.console import Console
    from rich.syntax import Syntax
    from rich.table import Table

    from sqlchorus.core.candidates import fix_record
    from sqlchorus.tools.models.pricing import cost_text

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
            # The rounds the fixer spent on it, as recorded: one that gave no new query counts too.
            fixes = fix_record({"fix_attempts": 0, **c})["rounds"]
            cands.add_row(c["id"] + chosen, c["status"], _cell(c.get("row_count")), str(fixes), _cell(c.get("error") or ""))
        out.print(cands)
    for e in result.errors:
        if e.get("kind") == "trace":
            continue
        out.print(f"[yellow]note[/] {e['node']}: {e['message']}")
    cost = result.cost
    cached = f" ({cost['cached_calls']} from cache)" if cost["cached_calls"] else ""
    cached_tokens = (f" ({cost['cached_input_tokens']} in, {cost['cached_output_tokens']} out from cache)"
                     if cost["cached_calls"] else "")
    out.print(
        f"cost: {cost_text(cost['cost_usd'], cost['unpriced_calls'])}, {cost['calls']} model call(s){cached}, "
        f"{cost['input_tokens']} tokens in, {cost['output_tokens']} out{cached_tokens}, {cost['seconds']:.2f} s "
        f"({cost['model_seconds']:.2f} s in models)", markup=False,
    )
    if len(cost["by_node"]) > 1 or cost["cost_usd"] or cost["unpriced_calls"]:
        out.print("  " + ", ".join(f"{node} {cost_text(c['cost_usd'], c['unpriced_calls'])}"
                                   for node, c in cost["by_node"].items()), markup=False)
    if cost["unpriced_models"]:
        out.print(f"  no price for {', '.join(cost['unpriced_models'])}: their calls are unpriced (see --prices)",
                  markup=False)
    if result.trace_path:
        out.print(f"trace: {result.trace_path}  (sqlchorus trace show {result.run_id})")
    # What went wrong with the record of the run, not with its answer: one unwrapped line each,
    # on stderr.
    for e in result.errors:
        if e.get("kind") == "trace":
            click.secho(f"trace: {e['message']}", err=True, fg="yellow")


SELECT_OPTIONS: tuple[str, ...] = (
    "pairwise", "pairwise_max_clusters", "max_pairwise_calls", "schema_format", "sql_timeout_s", "model_timeout_s",
    "model_retries", "rate_limit", "model_limits", "cache", "cache_path", "prices_file", "allow_writable_role",
)


@cli.command()
@click.argument("question", required=False)
@_DB
@_EVIDENCE
@click.option("--run", "run_id", help="Open an earlier run (of ask, eval or debug) by its id.")
@click.option("--eval", "eval_run", metavar="EVAL",
              help="Open a question's run of an evaluation: its run folder, or its name under evals/ (with --question).")
@click.option("--question", "eval_question", metavar="N",
              help="With --eval: the question's number, as sqlchorus eval and report.html show it.")
@click.option("--at", "checkpoint", help="With --run or --eval: the checkpoint to open it at (default: its last).")
@click.option("--break", "breaks", multiple=True, metavar="NODE", help="Stop before NODE (repeatable).")
@click.option("--commands", "commands_file", type=click.File("r", encoding="utf-8"),
              help="Run the commands of this file (one a line; - for standard input) instead of a prompt.")
@settings_options(*RUN_OPTIONS)
def debug(question: str | None, db: str | None, evidence: str, run_id: str | None, eval_run: str | None,
          eval_question: str | None, checkpoint: str | None, breaks: tuple[str, ...], commands_file: Any,
          **options: Any) -> None:
    """Step through a run: pause before any node, inspect and edit the state, go on, go back.

    `sqlchorus debug "QUESTION" --db PATH` starts a new run paused before its first node;
    `sqlchorus debug --run ID [--at CHECKPOINT]` opens an earlier one, serving its model calls
    from the answers it kept; `sqlchorus debug --eval FOLDER --question N` opens question N's
    run of an evaluation the same way. Type `help` at the `(sqlchorus)` prompt for the commands.
    """
    # Late: the debugger pulls in LangGraph, which --help does not need.
    from sqlchorus.interfaces.debug_shell import PROMPT, DebugShell
    from sqlchorus.runs.debugger import Debugger, kept_answers_model
    from sqlchorus.runs.session import Session

    if eval_question is not None and eval_run is None:
        _fail("--question N names a question of an evaluation: give --eval FOLDER too.")
        return
    if eval_run is not None and (question is not None or run_id is not None):
        _fail("--eval FOLDER --question N opens a run of an evaluation: give it without --run or a QUESTION.")
        return
    if eval_run is not None and eval_question is None:
        _fail("--eval FOLDER needs --question N: the question whose run to open (sqlchorus eval lists the wrong ones).")
        return
    if eval_run is None and (question is None) == (run_id is None):
        _fail("Give a QUESTION to start a run, --run ID to open one, or --eval FOLDER --question N (only one).")
        return
    if run_id is not None and not run_id.strip():
        _fail("--run needs a run's id, or a unique part of it: ask --json prints it, and each trace file in traces/ is named by one.")
        return
    if checkpoint and not (run_id or eval_run):
        _fail("--at opens a checkpoint of an earlier run: give --run ID or --eval FOLDER --question N too.")
        return
    found = None
    with _reported():
        if eval_run is not None:
            from sqlchorus.evaluation.runs import question_run

            # A store typed on this command wins over the one the evaluation recorded.
            typed = click.get_current_context().get_parameter_source("checkpoints") is ParameterSource.COMMANDLINE
            found = question_run(eval_run, eval_question, checkpoints=options.get("checkpoints") if typed else None)
            run_id = found.run_id
        settings = typed_settings(options)
        kept_in = None
        if found is not None:
            settings = settings.replace(checkpoints=found.checkpoints)
        elif run_id and not _names_a_store():
            # The run is looked for in every store a run may be in, this command's first.
            from sqlchorus.runs.run_stores import default_stores, find_run

            stores = default_stores(settings.trace_folder, settings.checkpoint_file)
            store, run_id = find_run(stores, run_id)
            settings = settings.replace(checkpoints=store.checkpoints)
            kept_in = store if store is not stores[0] else None
        if run_id and settings.model is None and not settings.models:
            settings = settings.replace(model=kept_answers_model())
        session = Session(settings)
        if run_id:
            debugger = Debugger.open(run_id, at=checkpoint, session=session)
            for node in breaks:
                debugger.add_break(node)
        else:
            debugger = Debugger.start(question, db, evidence=evidence, session=session, breakpoints=breaks)
    from rich.console import Console

    from sqlchorus.evaluation.runs import question_of_run

    # A run of an evaluation's own store is that question's, however it was named: its branches
    # are scored against the gold as they end.
    if found is None and run_id:
        found = question_of_run(debugger.run_id, settings.checkpoint_file)
    console = Console(highlight=False)
    shell = DebugShell(debugger, console, question=found)
    if found is not None:
        record = found.record
        console.print(f"eval {found.folder}, question {record.get('question_id')} ({record.get('db_id')}, "
                      f"{'correct' if record.get('correct') else record.get('verdict')}): {record.get('question')}",
                      markup=False)
        if record.get("gold_sql"):  # what the answer is scored against; `sql` runs it here
            console.print(f"gold: {record['gold_sql']}", markup=False)
        shell.show_branches()
    if kept_in is not None:
        console.print(f"run {debugger.run_id}, kept in {kept_in.where('checkpoints')}", markup=False)
    for note in debugger.notes:
        console.print(f"[yellow]note[/] {note}")
    shell.where()
    try:
        if commands_file is not None or not sys.stdin.isatty():
            for line in commands_file if commands_file is not None else sys.stdin:
                console.print(f"{PROMPT}{line.rstrip()}", markup=False)
                if not shell.run(line):
                    break
        else:
            _interactive(shell)
    finally:
        debugger.close()
        session.close()
    sys.exit(EXIT_NO_ANSWER if shell.failed else 0)


def _debug_history() -> Any:
    """The debugger's command history: a file in the user's state folder, or this session's
    alone when that folder cannot be written."""
    from platformdirs import user_state_path
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    try:
        folder = user_state_path("sqlchorus")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "debug_history"
        path.touch(exist_ok=True)
        return FileHistory(str(path))
    except OSError:
        return InMemoryHistory()


def _interactive(shell: Any) -> None:
    """The prompt: completion of commands, node names and state keys; history; Ctrl-C keeps the
    session, Ctrl-D ends it."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import Completer, Completion

    from sqlchorus.interfaces.debug_shell import PROMPT

    class _Words(Completer):  # the shell knows what each command's words are
        def get_completions(self, document: Any, complete_event: Any) -> Any:
            before = document.text_before_cursor
            word = before.split(" ")[-1]
            for option in shell.complete(before):
                yield Completion(option, start_position=-len(word))

    # Tab completes (a single match at once); no menu pops up while typing. The history of
    # commands is kept across sessions, in the user's state folder.
    prompt = PromptSession(completer=_Words(), complete_while_typing=False, history=_debug_history())
    while True:
        try:
            # A SIGINT from outside (not the Ctrl-C key, which the prompt reads) interrupts the
            # prompt like any other code, rather than asyncio's handler printing a traceback.
            line = prompt.prompt(PROMPT, handle_sigint=False)
        except KeyboardInterrupt:
            continue
        except EOFError:
            return
        try:
            if not shell.run(line):
                return
        except KeyboardInterrupt:  # Ctrl-C between the prompt and the command: the session goes on
            shell.interrupted()


@cli.command("select")
@click.option("--candidates", "candidates_file", required=True, type=click.Path(exists=True, dir_okay=False), help="JSON Lines file: one {db, question, evidence, candidates} object a line.")
@click.option("--model", envvar="SQLCHORUS_SELECTION_MODEL", help="Selection model, as provider:model (env: SQLCHORUS_SELECTION_MODEL); none: fall back to the largest cluster.")
@settings_options(*SELECT_OPTIONS)
@click.option("--out", "out_file", type=click.Path(dir_okay=False), help="Write the JSON lines here instead of standard output.")
@click.option("--workers", type=click.IntRange(1, 256), default=1, show_default=True,
              help="With --ray: the workers that run the lines (one Session each).")
@click.option("--ray", "ray_address", metavar="ADDRESS",
              help="Run the lines on a Ray cluster: HOST:PORT, ray://HOST:PORT, auto or local (the ray extra); "
                   "the results are the same, in the same order.")
def select_command(candidates_file: str, model: str | None, out_file: str | None, workers: int,
                   ray_address: str | None, **options: Any) -> None:
    """Choose one SQL query per question among candidates from any source.

    Runs each candidate on its database, clusters them by result, votes, and when the vote is not
    confident asks the selection model to compare candidates pairwise (CHASE-SQL). Prints one
    JSON line per question: the chosen SQL, its index, its cluster, the votes and the confidence.
    Exits 2 on bad input, 1 when some question had no candidate that ran, 3 when the Ray
    cluster cannot do the work.
    """
    from sqlchorus.runs.standalone_selection import select_file

    with _reported():
        # The selection model is --model's (or SQLCHORUS_SELECTION_MODEL's) alone, not SQLCHORUS_MODEL's.
        settings = typed_settings(options, names=SELECT_OPTIONS, trace_dir=None, model=None, models={})
        sink = open(out_file, "w", encoding="utf-8") if out_file else None
    unanswered = 0
    stack = contextlib.ExitStack()
    try:
        results = select_file(candidates_file, model=model, settings=settings)
        if ray_address:
            from sqlchorus.cluster.eval import select_on_cluster
            from sqlchorus.runs.standalone_selection import read_selection_lines

            from pathlib import Path

            base = Path(candidates_file).resolve().parent
            dbs = [db for _, item, db in read_selection_lines(candidates_file, base) if item is not None]
            pool, _ = stack.enter_context(on_cluster(ray_address, settings, workers, dbs, select_model=model,
                                                     selects=True, log=lambda message: click.echo(message, err=True)))
            results = select_on_cluster(pool, candidates_file)
        for result in results:
            unanswered += result.get("sql") is None
            line = json.dumps(result, default=str, ensure_ascii=False)
            if sink:
                sink.write(line + "\n")
            else:
                click.echo(line)
    except SqlchorusError as e:
        _fail(str(e), e.exit_code)
    except BrokenPipeError:
        # The reader of standard output went away (| head): nothing is wrong with the input.
        sys.stdout = None  # Python would otherwise complain again while flushing at exit
        sys.exit(EXIT_NO_ANSWER if unanswered else 0)
    except (UnicodeDecodeError, OSError) as e:
        _fail(f"Cannot read {candidates_file} as JSON Lines text: {e}")
    finally:
        stack.close()
        if sink:
            sink.close()
    if unanswered:
        sys.exit(EXIT_NO_ANSWER)


@cli.command()
@click.option("--db", "db", required=True, type=click.Path(dir_okay=False),
              help="Database to index: a SQLite or DuckDB file, or a postgresql:// or mysql:// URL.")
@settings_options("value_cache_dir", "allow_writable_role", aliases={"value_cache_dir": ("--cache-dir",)})
@click.option("--max-values", type=click.IntRange(1), default=None,
              help="Distinct values read per column at most (default 100000). An index of this database "
                   "built with another number is rebuilt; without the option, any index of it is reused.")
@click.option("--rebuild", is_flag=True, help="Build again even if an index of this database content exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the index's figures as one JSON object.")
@click.option("--ray", "ray_address", metavar="ADDRESS",
              help="Build on a Ray cluster, its workers reading columns in parallel: a head's HOST:PORT, "
                   "ray://HOST:PORT, auto or local (the ray extra). The index is the same, byte for byte.")
def index(db: str, max_values: int | None, rebuild: bool, as_json: bool, ray_address: str | None,
          **options: Any) -> None:
    """Build the value index of a database, once per database content.

    The index (every distinct text value: exact, word, one-edit, MinHash LSH and column-name
    lookups) is stored in a cache folder keyed by the database's content and reused until the
    database changes; `ask` uses it whatever --max-values built it, and builds one on first use
    when there is none. Columns that were skipped are listed with the reason. With --ray the
    columns are read and hashed on the cluster's workers and merged here into the same file; the
    cluster is joined only when there is something to build. Exits 3 when the cluster cannot do
    the work.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from sqlchorus.tools.engines.opening import open_database
    from sqlchorus.tools.values import DEFAULT_MAX_VALUES, ValueIndex

    with _reported():
        # The folder typed, else the environment's, where `ask` looks for the index too.
        typed = typed_settings(options, names=("value_cache_dir", "allow_writable_role"))
        value_cache_dir = typed.value_cache_dir
        if ray_address:
            from sqlchorus.cluster.connect import parse_address

            parse_address(ray_address)  # a malformed address is bad input, said before anything is read
        # The index reads through sqlchorus's own lookups, which need no statement worker.
        database = open_database(db, prestart=False, workers=1)
    with database, Progress(
        TextColumn("indexing values"), BarColumn(), MofNCompleteColumn(), TextColumn("columns"),
        TimeElapsedColumn(), console=Console(stderr=True), disable=as_json, transient=True,
    ) as bar:
        task = bar.add_task("index", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        failure: BaseException | None = None
        try:
            if ray_address:
                from sqlchorus.cluster.index_build import build_index_on_cluster

                # The workers open a server's database by the URL as typed (its password included).
                built = build_index_on_cluster(database, ray_address, source=db, cache_dir=value_cache_dir,
                                               max_values_per_column=max_values, rebuild=rebuild,
                                               progress=progress)
            elif rebuild:
                built = ValueIndex.build(database, cache_dir=value_cache_dir,
                                         max_values_per_column=max_values or DEFAULT_MAX_VALUES, progress=progress)
            else:
                built = ValueIndex.load_or_build(database, value_cache_dir, max_values_per_column=max_values,
                                                 progress=progress)
        except (OSError, ValueError, sqlite3.Error, SqlchorusError, KeyboardInterrupt) as e:
            failure = e  # said once the progress bar is gone, on a line of its own
    if isinstance(failure, KeyboardInterrupt):
        _fail("Interrupted.", EXIT_INTERRUPTED)
    if failure is not None:
        _fail(f"Cannot build the value index: {failure}", getattr(failure, "exit_code", EXIT_BAD_INPUT))
        return
    with built:
        stats = dict(built.stats, path=str(built.path), skipped_columns=built.skipped)
    if as_json:
        click.echo(json.dumps(stats, default=str))
        return
    origin = "reused from the cache" if stats["from_cache"] else f"built in {stats['build_seconds']:.2f} s"
    click.echo(
        f"{stats['values']} distinct values from {stats['columns']} columns "
        f"(at most {stats['max_values_per_column']} each), {origin}; "
        f"{stats['bytes_on_disk'] / 1e6:.1f} MB at {stats['path']}"
    )
    for skip in built.skipped:
        click.echo(f"  skipped {skip['table']}.{skip['column']}: {skip['reason']}")


@cli.group()
def trace() -> None:
    """Read the traces of earlier runs."""


@trace.command("show")
@click.argument("run")
@click.option("--trace-dir", type=click.Path(file_okay=False),
              help=f"Folder of trace files (default: ${OPTIONS['trace_dir']['env']}, else {CLI_DEFAULTS['trace_dir']}).")
def trace_show(run: str, trace_dir: str | None) -> None:
    """Print run RUN (its id, a unique prefix of it, or a trace file) as a tree with timings.

    Without --trace-dir, RUN is looked for in ./traces (or $SQLCHORUS_TRACE_DIR), then in the
    Python API's folder, then in each evaluation's under ./evals.
    """
    from sqlchorus.config.settings import Settings
    from sqlchorus.core.trace_file import find_trace, load_spans, render_tree
    from sqlchorus.runs.run_stores import default_stores
    from sqlchorus.runs.run_stores import find_trace as find_in_stores

    with _reported():
        # Where `ask` wrote them: the environment's folder when it names one.
        folder = trace_dir or os.environ.get(OPTIONS["trace_dir"]["env"]) or CLI_DEFAULTS["trace_dir"]
        folder = Settings(trace_dir=folder).trace_folder
        if trace_dir is not None or os.path.isfile(run):
            path = find_trace(run, folder)
        else:
            _, path = find_in_stores(default_stores(folder, None), run)
        roots = load_spans(path)
    for line in render_tree(roots):
        click.echo(line)


PRUNE_OPTIONS: tuple[str, ...] = ("keep_runs", "keep_days", "trace_dir", "checkpoints")


@cli.command("prune")
@settings_options(*PRUNE_OPTIONS)
@click.option("--dry-run", is_flag=True, help="Remove nothing; print what would go.")
@click.option("--vacuum", is_flag=True,
              help="Also rewrite a SQLite checkpoint file at its new size (slow; the file is locked meanwhile).")
def prune_command(dry_run: bool, vacuum: bool, **options: Any) -> None:
    """Remove old runs: their trace files and checkpoints, keeping the newest --keep-runs runs
    and those younger than --keep-days (a run goes only when past every limit given). Queued or
    running runs, and runs a kept run resumes from, stay.

    Without --trace-dir or --checkpoints, the runs of every store are counted together: ./traces,
    the Python API's folder and each evaluation's under ./evals.
    """
    from sqlchorus.runs.retention import prune, prune_stores
    from sqlchorus.runs.run_stores import default_stores, listed

    stores = None
    with _reported():
        settings = typed_settings(options, names=PRUNE_OPTIONS)
        limits = {"keep_runs": settings.keep_runs, "keep_days": settings.keep_days, "dry_run": dry_run,
                  "vacuum": vacuum}
        if _names_a_store():
            report = prune(settings.checkpoint_file, settings.trace_folder, **limits)
        else:
            stores = default_stores(settings.trace_folder, settings.checkpoint_file)
            report = prune_stores(stores, **limits)
    if stores is not None:
        click.echo(f"runs of {listed(stores, 'traces')}")
    verb = "would remove" if dry_run else "removed"
    for run_id in report.runs_removed:
        where = report.store_of.get(run_id)
        click.echo(f"{verb} {run_id}" + (f" ({where})" if where else ""))
    click.echo(report.summary())


EVAL_OPTIONS: tuple[str, ...] = tuple(name for name in RUN_OPTIONS if name != "trace_dir")


TEACH_OPTIONS: tuple[str, ...] = ("trace_dir", "checkpoints", "examples_store", "sql_timeout_s", "max_question_chars",
                                  "require_readonly_role", "allow_writable_role")
"""The settings of ``teach`` and ``examples``: where taught examples are kept, and the guard's."""


def _teacher(options: dict[str, Any]) -> Any:
    from sqlchorus.runs.teach import Teacher

    return Teacher(settings=typed_settings(options, names=TEACH_OPTIONS))


@cli.command("teach")
@click.option("--db", "db", type=click.Path(dir_okay=False),
              help="The database the example is for (as --db of ask names it); a line of --file may name its own.")
@click.option("--question", "-q", help="The question the SQL answers.")
@click.option("--sql", help="The verified SQL (with --question), or the SQL expression of a term (with --term).")
@click.option("--hint", default="", help="A hint the question needs (BIRD's evidence).")
@click.option("--term", help="Teach a glossary term instead: a word or phrase of the database's world.")
@click.option("--meaning", default="", help="What --term means, in words.")
@click.option("--file", "pairs", type=click.File("r", encoding="utf-8"),
              help='A JSON Lines file of {"question", "sql", "hint"?, "db"?} or {"term", "meaning"?, "sql"?, "db"?} '
                   "('-': standard input).")
@click.option("--run", "run_id", help="The run the example came from, recorded with it.")
@click.option("--author", help="Who verified it (default: the login name).")
@settings_options(*TEACH_OPTIONS)
@_JSON
def teach_command(db: str | None, question: str | None, sql: str | None, hint: str, term: str | None, meaning: str,
                  pairs: Any, run_id: str | None, author: str | None, as_json: bool, **options: Any) -> None:
    """Teach the database a verified question and its SQL, a glossary term, or a file of them.

    The SQL runs through the database's guard first and must return rows; an empty or over-long
    question, a statement the guard refuses, or a question taught already is refused in one line.
    Taught examples are kept per database in the examples store (the checkpoint store by default)
    and shown to the generators ahead of their own examples; a term is added to the hint of every
    question that names it. With --file, a refused line is reported with its number and why, the
    others kept; exit 1 when any line was refused.
    """
    from sqlchorus.runs.teach import exported

    if pairs is None and not (question or sql or term):
        _fail("Give --question and --sql, --term (with --meaning or --sql), or --file.")
    if pairs is not None and (question or sql or term):
        _fail("Give --file alone, or one example (--question and --sql) or term (--term), not both.")
    if pairs is None and not db:
        _fail("Give --db: the database the example is for.")
    if pairs is None and term is None and not (question and sql):
        _fail("An example needs both --question and --sql.")
    with _reported():
        with _teacher(options) as teacher:
            if pairs is not None:
                report = teacher.teach_lines(db, pairs, author=author, source="cli")
            elif term is not None:
                entry = teacher.teach_term(db, term, meaning, sql or "", author=author, run_id=run_id, source="cli")
            else:
                entry = teacher.teach(db, question, sql, hint=hint, author=author, run_id=run_id, source="cli")
    if pairs is None:
        click.echo(json.dumps(exported(entry)) if as_json else f"taught {entry['id']}: {_entry_line(entry)}")
        return
    if as_json:
        click.echo(json.dumps(report.to_dict()))
    else:
        for entry in report.added:
            click.echo(f"taught {entry['id']}: {_entry_line(entry)}")
        for number, why in report.refused:
            click.echo(f"line {number}: not taught: {why}", err=True)
        click.echo(f"{len(report.added)} taught, {len(report.refused)} refused")
    if report.refused:
        sys.exit(EXIT_NO_ANSWER)


def _entry_line(entry: dict[str, Any]) -> str:
    if entry["kind"] == "term":
        meaning = entry["hint"] + (f" ({entry['sql']})" if entry["sql"] else "") if entry["hint"] else entry["sql"]
        return f"term {entry['question']!r}: {meaning}"
    return f"{entry['question']!r} -> {entry['sql']}"


@cli.group("examples")
def examples_group() -> None:
    """List, export and remove taught examples and glossary terms."""


@examples_group.command("list")
@click.option("--db", "db", help="Only this database's (as --db of ask names it); default: every database's.")
@click.option("--kind", type=click.Choice(["example", "term"]), help="Only examples, or only terms.")
@settings_options(*TEACH_OPTIONS)
@_JSON
def examples_list(db: str | None, kind: str | None, as_json: bool, **options: Any) -> None:
    """List the taught examples and terms: id, database, question or term, SQL, who and when."""
    from sqlchorus.runs.teach import exported

    with _reported(), _teacher(options) as teacher:
        entries = teacher.entries(db, kind)
        if not entries and db is None and not as_json:
            click.echo(f"Nothing is taught yet in {teacher.store().path}.")
            return
    if as_json:
        click.echo(json.dumps([exported(e) for e in entries]))
        return
    for entry in entries:
        run = f", run {entry['run_id']}" if entry["run_id"] else ""
        click.echo(f"{entry['id']}  {entry['database']}\n    {_entry_line(entry)}\n"
                   f"    by {entry['author']} via {entry['source']}, {entry['created'][:19]}{run}")
    click.echo(f"{len(entries)} taught")


@examples_group.command("export")
@click.option("--db", "db", help="Only this database's; default: every database's.")
@click.option("--kind", type=click.Choice(["example", "term"]), help="Only examples, or only terms.")
@click.option("--out", "out", type=click.Path(dir_okay=False), help="Write to this file (default: standard output).")
@settings_options(*TEACH_OPTIONS)
def examples_export(db: str | None, kind: str | None, out: str | None, **options: Any) -> None:
    """Write the taught examples and terms as JSON Lines, one per line, as sqlchorus teach --file reads them."""
    from sqlchorus.runs.teach import exported

    with _reported(), _teacher(options) as teacher:
        lines = [json.dumps(exported(e), ensure_ascii=False) for e in teacher.entries(db, kind)]
        text = "".join(f"{line}\n" for line in lines)
        if out:
            tmp = Path(out).with_name(Path(out).name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, out)  # never a half-written export
            click.echo(f"wrote {len(lines)} to {out}", err=True)
        else:
            click.echo(text, nl=False)


@examples_group.command("rm")
@click.argument("ids", nargs=-1, required=True)
@settings_options(*TEACH_OPTIONS)
def examples_rm(ids: tuple[str, ...], **options: Any) -> None:
    """Remove the taught examples or terms of IDS (all or none: an unknown id removes nothing)."""
    with _reported(), _teacher(options) as teacher:
        removed = teacher.remove(list(ids))
    for entry in removed:
        click.echo(f"removed {entry['id']}: {_entry_line(entry)}")


@cli.command("check")
@click.option("--db", "db", required=True, type=click.Path(dir_okay=False),
              help="The database whose taught questions are asked again.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="The check's run folder (default: evals/check-<database>-<time>); an existing one is resumed.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True, help="Questions asked at once.")
@settings_options(*EVAL_OPTIONS)
@_JSON
def check_command(db: str, out_dir: str | None, workers: int, as_json: bool, **options: Any) -> None:
    """Ask every taught question of the database again, with the current models and settings,
    and compare each answer's rows with its taught SQL's, as an evaluation does.

    Prints each regression with the command that opens its run in the debugger; exit 1 when any
    taught question regressed. --json prints n_checked, n_regressions and regressions for CI.
    """
    from sqlchorus.evaluation.taught_checks import check_taught

    progress = not as_json and sys.stderr.isatty()
    log = (lambda message: None) if as_json else (lambda message: click.echo(message, err=True))
    with _reported(lambda: "Interrupted. The answered questions are kept; --out FOLDER resumes them."):
        settings = _examples_from_command_line(typed_settings(options, names=EVAL_OPTIONS))
        _check_model_names([settings.model, *settings.models.values()])
        report = check_taught(db, settings, out_dir=out_dir, workers=workers, progress=progress, log=log)
    if as_json:
        click.echo(json.dumps(report.to_dict()))
    else:
        for r in report.regressions:
            click.echo(f"REGRESSED {r['id']}: {r['question']!r}")
            click.echo(f"    taught: {r['taught_sql']}")
            click.echo(f"    now:    {r['sql'] or '(no answer)'}" + (f"  [{r['error']}]" if r.get("error") else ""))
            click.echo(f"    debug:  {r['debug']}")
        click.echo(f"{report.n_checked} checked, {report.n_regressions} regressed (run folder {report.folder})")
    if report.regressions:
        sys.exit(EXIT_NO_ANSWER)


def _examples_from_command_line(settings: Settings) -> Settings:
    """``settings`` whose taught examples are the command line's: an evaluation keeps its runs in
    its own folder, but reads what was taught where ``ask`` and ``teach`` keep it
    (``./traces/checkpoints.sqlite``, or the store --checkpoints names)."""
    if settings.examples_store != "auto":
        return settings
    folder = os.environ.get(OPTIONS["trace_dir"]["env"] or "") or CLI_DEFAULTS["trace_dir"]
    store = settings.checkpoints if settings.checkpoints not in ("auto", None) else None
    return settings.replace(examples_store=store or str((Path(folder) / "checkpoints.sqlite").absolute()))




def ray_options(fn: Any) -> Any:
    """``--ray ADDRESS`` and ``--ray-resource ROLE=RESOURCE``, for the commands that spread
    their questions over a Ray cluster."""
    fn = click.option("--ray-resource", "ray_resources", multiple=True, metavar="ROLE=RESOURCE",
                      help="With --ray: run ROLE's model calls on the node that offers this Ray resource "
                           "(e.g. generator=gpu_node); repeat for several roles.")(fn)
    return click.option("--ray", "ray_address", metavar="ADDRESS",
                        help="Run on a Ray cluster: a head's HOST:PORT, ray://HOST:PORT, auto (the cluster "
                             "this machine is in) or local (one started for this command); --workers is "
                             "then the number of workers, one Session each (the ray extra).")(fn)


@contextlib.contextmanager
def on_cluster(address: str, settings: Any, workers: int, databases: Any, *, role_resources: tuple[str, ...] = (),
               select_model: Any = None, selects: bool = False,
               log: Callable[[str], None] = lambda message: None) -> Iterator[Any]:
    """A started :class:`~sqlchorus.cluster.workers.Pool` of ``workers`` on the cluster at
    ``address``, each worker checked before any question is spent; closed at the end."""
    from sqlchorus.cluster.connect import cluster
    from sqlchorus.cluster.workers import Pool

    resources: dict[str, str] = {}
    if role_resources:
        from sqlchorus.cluster.remote_model import parse_role_resources

        resources = parse_role_resources(role_resources)
    with cluster(address, cpus=workers) as info:
        log(f"ray: {info.nodes} node(s) with {info.cpus:g} CPU(s) at {address}; {workers} worker(s)")
        if resources:  # the models' hosts, started once here, last as long as the command
            from sqlchorus.cluster.remote_model import with_role_resources

            settings = with_role_resources(settings, resources)
            log("ray: " + ", ".join(f"{role} calls run where {name} is" for role, name in resources.items()))
        limiter = None
        if getattr(settings, "model_limits", None):
            from sqlchorus.cluster.limiter import shared_limiter

            limiter = shared_limiter(settings.model_limits)
        pool = Pool(settings, workers, limiter=limiter, select_model=select_model,
                    selects=selects, log=log)
        try:
            pool.start(databases)
            yield pool, limiter
        finally:
            pool.close()


@cli.command("eval")
@click.option("--dataset", "dataset_name", metavar="spider-dev|bird-dev|bird-mini-dev|PATH", help="A built-in benchmark (read from SQLCHORUS_DATA) or a dataset JSON file. Required, except to record a finished evaluation with --experiment.")
@click.option("--limit", type=click.IntRange(0), default=None, help="Evaluate only the first N questions.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True, help="Questions run at the same time (threads); also the scoring processes.")
@settings_options(*EVAL_OPTIONS)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Run folder (default: evals/<dataset>-<timestamp>, or evals/<run-name>).")
@click.option("--run-name", help="Name the run folder evals/NAME, so the same command resumes it.")
@click.option("--no-resume", is_flag=True, help="Start over instead of keeping the questions already recorded in the run folder.")
@click.option("--predictions", type=click.Path(dir_okay=False), help="Score this prediction file (Spider pred.txt or BIRD JSON) without running the graph.")
@click.option("--no-trace", is_flag=True, help="Write no per-question trace files (default: <run folder>/traces).")
@click.option("--export-pairs", "pairs_file", type=click.Path(dir_okay=False), help="Also write selection fine-tuning pairs (JSON Lines) from the run's labelled candidates.")
@click.option("--engine", type=click.Choice(["sqlite", "postgresql", "duckdb", "mysql"]), default="sqlite", show_default=True,
              help="Ask and score on the benchmark's databases loaded into this engine "
                   "(scripts/load_spider_engines.py); the gold SQL is transpiled from SQLite's dialect.")
@click.option("--databases", "where", metavar="URL|DIR",
              help="Where --engine's databases are: a PostgreSQL or MySQL/MariaDB server URL (each question's "
                   "database is the one named as its db_id; default: the server the PG* variables, or "
                   "~/.my.cnf, name), or the folder of <db_id>.duckdb files.")
@click.option("--no-transpile", is_flag=True, help="With --engine: run the gold SQL as written, not transpiled.")
@click.option("--transpile-predictions", is_flag=True,
              help="With --engine and --predictions: the file's SQL is SQLite's; transpile it as the gold.")
@click.option("--metrics", metavar="ex,soft_f1,r_ves",
              help="What to score besides EX: BIRD's soft_f1 and r_ves (default: all three for a BIRD "
                   "dataset, ex for a Spider one).")
@click.option("--ves-iterations", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Timings of each correct prediction against its gold for R-VES (the official 100).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option("--experiment", "experiments", multiple=True, type=click.Choice(["phoenix", "langfuse"]),
              help="Also record the evaluation in Arize Phoenix or Langfuse (repeatable): its questions as a dataset, "
                   "the evaluation as an experiment with each answer and verdict, to compare evaluations there question "
                   "by question. Without --dataset: record the finished evaluation in --out or --run-name.")
@ray_options
def eval_command(dataset_name: str | None, limit: int | None, workers: int, out_dir: str | None, run_name: str | None,
                 no_resume: bool, predictions: str | None, no_trace: bool, pairs_file: str | None,
                 engine: str, where: str | None, no_transpile: bool, transpile_predictions: bool,
                 metrics: str | None, ves_iterations: int, as_json: bool, experiments: tuple[str, ...],
                 ray_address: str | None, ray_resources: tuple[str, ...], **options: Any) -> None:
    """Run the graph on a benchmark's questions and score the predictions.

    Writes, in the run folder, records.jsonl (one record per question, as each finishes),
    the predictions in the benchmark's own submission format, gold.sql, summary.json and
    report.html. Running the same command again with the same --out or --run-name resumes
    without redoing finished questions. With --predictions, scores that file instead
    (written to --out only when given). With --engine postgresql|duckdb|mysql, questions are asked
    of, and scored on, the benchmark's databases loaded into that engine. With --ray, the
    questions are answered by a Ray cluster's workers and recorded here, the same as without.
    With --experiment phoenix|langfuse, the evaluation is then recorded in that tool as an
    experiment; without --dataset, the finished evaluation in --out or --run-name is.
    Exits 0 when scored, 2 on bad input (or credentials a tool refused), 3 when the Ray cluster
    or the experiment's tool cannot do the work, 130 when interrupted.
    """
    from datetime import datetime
    from pathlib import Path

    from sqlchorus.evaluation.runs import (
        EvalInterrupted,
        open_dataset,
        run_eval,
        score_prediction_file,
    )

    progress = not as_json and sys.stderr.isatty()
    log = (lambda message: None) if as_json else (lambda message: click.echo(message, err=True))
    folder: Path | None = None
    pairs: dict[str, int] | None = None
    if not dataset_name:
        if not (experiments and (out_dir or run_name)):
            _fail("Missing option '--dataset' (to record a finished evaluation, give --experiment TOOL with --out or --run-name).")
        from sqlchorus.evaluation.experiments import export_experiments
        from sqlchorus.evaluation.runs import eval_folder

        with _reported():
            folder = eval_folder(out_dir or run_name)
        recorded, failed = export_experiments(folder, experiments, progress=progress, log=log)
        click.echo(json.dumps({"out_dir": str(folder), "experiments": recorded}, default=str) if as_json
                   else "\n".join(r["line"] for r in recorded), nl=bool(recorded) or as_json)
        if failed is not None:
            _fail(str(failed), failed.exit_code)
        return
    if predictions and experiments and not out_dir:
        _fail("--experiment records the evaluation's folder: with --predictions, give it one with --out.")
    if predictions and pairs_file:
        _fail("--export-pairs needs the candidates of a run; it cannot be used with --predictions.")
        return
    if engine == "sqlite" and (where or no_transpile or transpile_predictions):
        _fail("--databases, --no-transpile and --transpile-predictions go with --engine postgresql, duckdb or mysql.")
        return
    if predictions and (ray_address or ray_resources):
        _fail("--ray answers questions on a cluster; scoring a prediction file (--predictions) runs here.")
        return
    if ray_resources and not ray_address:
        _fail("--ray-resource goes with --ray.")
        return
    if transpile_predictions and not predictions:
        _fail("--transpile-predictions goes with --predictions (a run's own SQL is already the engine's).")
        return
    if metrics is not None:
        from sqlchorus.evaluation.scoring import parse_metrics

        try:
            parse_metrics(metrics, "bird")
        except ValueError as e:
            _fail(str(e))
            return
    scoring = {"metrics": None if metrics is None else metrics.split(","), "ves_iterations": ves_iterations}
    # Ctrl-C while the questions run keeps the finished ones and says how to go on.
    interrupted = {"message": "Interrupted."}
    with _reported(lambda: interrupted["message"]):
        try:
            dataset = open_dataset(dataset_name)
            if engine != "sqlite":
                from sqlchorus.evaluation.engines import on_engine
                from sqlchorus.evaluation.runs import subset

                if options.get("allow_writable_role__negated") and not options.get("require_readonly_role__negated"):
                    # Finding the engine's databases opens each one before the settings are read
                    # (and --predictions reads none): they follow the same choice.
                    os.environ["SQLCHORUS_ALLOW_WRITABLE_ROLE"] = "1"
                dataset = on_engine(subset(dataset, limit), engine, where, transpile_gold=not no_transpile)
            if predictions:
                run = score_prediction_file(dataset, predictions, limit=limit, workers=workers,
                                            out_dir=out_dir, progress=progress, transpile=transpile_predictions,
                                            **scoring)
            else:
                stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
                folder = Path(out_dir or Path("evals") / (run_name or f"{dataset.name}-{stamp}"))
                interrupted["message"] = (f"Interrupted. Finished questions are in {folder / 'records.jsonl'}; "
                                          f"rerun with --out {folder} to resume.")
                settings = _examples_from_command_line(typed_settings(
                    options, names=EVAL_OPTIONS, trace_dir=None if no_trace else str(folder / "traces")))
                _check_model_names([settings.model, *settings.models.values()])
                if ray_address:
                    from sqlchorus.cluster.eval import cluster_runner
                    from sqlchorus.evaluation.runs import subset

                    asked = subset(dataset, limit)
                    with on_cluster(ray_address, settings, workers,
                                    [e.db_path for e in asked.examples if e.db_path is not None],
                                    role_resources=ray_resources, log=log) as (pool, limiter):
                        run = run_eval(dataset, settings, out_dir=folder, limit=limit, workers=workers,
                                       resume=not no_resume, progress=progress, log=log,
                                       runner=cluster_runner(pool, settings, limiter), **scoring)
                else:
                    run = run_eval(dataset, settings, out_dir=folder, limit=limit, workers=workers,
                                   resume=not no_resume, progress=progress, log=log, **scoring)
                if pairs_file:
                    from sqlchorus.runs.standalone_selection import export_pairs

                    labelled = [{**r, "db": r["db_path"]} for r in run.records if r.get("db_path")]
                    pairs = export_pairs(labelled, pairs_file, settings=settings.replace(trace_dir=None))
                    log(f"wrote {pairs['pairs']} selection pair(s) from {pairs['questions']} question(s) "
                        f"to {pairs_file}")
        except EvalInterrupted as e:
            _fail(f"Interrupted. {e.kept} of {e.total} question(s) are kept in {e.records_path}; "
                  f"rerun with --out {folder} to run the other {e.total - e.kept}.",
                  EXIT_INTERRUPTED, abandon_threads=e.abandoned > 0)
            return
    recorded, failed = [], None
    if experiments and run.out_dir is not None:
        from sqlchorus.evaluation.experiments import export_experiments

        recorded, failed = export_experiments(run.out_dir, experiments, progress=progress, log=log)
    if as_json:
        out = {**run.summary, "out_dir": str(run.out_dir) if run.out_dir else None,
               "files": {kind: str(p) for kind, p in run.paths.items()}}
        if pairs is not None:
            out["pairs"] = pairs
        if folder is not None:  # questions that ran, so each wrong one has a run to open
            from sqlchorus.evaluation.runs import wrong_answers

            out.update(wrong_answers(folder, run.records, limit=WRONG_LISTED))
        if experiments:
            out["experiments"] = recorded
        click.echo(json.dumps(out, default=str, ensure_ascii=False))
    else:
        _print_eval(run)
        for entry in recorded:
            click.echo(entry["line"])
    if failed is not None:  # the evaluation is kept and shown; the tool did not take it
        _fail(str(failed), failed.exit_code)


@cli.command("batch")
@click.option("--in", "in_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="JSON Lines: one {question, db, evidence?, id?, gold_sql?} object a line.")
@click.option("--out", "out_file", required=True, type=click.Path(dir_okay=False),
              help="JSON Lines of records, one per question as it finishes (the same record as eval's).")
@click.option("--db", "default_db", help="The database of lines that name none: a file or a server's URL.")
@click.option("--workers", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Questions answered at the same time (threads; with --ray, workers of the cluster).")
@settings_options(*EVAL_OPTIONS)
@click.option("--no-trace", is_flag=True, help="Write no trace files (default: <out>.traces beside the output).")
@click.option("--no-resume", is_flag=True, help="Start --out over instead of keeping the questions answered there.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@ray_options
def batch_command(in_file: str, out_file: str, default_db: str | None, workers: int, no_trace: bool,
                  no_resume: bool, as_json: bool, ray_address: str | None, ray_resources: tuple[str, ...],
                  **options: Any) -> None:
    """Answer a file of questions: JSON Lines in, one record per question out.

    Each record is the one `eval` writes (the SQL, the candidates, the cost, the run's id, its
    trace and checkpoints), plus the input's line; a question that came with gold_sql is
    judged against it, the others are `unscored`. Records are written as questions finish, so
    the same command again keeps them and asks only the rest. A line that cannot be used is
    said with its number and recorded as bad_input; the others go on. With --ray the questions
    are answered by a Ray cluster's workers. Exits 0 when every question has an answer, 1 when
    some has none or a line was bad, 2 on bad input, 3 when the Ray cluster cannot do the work,
    130 when interrupted.
    """
    from pathlib import Path

    from sqlchorus.evaluation.batch import read_batch, run_batch

    if ray_resources and not ray_address:
        _fail("--ray-resource goes with --ray.")
        return
    progress = not as_json and sys.stderr.isatty()
    log = (lambda message: None) if as_json else (lambda message: click.echo(message, err=True))
    traces = None if no_trace else str(Path(out_file).with_suffix("")) + ".traces"
    with _reported(lambda: f"Interrupted. Answered questions are in {out_file}; the same command goes on."):
        settings = _examples_from_command_line(typed_settings(options, names=EVAL_OPTIONS, trace_dir=traces))
        _check_model_names([settings.model, *settings.models.values()])
        kwargs = dict(out=out_file, default_db=default_db, workers=workers, resume=not no_resume,
                      progress=progress, log=log)
        if ray_address:
            from sqlchorus.cluster.eval import cluster_runner

            dataset, _, _ = read_batch(in_file, default_db)
            with on_cluster(ray_address, settings, workers,
                            [e.db_path for e in dataset.examples if e.db_path is not None],
                            role_resources=ray_resources, log=log) as (pool, limiter):
                run = run_batch(in_file, settings, runner=cluster_runner(pool, settings, limiter), **kwargs)
        else:
            run = run_batch(in_file, settings, **kwargs)
    summary = run.summary
    if as_json:
        click.echo(json.dumps(summary))
    else:
        click.echo(f"{summary['answered'] + summary['resumed']} of {summary['questions']} question(s) answered "
                   f"({summary['resumed']} kept from before, {summary['no_answer']} without an answer, "
                   f"{summary['bad_lines']} bad line(s)); records in {out_file}")
    if summary["no_answer"] or summary["bad_lines"]:
        sys.exit(EXIT_NO_ANSWER)


WRONG_LISTED = 10
"""Wrong answers ``sqlchorus eval`` names with their debug command; report.html lists them all."""


def _print_eval(run: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    s = run.summary
    out = Console(highlight=False)
    ex = "n/a" if s["ex"] is None else f"{s['ex']:g}%"
    on = f", on {s['engine']}" if s.get("engine", "sqlite") != "sqlite" else ""
    out.print(f"[bold]{s['dataset']}[/] ({s['benchmark']} semantics{on}): EX {ex} on {s['n_scored']} question(s) scored, "
              f"{s['n_correct']} correct")
    bird = [(name, key) for name, key in (("Soft-F1", "soft_f1"), ("R-VES", "r_ves")) if key in s]
    if bird:
        out.print(", ".join(f"{name} {_pct(s[key])}" for name, key in bird))
    if s["n_missing_db"]:
        out.print(f"[yellow]{s['n_missing_db']} question(s) not scored: their database is missing[/]")
    ran = run.n_run + run.n_resumed > 0  # a scored file has no candidates, so no upper bound
    table = Table("difficulty", "n", "EX", *(name for name, _ in bird), *(["upper bound"] if ran else []),
                  "missing db", title="By difficulty")
    for level, v in s["by_difficulty"].items():
        bound = [_pct(s.get("upper_bound_by_difficulty", {}).get(level))] if ran else []
        table.add_row(level, str(v["n"]), _pct(v["ex"]), *(_pct(v.get(key)) for _, key in bird), *bound,
                      str(v["n_missing_db"]))
    out.print(table)
    if s.get("by_generator") and ran:
        gens = Table("chosen generator", "n", "EX", title="By generator")
        for name, v in s["by_generator"].items():
            gens.add_row(name, str(v["n"]), _pct(v["ex"]))
        out.print(gens)
        cost = s["cost"]
        out.print(f"upper bound with perfect selection: {_pct(s['upper_bound'])}")
        from sqlchorus.tools.models.pricing import cost_text

        cached = f" ({cost['cached_calls']} from cache)" if cost.get("cached_calls") else ""
        out.print(f"cost: {cost_text(cost['cost_usd'], cost.get('unpriced_calls') or cost.get('unpriced_models'))}, "
                  f"{cost['model_calls']} model call(s){cached}, "
                  f"{cost['input_tokens']} tokens in, {cost['output_tokens']} out; "
                  f"median {s['latency_s']['median']} s per question", markup=False)
    # Each count under the scorer's own name for its verdict, as records, pages and report say it.
    errors = {verdict: s[key] for verdict, key in (("pred_error", "n_pred_errors"), ("timeout", "n_timeouts"),
                                                   ("gold_error", "n_gold_errors"),
                                                   ("missing_prediction", "n_missing_prediction")) if s.get(key)}
    if errors:
        out.print("errors: " + ", ".join(f"{verdict} {n}" for verdict, n in errors.items()), markup=False)
    for kind, path in run.paths.items():
        out.print(f"{kind}: {path}")
    if ran and run.out_dir is not None:
        _print_wrong(out, run)


def _print_wrong(out: Console, run: Any) -> None:
    """The wrong answers, each with the command that opens its run in the debugger."""
    from sqlchorus.evaluation.runs import wrong_answers

    found = wrong_answers(run.out_dir, run.records, limit=WRONG_LISTED)
    if not found["n_wrong"]:
        return
    opens = any(entry["debug"] for entry in found["wrong"])
    out.print(f"wrong answers: {found['n_wrong']} of {run.summary['n_scored']}"
              + ("; the command beside each opens its run in the debugger" if opens else ""))
    advice = []
    for entry in found["wrong"]:
        what = f"  question {entry['question']} ({entry['db']}, {entry['verdict']}): "
        if entry["debug"]:
            out.print(what + entry["debug"], markup=False, soft_wrap=True)
        else:
            out.print(what + entry["no_run"], markup=False, soft_wrap=True)
            if entry["advice"] and entry["advice"] not in advice:
                advice.append(entry["advice"])
    more = found["n_wrong"] - len(found["wrong"])
    if more:
        out.print(f"  ... and {more} more (report.html lists every question)")
    for line in advice:
        out.print(f"  {line}", markup=False, soft_wrap=True)


# -- servers -----------------------------------------------------------------------------------

_DBS = click.option("--db", "dbs", multiple=True, type=click.Path(dir_okay=False),
                    help="Database to answer over (a SQLite or DuckDB file, or a postgresql:// or mysql:// URL), "
                         "known by its file name without extension or its database's name (repeatable; default: the "
                         "bundled demo database).")
_HOST = click.option("--host", default="127.0.0.1", show_default=True,
                     help="Address to listen on; any but loopback needs a token in SQLCHORUS_TOKEN.")
_WORKERS = click.option("--workers", type=click.IntRange(1, 256), default=8, show_default=True,
                        help="Runs answered at once; more wait for a worker.")


def _service(dbs: tuple[str, ...], workers: int, options: dict[str, Any], host: str, extra: str,
             model: Any = None, origin: str = "serve") -> tuple[Any, str | None]:
    """The run service and token of a server command (``model``: the chat model when none is
    named; ``origin``: what its runs' spans are named); fails with a clear message."""
    try:
        from sqlchorus.interfaces.http_guard import server_token
        from sqlchorus.runs.service import RunService
    except ImportError as e:  # pragma: no cover - depends on the extras installed
        _fail(f"This command needs the {extra} extra: pip install 'sqlchorus[{extra}]' ({e}).")
    with _reported():
        token = server_token(host)
        settings = typed_settings(options, names=SERVER_OPTIONS)
        _check_model_names([settings.model, *settings.models.values()])
        databases = RunService.database_ids(list(dbs)) if dbs else None
        if model is not None and not settings.model and not settings.models:
            return RunService(databases, settings, workers=workers, model=model, origin=origin), token
        return RunService(databases, settings, workers=workers, origin=origin), token
    raise AssertionError("unreachable")


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _uvicorn(app: Any, host: str, port: int, what: str, url: str, token: str | None) -> None:
    """Say that ``what`` listens at ``url`` and whether it needs a token, then serve ``app``
    until Ctrl-C or SIGTERM; a port in use is a clear error."""
    import uvicorn

    click.echo(f"{what} at {url} ({'bearer token required' if token else 'no token: loopback only'}); "
               "Ctrl-C stops it.", err=True)

    from sqlchorus.interfaces.http_guard import json_http_protocol

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5,
                            http=json_http_protocol())
    server = uvicorn.Server(config)
    # uvicorn re-raises the SIGTERM it shut down for once its shutdown is done. Under Python's
    # default handler that ends the process there, before the command's ``finally`` closes its
    # run service, whose close saves the runs the store has not taken yet. This handler turns
    # it into SystemExit (exit code 143, as for a process ended by SIGTERM), which unwinds
    # through that ``finally``.
    main = threading.current_thread() is threading.main_thread()  # where signals can be handled
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm) if main else None
    try:
        server.run()
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
    if not server.started:
        _fail(f"Could not listen on {host}:{port} (in use, or not an address of this machine).")


@cli.command()
@_DBS
@_HOST
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="Port to listen on.")
@_WORKERS
@click.option("--max-body-bytes", type=click.IntRange(1024), default=64 * 1024, show_default=True,
              help="Largest request body taken (larger ones get 413).")
@settings_options(*SERVER_OPTIONS)
def serve(dbs: tuple[str, ...], host: str, port: int, workers: int, max_body_bytes: int, **options: Any) -> None:
    """Serve the REST API: POST /v1/ask, /v1/ask/stream (server-sent events), /v1/runs.

    Runs, their traces and checkpoints go where --trace-dir and --checkpoints say; several
    servers given the same --checkpoints postgresql://... URL share their runs. The OpenAPI
    document is at /openapi.json.
    """
    try:
        from sqlchorus.interfaces.rest import create_app
    except ImportError as e:  # pragma: no cover - depends on the extras installed
        _fail(f"sqlchorus serve needs the serve extra: pip install 'sqlchorus[serve]' ({e}).")
        return
    service, token = _service(dbs, workers, options, host, "serve")
    app = create_app(service, token=token, max_body_bytes=max_body_bytes, host=host)
    try:
        _uvicorn(app, host, port, f"sqlchorus serves {', '.join(service.paths)}", f"http://{host}:{port}/v1", token)
    finally:
        service.close()


@cli.command("mcp")
@_DBS
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
              help="stdio for a client that starts this command; http for streamable HTTP at /mcp.")
@_HOST
@click.option("--port", type=click.IntRange(1, 65535), default=8001, show_default=True, help="Port to listen on (http).")
@_WORKERS
@settings_options(*SERVER_OPTIONS)
def mcp_command(dbs: tuple[str, ...], transport: str, host: str, port: int, workers: int, **options: Any) -> None:
    """Serve the databases over MCP: ask, list_databases, search_schema, describe_table,
    execute_sql and validate_sql (all read-only), and each schema and run trace as a resource."""
    try:
        from sqlchorus.interfaces.mcp_server import build_server, http_app
    except ImportError as e:  # pragma: no cover - depends on the extras installed
        _fail(f"sqlchorus mcp needs the mcp extra: pip install 'sqlchorus[mcp]' ({e}).")
        return
    service, token = _service(dbs, workers, options, host if transport == "http" else "127.0.0.1", "mcp")
    server = build_server(service, host=host)
    try:
        if transport == "stdio":
            server.run("stdio")
        else:
            _uvicorn(http_app(server, host=host, token=token), host, port, "sqlchorus MCP server",
                     f"http://{host}:{port}/mcp", token)
    except KeyboardInterrupt:
        pass
    finally:
        service.close()


@cli.command("ui")
@_DBS
@_HOST
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True, help="Port to listen on.")
@click.option("--evals-dir", default="evals", show_default=True, type=click.Path(file_okay=False),
              help="Folder of evaluation runs, whose traces are listed by evaluation.")
@_WORKERS
@settings_options(*SERVER_OPTIONS)
def ui_command(dbs: tuple[str, ...], host: str, port: int, evals_dir: str, workers: int, **options: Any) -> None:
    """Open the viewer: every run on disk (its path through the graph, spans, model calls,
    candidates, cost), step-through from the page, live runs, plots across runs.

    Reads the traces in --trace-dir and the evaluations in --evals-dir; step-through and model
    calls need the checkpoints (--checkpoints). Asked questions run over --db.
    """
    try:
        from sqlchorus.interfaces.viewer import create_app as create_viewer
        from sqlchorus.runs.run_index import RunIndex
    except ImportError as e:  # pragma: no cover - depends on the extras installed
        _fail(f"sqlchorus ui needs the serve extra: pip install 'sqlchorus[serve]' ({e}).")
        return
    from sqlchorus.interfaces.viewer import NoModel

    service, token = _service(dbs, workers, options, host, "serve", model=NoModel(), origin="ui")
    if not service.settings.model and not service.settings.models:
        click.echo("No model is named: the viewer shows and steps through the runs on disk; asking a question "
                   "needs --model (or SQLCHORUS_MODEL).", err=True)
    # Beside its own store, the runs of a program's (the Python API's), unless a store is named.
    from sqlchorus.runs.run_stores import python_api_store

    index = RunIndex(service.settings.trace_folder, evals_dir, others=[] if _names_a_store() else [python_api_store()])
    app = create_viewer(service, index, token=token, host=host)
    try:
        _uvicorn(app, host, port, "sqlchorus viewer", f"http://{host}:{port}/", token)
    finally:
        service.close()


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}%"


def main() -> None:  # pragma: no cover - console entry point
    cli()
