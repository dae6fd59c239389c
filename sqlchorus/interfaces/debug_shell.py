"""The commands of ``sqlchorus debug``: one line in, text out, over a :class:`~sqlchorus.runs.debugger.Debugger`.

:class:`DebugShell` reads no terminal itself: the CLI feeds it lines from a prompt (with
completion) or from a file, so that scripts and tests drive it as a person would.
"""

from __future__ import annotations

import json
import shlex
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typing_extensions
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from sqlchorus.config.errors import SqlchorusError
from sqlchorus.core.state import SqlchorusState
from sqlchorus.core.trace_file import load_spans, render_tree
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
    Command("state", "s", "state [KEY]", "the state at this checkpoint, or one key (candidates and results as tables)"),
    Command("diff", "d", "diff [A B]", "what the last step changed, or what differs between checkpoints A and B"),
    Command("set", "", "set KEY JSON", "replace KEY's value (not merged), as a new checkpoint; the run stays paused before the same nodes"),
    Command("answer", "a", "answer TEXT", "the reply of the next model call, instead of calling the model"),
    Command("history", "h", "history", "every checkpoint as a tree: step, node, source, id, parent (forks visible)"),
    Command("fork", "f", "fork CHECKPOINT", "stand at an earlier checkpoint: the next step starts a branch"),
    Command("replay", "r", "replay [CHECKPOINT]", "run again from the first checkpoint (or CHECKPOINT) to the end with the kept model answers"),
    Command("trace", "t", "trace", "the span tree of this session so far"),
    Command("export-test", "", "export-test PATH", "write a pytest test that replays this run and checks its SQL and result"),
    Command("help", "?", "help [COMMAND]", "the commands, or one"),
    Command("quit", "q", "quit", "leave (the run stays in the checkpoint file)"),
)
_BY_NAME = {c.name: c for c in COMMANDS} | {c.short: c for c in COMMANDS if c.short}


def words_to_complete() -> list[str]:
    """Commands, node names and state keys: what tab completion offers."""
    return sorted({c.name for c in COMMANDS} | set(node_names()) | set(state_keys()))


class DebugShell:
    """Runs debugger commands one line at a time, printing to ``console``."""

    def __init__(self, debugger: Debugger, console: Console):
        self.debugger = debugger
        self.out = console
        self.failed = 0
        self._handlers: dict[str, Callable[[list[str], str], None]] = {
            "next": self._next, "continue": self._continue, "break": self._break, "clear": self._clear,
            "state": self._state, "diff": self._diff, "set": self._set, "answer": self._answer,
            "history": self._history, "fork": self._fork, "replay": self._replay, "trace": self._trace,
            "export-test": self._export, "help": self._help,
        }

    def where(self) -> None:
        """One line on where the run stands."""
        d = self.debugger
        if d.finished:
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
            args = shlex.split(rest) if command.name not in ("set", "answer", "break") else rest.split()
            self._handlers[command.name](args, rest.strip())
        except (SqlchorusError, ValueError) as e:
            self._fail(str(e))
        except KeyboardInterrupt:
            self.out.print("[yellow]Interrupted[/]: the run stays at its last checkpoint.")
            self.where()
        return True

    def _fail(self, message: str) -> None:
        self.failed += 1
        self.out.print(f"[red]error[/] {escape(message)}", highlight=False)

    # -- commands ---------------------------------------------------------------------------

    def _next(self, args: list[str], rest: str) -> None:
        ran = self.debugger.step()
        self.out.print(f"ran {', '.join(ran)}")
        self._print_diff(self.debugger.diff())
        self.where()

    def _continue(self, args: list[str], rest: str) -> None:
        stopped = self.debugger.cont()
        if stopped:
            self.out.print(f"breakpoint before [cyan]{stopped}[/]")
        self.where()

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
        key, _, text = rest.partition(" ")
        if not key or not text.strip():
            raise DebugError("Usage: set KEY JSON (for example: set fix_round 0).")
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise DebugError(f"The value is not JSON: {e.msg} at character {e.pos + 1}.") from None
        _check_type(key.strip(), value, self.debugger.state(key.strip()))
        checkpoint = self.debugger.set(key.strip(), value)
        self.out.print(f"set {key.strip()} at a new checkpoint {checkpoint}")
        self.where()

    def _answer(self, args: list[str], rest: str) -> None:
        if not rest:
            raise DebugError("Usage: answer TEXT.")
        self.debugger.answer(rest)
        self.out.print("the next model call gets that answer")

    def _history(self, args: list[str], rest: str) -> None:
        rows = self.debugger.history()
        current = self.debugger.checkpoint_id
        nodes: dict[str | None, Tree] = {}
        root = Tree(f"run {self.debugger.run_id}")
        for row in rows:
            mark = " [bold green]<- here[/]" if row["id"] == current else ""
            label = f"step {row['step']}  {row['node']}  [dim]{row['source']}[/]  {row['id']}{mark}"
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
        for line in render_tree(load_spans(path)):
            self.out.print(line, highlight=False, markup=False)

    def _export(self, args: list[str], rest: str) -> None:
        if len(args) != 1:
            raise DebugError("Usage: export-test PATH.")
        self.out.print(f"wrote {self.debugger.export_test(args[0])}")

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
        for key, (_, after) in changes.items():
            self._print_value(key, after, brief=True, prefix="changed ")

    def _print_value(self, key: str, value: Any, *, brief: bool = False, prefix: str = "") -> None:
        if key == "candidates" and isinstance(value, list) and value:
            table = Table("id", "status", "rows", "fixes", "sql", "error", title=f"{prefix}candidates")
            for c in value:
                table.add_row(*(escape(str(v)) for v in (
                    c.get("id", ""), c.get("status", ""), c.get("row_count"), c.get("fix_attempts"),
                    c.get("sql") or "", (c.get("error") or "")[:80])))
            self.out.print(table)
            return
        if key == "answer" and isinstance(value, dict) and value.get("columns"):
            self.out.print(f"{prefix}answer: {escape(str(value.get('sql')))}")
            table = Table(*(escape(str(c)) for c in value["columns"]))
            for row in (value.get("rows") or [])[:20]:
                table.add_row(*("NULL" if v is None else escape(str(v)) for v in row))
            self.out.print(table)
            return
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str, indent=None if brief else 2)
        if brief and len(text) > 200:
            text = text[:197] + "..."
        self.out.print(f"{prefix}[bold]{key}[/]: {escape(text)}", highlight=False)


_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "true or false", int: "a number", float: "a number"}


def _declared_kind(key: str) -> str | None:
    """What JSON kind the state declares for ``key``."""
    hint = typing.get_type_hints(SqlchorusState).get(key)
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    origin = typing.get_origin(hint) or hint
    if typing_extensions.is_typeddict(origin):
        return _KINDS[dict]
    return _KINDS.get(origin) if isinstance(origin, type) else None


def _check_type(key: str, value: Any, current: Any) -> None:
    """A value of another JSON kind than the key's is refused, with both named."""
    want = _declared_kind(key) or (_KINDS.get(type(current)) if current is not None else None)
    got = _KINDS.get(type(value), type(value).__name__)
    if want and want != got:
        raise DebugError(f"{key} holds {want}; {json.dumps(value)[:60]} is {got}.")
