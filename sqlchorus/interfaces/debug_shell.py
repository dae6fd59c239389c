"""The commands of ``sqlchorus debug``: one line in, text out, over a :class:`~sqlchorus.runs.debugger.Debugger`.

:class:`DebugShell` reads no terminal itself: the CLI feeds it lines from a prompt (with
completion) or from a file, so that scripts and tests drive it as a person would.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from sqlchorus.config.errors import SqlchorusError
from sqlchorus.core.candidates import fix_record
from sqlchorus.core.trace_file import load_spans, render_tree
from sqlchorus.evaluation.report import verdict_text
from sqlchorus.evaluation.runs import QuestionRun, score_branches
from sqlchorus.runs.debugger import DebugError, Debugger, node_names, state_keys

PROMPT = "(sqlchorus) "


@dataclass(frozen=True)
class Command:
    name: str
    short: str
    usage: str
    help: str


COMMANDS: tuple[Command, ...] = (
    Command("next", "n", "next", "run one step: every node of the next superstep (parallel generators together)"),
    Command("continue", "c", "continue", "run to the next breakpoint or the end"),
    Command("break", "b", "break NODE [if EXPR]", "stop before NODE (when EXPR, over the state's keys, holds); alone: list them"),
    Command("clear", "", "clear [NODE]", "remove NODE's breakpoint, or every one"),
    Command("state", "s", "state [KEY] [--json]", "the state at this checkpoint, or one key (candidates, the answer and the calls as tables; --json: one line of JSON, to edit and set)"),
    Command("diff", "d", "diff [A B]", "what the last step changed, or what differs between checkpoints A and B"),
    Command("set", "", "set KEY[PATH] JSON", "replace KEY's value (not merged), or one part of it (candidates[0].sql), as a new checkpoint; the run stays paused before the same nodes. A field, index or type the state does not declare is refused, and nothing changes"),
    Command("answer", "a", "answer TEXT", "the reply of the next model call, instead of calling the model"),
    Command("history", "h", "history", "every checkpoint as a tree: step, node, source, id, parent (forks visible)"),
    Command("fork", "f", "fork CHECKPOINT", "stand at an earlier checkpoint: the next step starts a branch"),
    Command("replay", "r", "replay [CHECKPOINT]", "run again from the first checkpoint (or CHECKPOINT) to the end with the kept model answers"),
    Command("trace", "t", "trace", "the span tree of this session so far"),
    Command("calls", "", "calls [NODE|all|N]", "the model calls of the last step (of NODE, or all on this branch): role, model, temperature, tokens, seconds, how answered; calls N: call N's prompt and answer"),
    Command("where", "w", "where", "the path so far (every step on this branch, edits marked) and the nodes due next"),
    Command("until", "u", "until NODE", "run until the run is before NODE (or a breakpoint, or the end)"),
    Command("display", "", "display [EXPR]", "show EXPR (over the state's keys) after every step; alone: show them now"),
    Command("undisplay", "", "undisplay [N]", "stop showing display N, or every one"),
    Command("rerun", "", "rerun", "run the next step again with the model itself (a fresh sample, not the kept answer) and show what changed"),
    Command("post-mortem", "pm", "post-mortem", "the last node that raised: its exception, where, and the state it met"),
    Command("sql", "", "sql QUERY", "run a read query on the run's database, through the same guard as the run's queries"),
    Command("export-test", "", "export-test PATH", "write a pytest test that replays this run and checks its SQL and result"),
    Command("teach", "", "teach [SQL]", "keep this run's question with this branch's answer (or SQL) as a taught example of the database, checked through its guard first"),
    Command("help", "?", "help [COMMAND]", "the commands, or one"),
    Command("quit", "q", "quit", "leave (the run stays in the checkpoint file)"),
)
_BY_NAME = {c.name: c for c in COMMANDS} | {c.short: c for c in COMMANDS if c.short}


def words_to_complete() -> list[str]:
    """Commands, node names and state keys: what tab completion offers."""
    return sorted({c.name for c in COMMANDS} | set(node_names()) | set(state_keys()))


# What each command's words are, for completion after the command word.
_NODE_ARGS = {"break", "clear", "until", "calls"}
_KEY_ARGS = {"state", "set", "display"}
_CHECKPOINT_ARGS = {"fork", "diff", "replay"}
_PATH_ARGS = {"export-test"}


class DebugShell:
    """Runs debugger commands one line at a time, printing to ``console``.

    ``question``: when the run is a question of an evaluation, each debugging branch is scored against
    the question's gold as it ends, and said beside what the evaluation scored, which stays as it
    was (:func:`~sqlchorus.evaluation.runs.score_branches`).
    """

    def __init__(self, debugger: Debugger, console: Console, question: QuestionRun | None = None):
        self.debugger = debugger
        self.out = console
        self.failed = 0
        self.question = question
        # The ends already there when the session opened are said by show_branches, not as news.
        self._judged: set[str] = set()
        if question is not None:
            ends = debugger.ends()
            self._judged = {e["checkpoint"] for e in ends["branches"]}
            if ends["original"] is not None:
                self._judged.add(ends["original"]["checkpoint"])
        self._handlers: dict[str, Callable[[list[str], str], None]] = {
            "next": self._next, "continue": self._continue, "break": self._break, "clear": self._clear,
            "state": self._state, "diff": self._diff, "set": self._set, "answer": self._answer,
            "history": self._history, "fork": self._fork, "replay": self._replay, "trace": self._trace,
            "export-test": self._export, "teach": self._teach, "help": self._help, "calls": self._calls, "where": self._where,
            "until": self._until, "display": self._display, "undisplay": self._undisplay, "rerun": self._rerun,
            "post-mortem": self._post_mortem, "sql": self._sql,
        }

    def complete(self, line: str) -> list[str]:
        """What Tab offers for the last word of ``line`` (the text before the cursor): commands
        first, then each command's own words: node names, state keys, checkpoint ids, paths."""
        words = line.split(" ")
        word = words[-1]
        if len(words) == 1:
            return sorted(n for n in _BY_NAME if n.startswith(word) and len(n) > 2)
        command = _BY_NAME.get(words[0])
        name = command.name if command else ""
        if name == "help":
            options = [c.name for c in COMMANDS]
        elif name in _NODE_ARGS:
            options = node_names() + (["all"] if name == "calls" else [])
            if name == "break" and len(words) > 2:  # after the node: "if", then keys
                options = ["if"] if len(words) == 3 else state_keys()
        elif name in _KEY_ARGS:
            if name == "set" and len(words) > 2:
                return []
            options = state_keys()
        elif name in _CHECKPOINT_ARGS:
            ids = [h["id"] for h in self.debugger.history()]
            return [i for i in ids if i.startswith(word)] or [i for i in ids if word and word in i]
        elif name in _PATH_ARGS:
            return _paths(word)
        else:
            return []
        return [o for o in options if o.startswith(word)]

    def where(self) -> None:
        """One line on where the run stands."""
        d = self.debugger
        inside = d.inside()
        if inside:
            self.out.print(f"[bold]run {d.run_id}[/] paused inside [cyan]{inside[0]['node']}[/]'s search before "
                           f"[cyan]{', '.join(n for row in inside for n in row['next'])}[/] (its checkpoint "
                           f"{inside[0]['checkpoint']}, in the run's {d.checkpoint_id})")
        elif d.finished:
            result = d.result()
            self.out.print(f"[bold]run {d.run_id}[/] ended at checkpoint {d.checkpoint_id}: "
                           + (f"answer [green]{escape(result.sql)}[/]" if result.sql else "no answer"))
        else:
            self.out.print(f"[bold]run {d.run_id}[/] paused before [cyan]{', '.join(d.next_nodes)}[/] "
                           f"(checkpoint {d.checkpoint_id})")

    def run(self, line: str) -> bool:
        """Carry out one line; False when the session should end."""
        line = line.strip()
        if not line or line.startswith("#"):
            return True
        word, _, rest = line.partition(" ")
        command = _BY_NAME.get(word)
        if command is None:
            self._fail(f"No command {word!r}; type help for the list.")
            return True
        if command.name == "quit":
            return False
        try:
            args = shlex.split(rest) if command.name not in ("set", "answer", "break", "display", "sql", "teach") else rest.split()
            self._handlers[command.name](args, rest.strip())
            self._judge_end()
        except (SqlchorusError, ValueError) as e:
            self._fail(str(e))
        except Exception as e:  # noqa: BLE001 - whatever a command meets, the session goes on
            self._fail(f"{command.name} failed: {type(e).__name__}: {e}")
            self.where()
        except KeyboardInterrupt:
            self.interrupted()
        return True

    def interrupted(self) -> None:
        """After Ctrl-C: the step's model work is told to stop and waited for (the next step must
        not queue behind an engine still evaluating a prompt no one wants), then one line."""
        stopped = self.debugger.run.stop()
        self.out.print("[yellow]Interrupted[/]: the run stays at its last checkpoint."
                       + ("" if stopped else " (the model is still stopping)"))
        self.where()

    # -- an evaluation's question ------------------------------------------------------------

    def show_branches(self) -> None:
        """What the evaluation scored for the question, then each debugging branch of its run
        that has ended, scored against the gold."""
        if self.question is None:
            return
        record = self.question.record
        prediction = record.get("prediction")
        self.out.print(f"scored {verdict_text(record)}: " + (prediction if prediction else "no answer"),
                       markup=False, highlight=False)
        ends = self.debugger.ends()
        for entry in score_branches(self.question.folder, record, ends["branches"]):
            self._print_branch(entry, ended=False)

    def _judge_end(self) -> None:
        """After a command: a branch that has just ended is scored against the gold and said."""
        if self.question is None or not self.debugger.finished or self.debugger.checkpoint_id in self._judged:
            return
        ends = self.debugger.ends()
        if ends["original"] is not None:
            self._judged.add(ends["original"]["checkpoint"])
        fresh = [e for e in ends["branches"] if e["checkpoint"] not in self._judged]
        for entry in score_branches(self.question.folder, self.question.record, fresh):
            self._judged.add(entry["checkpoint"])
            self._print_branch(entry, ended=True)

    def _print_branch(self, entry: dict[str, Any], *, ended: bool) -> None:
        # The scorer's own word where it says more than right or wrong (pred_error, timeout, ...).
        why = "" if entry["verdict"] in ("correct", "wrong") else f" ({entry['verdict']})"
        style = "green" if entry["correct"] else "red"
        came = [f"from {entry['forked_from']}"] if entry.get("forked_from") else []
        if entry.get("edits"):
            came.append(f"edited {', '.join(entry['edits'])}")
        sql = entry.get("sql") or "no answer"
        self.out.print(f"branch {entry['checkpoint']}{' ended' if ended else ''}"
                       + (f" ({escape('; '.join(came))})" if came else "") + ": "
                       f"[{style}]{escape(entry['label'])}[/]{escape(why)} against the gold: {_shown(sql)}",
                       highlight=False, soft_wrap=True)
        if ended:
            self.out.print(f"[dim]the evaluation's record stays {escape(verdict_text(self.question.record))}[/]",
                           highlight=False)

    def _fail(self, message: str) -> None:
        self.failed += 1
        # One line, however long: the terminal wraps it, the output keeps it whole.
        self.out.print(f"[red]error[/] {escape(message)}", highlight=False, soft_wrap=True)

    # -- commands ---------------------------------------------------------------------------

    def _next(self, args: list[str], rest: str) -> None:
        ran = self.debugger.step()
        self.out.print(f"ran {', '.join(ran)}")
        self._print_diff(self.debugger.diff())
        self._stopped()

    def _continue(self, args: list[str], rest: str) -> None:
        stopped = self.debugger.cont()
        if stopped:
            self.out.print(f"breakpoint before [cyan]{stopped}[/]")
        self._stopped()

    def _until(self, args: list[str], rest: str) -> None:
        if len(args) != 1:
            raise DebugError("Usage: until NODE.")
        stopped = self.debugger.until(args[0])
        if stopped and stopped != args[0]:
            self.out.print(f"breakpoint before [cyan]{stopped}[/]")
        self._stopped()

    def _stopped(self) -> None:
        """After a step: the displays, then where the run stands."""
        self._show_displays()
        self.where()

    def _show_displays(self) -> None:
        for number, text, value in self.debugger.displayed():
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
            if len(shown) > 300:
                shown = shown[:297] + "..."
            self.out.print(f"[dim]{number}:[/] {escape(text)} = {escape(shown)}", highlight=False)

    def _display(self, args: list[str], rest: str) -> None:
        if rest:
            self.debugger.display(rest)
        if not self.debugger.displays:
            self.out.print("no displays")
        self._show_displays()

    def _undisplay(self, args: list[str], rest: str) -> None:
        if len(args) > 1 or (args and not args[0].isdigit()):
            raise DebugError("Usage: undisplay [N] (a number from display).")
        self.debugger.undisplay(int(args[0]) if args else None)
        self.out.print("removed")

    def _where(self, args: list[str], rest: str) -> None:
        path = self.debugger.path()
        steps = [row for row in path if row["node"] not in ("(input)", "__start__")]
        if not steps:
            self.out.print("[dim]no step has run yet[/]")
        for row in steps:
            label = "[yellow](edit)[/]" if row["node"] == "(edit)" else escape(row["node"])
            self.out.print(f"  step {row['step']:>3}  {label}  [dim]{row['id']}[/]", highlight=False)
        inside = self.debugger.inside()
        if inside:
            search = [h for h in self.debugger.history(inner=True) if h.get("ns") == inside[0]["ns"]]
            for row in search:
                if row["node"] != "(search input)":
                    self.out.print(f"    [magenta]{row['search']}[/] step {row['step']:>3}  {escape(row['node'])}  "
                                   f"[dim]{row['id']}[/]", highlight=False)
            self.out.print(f"> next, inside {inside[0]['node']}: [cyan]{', '.join(inside[0]['next'])}[/]")
            return
        pending = self.debugger.next_nodes
        self.out.print(f"> next: [cyan]{', '.join(pending)}[/]" if pending else "> the run has ended")

    def _rerun(self, args: list[str], rest: str) -> None:
        ran, changes = self.debugger.rerun()
        self.out.print(f"reran {', '.join(ran)} with the model (a fresh sample)")
        if not changes:
            self.out.print("[dim]same as the step the run took before[/]")
        for key, (before, after) in changes.items():
            if isinstance(before, list) and isinstance(after, list):
                # Lists the step appended to: what each step added is what differs.
                same = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
                before, after = before[same:], after[same:]
            self._print_value(key, before, brief=True, prefix="was ")
            self._print_value(key, after, brief=True, prefix="now ")
        self._stopped()

    def _post_mortem(self, args: list[str], rest: str) -> None:
        failure = self.debugger.failure
        if failure is None:
            self.out.print("no node has raised in this session")
            return
        self.out.print(f"[bold red]{escape(failure.node)}[/] raised {escape(failure.error)}")
        self.out.print(f"[dim]at checkpoint {failure.checkpoint}; the run is paused before {escape(failure.node)}[/]")
        self.out.print(failure.traceback.rstrip(), markup=False, highlight=False)
        self.out.print("the state it met:")
        for key, value in failure.state.items():
            self._print_value(key, value, brief=True)

    def _calls(self, args: list[str], rest: str) -> None:
        if len(args) > 1:
            raise DebugError("Usage: calls [NODE|all|N].")
        if args and args[0].lstrip("-").isdigit():
            self._print_call(self.debugger.call(int(args[0])))
            return
        every = bool(args) and args[0] == "all"
        rows = self.debugger.calls_of(None if every or not args else args[0], every=every)
        if not rows:
            self.out.print("no model calls" + ("" if args else " in the last step (calls all: every one on this branch)"))
            return
        table = Table("#", "node", "role", "model", "temp", "in", "out", "s", "how", box=None)
        for r in rows:
            table.add_row(*(escape(str(v)) for v in (
                r["n"], r["node"], r["role"], r["model"], "" if r["temperature"] is None else r["temperature"],
                r["input_tokens"], r["output_tokens"], r["seconds"], r["how"])))
        self.out.print(table)
        self.out.print("[dim]calls N shows call N's prompt and answer[/]")

    def _print_call(self, call: dict[str, Any]) -> None:
        self.out.print(f"[bold]call {call['n']}[/]: {escape(str(call['node']))} ({escape(str(call['role']))}) "
                       f"model {escape(str(call['model']))}, temperature {call['temperature']}, "
                       f"{call['input_tokens']} in / {call['output_tokens']} out, {call['seconds']} s, {call['how']}",
                       highlight=False)
        if call["messages"] is None:
            self.out.print("[dim]its prompt and answer were not kept (a call that failed, or a run without a call log)[/]")
            return
        for role, content in call["messages"]:
            self.out.rule(f"{role}", align="left", style="dim")
            self.out.print(_printable(str(content)), markup=False, highlight=False)
        self.out.rule("answer", align="left", style="dim")
        self.out.print(_printable(str(call["answer"])), markup=False, highlight=False)

    def _break(self, args: list[str], rest: str) -> None:
        if not args:
            if not self.debugger.breakpoints:
                self.out.print("no breakpoints")
            for node, condition in self.debugger.breakpoints.items():
                self.out.print(escape(f"{node}" + (f" if {condition.text}" if condition else "")))
            return
        node, _, condition = rest.partition(" if ")
        self.debugger.add_break(node.strip(), condition.strip() or None)
        self.out.print(escape(f"breakpoint before {node.strip()}" + (f" if {condition.strip()}" if condition.strip() else "")))

    def _clear(self, args: list[str], rest: str) -> None:
        self.debugger.clear(args[0] if args else None)
        self.out.print("cleared")

    def _state(self, args: list[str], rest: str) -> None:
        as_json = "--json" in args
        args = [a for a in args if a != "--json"]
        if len(args) > 1:
            raise DebugError("Usage: state [KEY] [--json].")
        if as_json:  # one line of JSON, to copy into a set command
            value = self.debugger.state(args[0]) if args else self.debugger.state()
            self.out.print(json.dumps(value, ensure_ascii=False, default=str), markup=False, highlight=False,
                           soft_wrap=True)
            return
        if args:
            self._print_value(args[0], self.debugger.state(args[0]))
            return
        for key, value in self.debugger.state().items():
            self._print_value(key, value, brief=True)

    def _diff(self, args: list[str], rest: str) -> None:
        if len(args) not in (0, 2):
            raise DebugError("diff takes no checkpoint or two.")
        self._print_diff(self.debugger.diff(*args) if args else self.debugger.diff())

    def _set(self, args: list[str], rest: str) -> None:
        target, _, text = rest.partition(" ")
        if not target or not text.strip():
            raise DebugError("Usage: set KEY JSON, or set KEY[0].field JSON (for example: set fix_round 0, "
                             'set candidates[0].sql "SELECT 1").')
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise DebugError(f"The value is not JSON: {e.msg} at character {e.pos + 1}.") from None
        except RecursionError:
            raise DebugError("The value is nested too deeply to read.") from None
        checkpoint = self.debugger.set(target, value)
        self.out.print(f"set {target} at a new checkpoint {checkpoint}")
        self.where()

    def _sql(self, args: list[str], rest: str) -> None:
        if not rest:
            raise DebugError("Usage: sql QUERY (one read query on the run's database).")
        result = self.debugger.query(rest)
        table = Table(*(_shown(str(c)) for c in result.columns))
        for row in result.rows[:50]:
            table.add_row(*("NULL" if v is None else _shown(str(v)) for v in row))
        self.out.print(table)
        more = len(result.rows) - 50
        self.out.print(f"[dim]{len(result.rows)} row(s){f', {more} not shown' if more > 0 else ''}"
                       f"{' (cut at the row cap)' if result.truncated else ''}[/]")

    def _answer(self, args: list[str], rest: str) -> None:
        if not rest:
            raise DebugError("Usage: answer TEXT.")
        self.debugger.answer(rest)
        self.out.print("the next model call gets that answer")

    def _history(self, args: list[str], rest: str) -> None:
        rows = self.debugger.history(inner=True)
        inside = self.debugger.inside()
        current = inside[0]["checkpoint"] if inside else self.debugger.checkpoint_id
        nodes: dict[str | None, Tree] = {}
        root = Tree(f"run {self.debugger.run_id}")
        for row in rows:
            mark = " [bold green]<- here[/]" if row["id"] == current else ""
            search = f"[magenta]{row['search']}[/] " if row.get("search") else ""
            label = f"{search}step {row['step']}  {row['node']}  [dim]{row['source']}[/]  {row['id']}{mark}"
            parent = nodes.get(row["parent"], root)
            nodes[row["id"]] = parent.add(label)
        self.out.print(root)

    def _fork(self, args: list[str], rest: str) -> None:
        if len(args) != 1:
            raise DebugError("Usage: fork CHECKPOINT (an id from history, or any unique part of it: its last 8 characters do).")
        self.debugger.fork(args[0])
        self.where()

    def _replay(self, args: list[str], rest: str) -> None:
        result, served, called = self.debugger.replay(args[0] if args else None)
        self.out.print(f"replayed: {served} kept answer(s) served, {called} model call(s) made")
        self._print_value("answer", {"sql": result.sql, "columns": result.columns, "rows": result.rows})
        self.where()

    def _trace(self, args: list[str], rest: str) -> None:
        path = self.debugger.tracer.path
        if path is None or not path.exists() or not path.stat().st_size:
            self.out.print("no spans yet" if path else "no trace file (--no-trace)")
            return
        spans = load_spans(path)
        for line in render_tree(spans):
            self.out.print(line, highlight=False, markup=False)
        if any(span.name.startswith("chat ") for span in _walk(spans)):
            self.out.print("[dim]calls all lists the model calls; calls N shows one's prompt and answer[/]")

    def _export(self, args: list[str], rest: str) -> None:
        if len(args) != 1:
            raise DebugError("Usage: export-test PATH.")
        self.out.print(f"wrote {self.debugger.export_test(args[0])}")

    def _teach(self, args: list[str], rest: str) -> None:
        entry = self.debugger.teach(rest.strip() or None)
        self.out.print(f"taught {entry['id']}: {entry['question']!r} -> {entry['sql']}", markup=False, highlight=False)
        self.out.print("[dim]the next runs on this database show it to the generators; sqlchorus check re-asks it[/]")

    def _help(self, args: list[str], rest: str) -> None:
        chosen = [_BY_NAME[args[0]]] if args and args[0] in _BY_NAME else COMMANDS
        if args and args[0] not in _BY_NAME:
            raise DebugError(f"No command {args[0]!r}.")
        table = Table("command", "short", "what it does", box=None)
        for c in chosen:
            table.add_row(escape(c.usage), c.short, escape(c.help))
        self.out.print(table)

    # -- printing ---------------------------------------------------------------------------

    def _print_diff(self, changes: dict[str, tuple[Any, Any]]) -> None:
        if not changes:
            self.out.print("[dim]no change[/]")
        for key, (before, after) in changes.items():
            if isinstance(before, list) and isinstance(after, list) and after[:len(before)] == before:
                # An appended list (usage, errors, candidates): only what was added is news.
                self._print_value(key, after[len(before):], brief=True, prefix="added to ")
                continue
            self._print_value(key, before, brief=True, prefix="- ")
            self._print_value(key, after, brief=True, prefix="+ ")

    def _print_value(self, key: str, value: Any, *, brief: bool = False, prefix: str = "") -> None:
        if key == "usage" and isinstance(value, list) and value and not prefix:
            table = Table("node", "role", "model", "in", "out", "ms", "how", title="usage (calls shows each call's prompt and answer)")
            for u in value:
                how = next((k for k in ("typed", "replayed", "cached") if u.get(k)), "model")
                table.add_row(*(_shown(str(u.get(k, ""))) for k in ("node", "role", "model", "input_tokens", "output_tokens", "latency_ms")), how)
            self.out.print(table)
            return
        if key == "candidates" and isinstance(value, list) and value:
            table = Table("id", "status", "rows", "fixes", "sql", "error", title=f"{prefix}candidates")
            for c in value:
                table.add_row(*(_shown(str(v)) for v in (
                    c.get("id", ""), c.get("status", ""), c.get("row_count"), fix_record({"fix_attempts": 0, **c})["rounds"],
                    c.get("sql") or "", (c.get("error") or "")[:80])))
            self.out.print(table)
            return
        if key == "answer" and isinstance(value, dict) and value.get("columns"):
            self.out.print(f"{prefix}answer: {_shown(str(value.get('sql')))}")
            table = Table(*(_shown(str(c)) for c in value["columns"]))
            for row in (value.get("rows") or [])[:20]:
                table.add_row(*("NULL" if v is None else _shown(str(v)) for v in row))
            self.out.print(table)
            return
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str, indent=None if brief else 2)
        if brief and len(text) > 200:
            text = text[:197] + "..."
        self.out.print(f"{prefix}[bold]{key}[/]: {_shown(text)}", highlight=False)


def _paths(word: str) -> list[str]:
    """Files and folders that start with ``word`` (folders end in /), for a path argument."""
    folder, slash, stem = word.rpartition("/")
    base = Path(os.path.expanduser(folder)) if folder else Path("/" if slash else ".")
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    prefix = folder + slash
    return [prefix + e.name + ("/" if e.is_dir() else "") for e in entries if e.name.startswith(stem)
            and (stem.startswith(".") or not e.name.startswith("."))][:200]


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    """``text`` with control characters shown as escapes: a value from the database or a model
    never reaches the terminal as a command to it."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _shown(text: str) -> str:
    """``text`` safe for rich markup and for the terminal."""
    return escape(_printable(text))


def _walk(spans: list[Any]) -> Any:
    """Every span of a tree of span nodes."""
    stack = list(spans)
    while stack:
        span = stack.pop()
        yield span
        stack.extend(span.children)
