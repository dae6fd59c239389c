"""Stepping through a run: pause before any node, look at the state, change it, go on, go back.

A :class:`Debugger` holds one run (a LangGraph thread in the checkpoint file, its id the run's)
and a position in it, a checkpoint. ``step`` runs the next superstep (every node of it: the
generators run together), ``cont`` runs to the next breakpoint or the end, ``set`` replaces a
state value, ``fork`` moves to an earlier checkpoint so that the next step starts a branch, and
``replay`` runs again from a checkpoint. Every model call is kept in the run's call log; a run
opened again serves those answers instead of calling the model, so only a step whose input an
edit changed reaches the model. ``answer`` supplies the reply to the next model call by hand.

The ``sqlchorus debug`` command and the web viewer both drive this class.
"""

from __future__ import annotations

import ast
import json
import weakref
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from langgraph.graph import START
from langgraph.types import Command, Overwrite

from sqlchorus.config.errors import SqlchorusError
from sqlchorus.config.settings import Settings
from sqlchorus.core.checkpoints import UnknownRunError
from sqlchorus.core.state import SqlchorusState
from sqlchorus.core.tracing import apply_update
from sqlchorus.graph import routing
from sqlchorus.graph.build import NODES, ROUTED
from sqlchorus.graph.generators import GENERATORS
from sqlchorus.runs.result import Result, result_from_state
from sqlchorus.runs.session import OpenRun, Session

MAX_BREAK_CHECKS = 1_000
"""Breakpoints whose condition is false are passed at most this many times in one ``cont``."""


class DebugError(SqlchorusError):
    """A debugger command that cannot be carried out; the session goes on."""

    kind = "debug"
    http_status = 409


def state_keys() -> list[str]:
    """The keys of a run's state, for completion and checks."""
    return list(SqlchorusState.__annotations__)


def node_names() -> list[str]:
    """Every node a run can pause before."""
    return list(dict.fromkeys([*NODES, *(g.node for g in GENERATORS.values())]))


class Condition:
    """A breakpoint's condition: a Python expression over the state's keys, evaluated without
    builtins beyond ``len``, ``any``, ``all``, ``min``, ``max``, ``sum``, ``sorted``, ``set``.

    Only comparisons, boolean operators, arithmetic, literals, names, subscripts, attribute-free
    calls of those functions and comprehensions are accepted, so a condition cannot reach
    anything outside the state.

    Raises:
        DebugError: the expression does not parse or uses something else.
    """

    FUNCTIONS = {"len": len, "any": any, "all": all, "min": min, "max": max, "sum": sum, "sorted": sorted, "set": set}
    _ALLOWED = (
        ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.Compare, ast.Eq,
        ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.Is, ast.IsNot, ast.BinOp, ast.Add,
        ast.Sub, ast.Mult, ast.Div, ast.Mod, ast.Constant, ast.Name, ast.Load, ast.Subscript, ast.Slice,
        ast.List, ast.Tuple, ast.Call, ast.GeneratorExp, ast.ListComp, ast.comprehension, ast.Store,
        ast.IfExp,
    )

    def __init__(self, text: str):
        self.text = text
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as e:
            raise DebugError(f"The condition {text!r} does not parse: {e.msg}.") from None
        for node in ast.walk(tree):
            if not isinstance(node, self._ALLOWED):
                raise DebugError(f"The condition {text!r} uses {type(node).__name__}, which conditions cannot.")
            if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in self.FUNCTIONS):
                raise DebugError(f"A condition calls only {', '.join(self.FUNCTIONS)}.")
        self._code = compile(tree, "<condition>", "eval")

    def holds(self, state: Mapping[str, Any]) -> bool:
        names = {key: state.get(key) for key in state_keys()}
        try:
            return bool(eval(self._code, {"__builtins__": {}}, {**self.FUNCTIONS, **names}))  # noqa: S307 - checked above
        except Exception as e:  # a condition that fails on this state stops there, and says why
            raise DebugError(f"The condition {self.text!r} failed on this state: {type(e).__name__}: {e}") from None


class Debugger:
    """One run, paused at a checkpoint (see the module docstring).

    Build one with :meth:`start` (a new run, paused before its first node) or :meth:`open` (an
    earlier run of ``ask``, ``eval`` or ``debug``, at any of its checkpoints).
    """

    def __init__(self, session: Session, run: OpenRun, run_id: str):
        self.session = session
        self.run = run
        self.run_id = run_id
        self.settings = run.settings
        self.store = run.store
        self.resources = run.resources
        self.graph = run.graph
        self.calls = run.calls
        self.context = run.context
        self.tracer = run.tracer  # the trace of this debugging session
        self.breakpoints: dict[str, Condition | None] = {}
        self.notes: list[str] = []
        # A debugger left open still finishes its trace before the interpreter goes.
        self._finalizer = weakref.finalize(self, run.close)
        self.config: dict[str, Any] = {"configurable": {"thread_id": run_id}}

    # -- opening ----------------------------------------------------------------------------

    @classmethod
    def start(cls, question: str, db: str | Path | None = None, *, evidence: str = "",
              settings: Settings | None = None, session: Session | None = None,
              breakpoints: Sequence[str] = ()) -> Debugger:
        """A new run of ``question``, paused before its first node.

        Raises:
            EmptyQuestionError, QuestionTooLongError: the question cannot be asked.
            CheckpointFileError: checkpoints are off or unusable.
        """
        session = session or Session(settings)
        for name in breakpoints:  # refused before anything is opened
            _known_node(name)
        run = session.open_run(question, str(db) if db is not None else None, evidence=evidence,
                               settings=settings or session.settings, needs_checkpoints=True)
        debugger = cls(session, run, run.run_id)
        for name in breakpoints:
            debugger.add_break(name)
        debugger._invoke({"question": run.question.strip(), "evidence": run.evidence}, interrupt_before="*")
        return debugger

    @classmethod
    def open(cls, run_id: str, *, at: str | None = None, settings: Settings | None = None,
             session: Session | None = None) -> Debugger:
        """An earlier run, at checkpoint ``at`` (its last by default); its model calls are served
        from its call log.

        Raises:
            UnknownRunError: no such run or checkpoint.
        """
        session = session or Session(settings)
        _, info, run_settings, changed = session.recorded_run(run_id, settings or session.settings)
        run = session.open_run(info["question"], info["db_path"], evidence=info.get("evidence") or "",
                               settings=run_settings, replay_of=run_id)
        debugger = cls(session, run, run_id)
        if changed:
            debugger.notes.append(changed)
        if at is not None:
            debugger.goto(at)
        elif debugger.snapshot() is None:
            raise UnknownRunError(f"Run {run_id!r} has no checkpoints in {debugger.store.path}.")
        return debugger

    def close(self) -> None:
        """End the debugging session's trace; a run stepped to its end puts its outcome (the
        chosen SQL, its rows) on the run span, as a run of ``ask`` does."""
        if self._finalizer.alive and not self.run.closed:
            try:
                if self.finished:
                    self.run.mark_outcome(self.result())
            except Exception:  # noqa: BLE001, S110 - the trace's record of the outcome never fails closing
                pass
        self._finalizer()

    # -- where we are -----------------------------------------------------------------------

    def snapshot(self, checkpoint_id: str | None = None) -> Any:
        config = self.config if checkpoint_id is None else self._config_of(checkpoint_id)
        snap = self.graph.get_state(config)
        return snap if snap.config else None

    @property
    def checkpoint_id(self) -> str | None:
        snap = self.snapshot()
        return snap.config["configurable"]["checkpoint_id"] if snap else None

    @property
    def next_nodes(self) -> tuple[str, ...]:
        snap = self.snapshot()
        return tuple(snap.next) if snap else ()

    @property
    def finished(self) -> bool:
        return self.snapshot() is not None and not self.next_nodes

    def state(self, key: str | None = None) -> Any:
        """The state at the current checkpoint, or one key of it.

        Raises:
            DebugError: an unknown key.
        """
        snap = self.snapshot()
        values = dict(snap.values) if snap else {}
        if key is None:
            return values
        if key not in state_keys():
            raise DebugError(f"No state key {key!r}; the keys are {', '.join(state_keys())}.")
        return values.get(key)

    def result(self) -> Result:
        """The run as a :class:`~sqlchorus.runs.session.Result`, as far as it got."""
        values = self.state()
        result = result_from_state(values.get("question") or "", values, None if self.finished else "The run is paused.")
        result.run_id, result.checkpoint_path = self.run_id, str(self.store.path)
        return result

    # -- moving -----------------------------------------------------------------------------

    def step(self) -> list[str]:
        """Run the next superstep (all its nodes); the nodes that ran."""
        nodes = list(self.next_nodes)
        if not nodes:
            raise DebugError("The run has ended: fork an earlier checkpoint to go on from there.")
        self._invoke(None, interrupt_before="*")
        return nodes

    def cont(self) -> str | None:
        """Run to the next breakpoint (whose condition holds) or the end; the node it stopped
        before, or None at the end."""
        if self.finished:
            raise DebugError("The run has ended: fork an earlier checkpoint to go on from there.")
        for _ in range(MAX_BREAK_CHECKS):
            names = list(self.breakpoints)
            self._invoke(None, interrupt_before=names or None)
            stopped = [n for n in self.next_nodes if n in self.breakpoints]
            if not stopped:
                return None
            condition = self.breakpoints[stopped[0]]
            if condition is None or condition.holds(self.state()):
                return stopped[0]
            # the condition is false: step over this node and go on
            self._invoke(None, interrupt_before="*")
            if self.finished:
                return None
        raise DebugError(f"Passed breakpoints {MAX_BREAK_CHECKS} times without stopping.")

    def _invoke(self, value: Any, *, interrupt_before: Any) -> None:
        config = dict(self.config)
        if self.config["configurable"].get("checkpoint_id") == self._latest()["configurable"].get("checkpoint_id"):
            # At the newest checkpoint the run simply goes on; naming it would fork a copy.
            config = {"configurable": {"thread_id": self.run_id}}
        self.run.invoke(value, config=config, interrupt_before=interrupt_before, catch=False)
        self.config = self._latest()

    def _latest(self) -> dict[str, Any]:
        snap = self.graph.get_state({"configurable": {"thread_id": self.run_id}})
        return {"configurable": dict(snap.config["configurable"]) if snap.config else {"thread_id": self.run_id}}

    def goto(self, checkpoint_id: str) -> None:
        """Stand at ``checkpoint_id``: the next step forks the run from there.

        Raises:
            UnknownRunError: the run has no such checkpoint.
        """
        self.config = self._config_of(checkpoint_id)

    fork = goto

    def _config_of(self, checkpoint_id: str) -> dict[str, Any]:
        config = {"configurable": {"thread_id": self.run_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}
        if self.store.get_tuple(config) is None:
            # Ids are time-ordered: runs of them share their start; any unique part will do.
            matches = [h for h in self.history() if checkpoint_id in h["id"]] if len(checkpoint_id) >= 6 else []
            if len(matches) == 1:
                return {"configurable": {"thread_id": self.run_id, "checkpoint_ns": "", "checkpoint_id": matches[0]["id"]}}
            raise UnknownRunError(f"Run {self.run_id} has no checkpoint {checkpoint_id!r}.")
        return config

    # -- changing ---------------------------------------------------------------------------

    def set(self, key: str, value: Any) -> str:
        """Replace ``key``'s value (not merged by its reducer) at the current checkpoint, as a new
        checkpoint. The run stays paused before the same nodes; generators about to start get
        their inputs again from the edited state.

        Returns:
            The new checkpoint's id.

        Raises:
            DebugError: an unknown key, or a run that has not started.
        """
        if key not in state_keys():
            raise DebugError(f"No state key {key!r}; the keys are {', '.join(state_keys())}.")
        snap = self.snapshot()
        if snap is None:
            raise DebugError("The run has no checkpoint to change yet.")
        writer = self._writer(snap)
        reducers = {"candidates", "usage", "errors"}
        update = {key: Overwrite(value) if key in reducers else value}
        payload: Any = update
        if writer == "link_schema":
            # The generators get their inputs in the message that starts them: send them again,
            # made from the edited state.
            edited = apply_update(dict(snap.values), {key: value}, {})
            payload = Command(update=update, goto=[target for target, _ in self._routes(writer, edited)])
        elif writer in ROUTED:
            # The run stays paused before the same nodes: the edit is what they will see.
            payload = Command(update=update, goto=list(snap.next))
        config = self.graph.update_state(snap.config, payload, as_node=writer)
        self.config = {"configurable": dict(config["configurable"])}
        return self.config["configurable"]["checkpoint_id"]

    def _routes(self, writer: str, state: dict[str, Any]) -> list[tuple[Any, str]]:
        class _Runtime:  # what a router reads: the context
            context = self.context

        router = ROUTED[writer]
        if writer == "link_schema":
            by_name = {name: GENERATORS[name].node for name in self.settings.generators}
            router = partial(routing.fan_out_generators, nodes=by_name)
        return router(state, _Runtime)

    def _writer(self, snap: Any) -> str:
        """The node whose update made ``snap`` (the input's for a run not started)."""
        parent = snap.parent_config
        if parent is None:
            return START
        before = self.graph.get_state(parent)
        ran = [n for n in before.next if n != START] or list(before.next)
        return ran[0] if ran else START

    def answer(self, text: str) -> None:
        """The reply of the next model call, instead of calling the model."""
        self.calls.supply(text)

    # -- breakpoints ------------------------------------------------------------------------

    def add_break(self, node: str, condition: str | None = None) -> None:
        """Stop before ``node`` (when ``condition`` holds on the state).

        Raises:
            DebugError: an unknown node or a condition that is not accepted.
        """
        _known_node(node)
        self.breakpoints[node] = Condition(condition) if condition else None

    def clear(self, node: str | None = None) -> None:
        if node is None:
            self.breakpoints.clear()
        elif self.breakpoints.pop(node, "missing") == "missing":
            raise DebugError(f"No breakpoint on {node!r}.")

    # -- looking back -----------------------------------------------------------------------

    def history(self) -> list[dict[str, Any]]:
        """Every checkpoint of the run, oldest first (see :func:`checkpoint_history`)."""
        return checkpoint_history(self.graph, self.run_id)

    def diff(self, a: str | None = None, b: str | None = None) -> dict[str, tuple[Any, Any]]:
        """What changed between two checkpoints (the current one and its parent by default):
        ``{key: (before, after)}`` for each key whose value differs."""
        if a is None and b is None:
            snap = self.snapshot()
            if snap is None or snap.parent_config is None:
                return {}
            before, after = self.graph.get_state(snap.parent_config).values, snap.values
        else:
            if a is None or b is None:
                raise DebugError("diff takes no checkpoint or two.")
            before, after = self.snapshot(a).values, self.snapshot(b).values
        return {k: (before.get(k), after.get(k)) for k in state_keys() if before.get(k) != after.get(k)}

    def replay(self, checkpoint_id: str | None = None) -> tuple[Result, int, int]:
        """Run again from ``checkpoint_id`` (the run's first by default) to the end, serving the
        kept answers; the debugger stands at the end of the new branch.

        Returns:
            The result, the kept answers served, and the calls that went to the model.
        """
        if checkpoint_id is None:
            start = self.history()[0]["id"]
        else:
            start = self._config_of(checkpoint_id)["configurable"]["checkpoint_id"]
        before = len(self.snapshot(start).values.get("usage") or [])
        result = self.session.replay(self.run_id, start, settings=self.settings)
        self.config = self._latest()
        new = result.usage[before:]
        served = sum(1 for u in new if u.get("replayed"))
        return result, served, len(new) - served

    def export_test(self, path: str | Path) -> Path:
        """Write a pytest module that replays this run from its kept answers and checks the final
        SQL and result."""
        result = self.result()
        if result.sql is None:
            raise DebugError("The run has no answer yet: continue it to the end first.")
        target = Path(path)
        target.write_text(_TEST_TEMPLATE.format(
            run_id=self.run_id, checkpoints=str(self.store.path), sql=json.dumps(result.sql),
            rows=json.dumps(result.rows, default=str), question=json.dumps(self.state("question")),
        ), encoding="utf-8")
        return target


def _known_node(node: str) -> None:
    if node not in node_names():
        raise DebugError(f"No node {node!r}; the nodes are {', '.join(node_names())}.")


_TEST_TEMPLATE = '''"""Regression test written by `sqlchorus debug` (export-test) for run {run_id}: it replays the run
from its kept model answers, with a model that fails if called, and checks its answer."""

import sqlchorus
from sqlchorus.runs.scripted_models import ScriptedChatModel

RUN_ID = "{run_id}"
CHECKPOINTS = "{checkpoints}"
QUESTION = {question}


def _no_model(messages):
    raise AssertionError("the replay asked a model: the run's inputs have changed")


def test_the_run_gives_the_same_answer():
    settings = sqlchorus.Settings(model=ScriptedChatModel(_no_model), checkpoints=CHECKPOINTS, trace_dir=None)
    with sqlchorus.Session(settings) as session:
        result = session.replay(RUN_ID)
    assert result.ok, result.error
    assert result.sql == {sql}
    assert [[str(v) for v in row] for row in result.rows] == [[str(v) for v in row] for row in {rows}]
'''


def checkpoint_history(graph: Any, run_id: str) -> list[dict[str, Any]]:
    """Every checkpoint of run ``run_id`` in ``graph``'s checkpointer, oldest first: step, the
    nodes that ran to make it, source (input, loop, update, fork), id, parent id and the nodes
    due next."""
    rows = []
    items = list(graph.get_state_history({"configurable": {"thread_id": run_id}}))
    by_id = {h.config["configurable"]["checkpoint_id"]: h for h in items}
    for h in reversed(items):
        parent = h.parent_config["configurable"]["checkpoint_id"] if h.parent_config else None
        made_by = [n for n in by_id[parent].next] if parent in by_id else []
        source = h.metadata.get("source")
        node = "(edit)" if source == "update" else ", ".join(dict.fromkeys(made_by)) or "(input)"
        rows.append({
            "step": h.metadata.get("step"), "node": node,
            "source": h.metadata.get("source"), "id": h.config["configurable"]["checkpoint_id"],
            "parent": parent, "next": list(h.next),
        })
    return rows
