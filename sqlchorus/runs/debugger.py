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
import difflib
import json
import re
import traceback
import types
import typing
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import typing_extensions
from langgraph.graph import START
from langgraph.types import Command, Overwrite

from sqlchorus.config.errors import DebugError, InvalidValueError
from sqlchorus.config.settings import Settings
from sqlchorus.core.checkpoint_history import checkpoint_history
from sqlchorus.core.checkpoints import UnknownRunError
from sqlchorus.core.list_search import ListState
from sqlchorus.core.models import model_name
from sqlchorus.core.replay_model import ReplayChatModel
from sqlchorus.core.state import SqlchorusState
from sqlchorus.graph import routing
from sqlchorus.graph.build import NODES, ROUTED
from sqlchorus.graph.generators import GENERATORS
from sqlchorus.graph.list_graph import NODES as SEARCH_NODES
from sqlchorus.runs import regression_test
from sqlchorus.runs.result import Result, result_from_state
from sqlchorus.runs.session import OpenRun, Session
from sqlchorus.runs.teach import Teacher
from sqlchorus.tools.tracing import attributes as attrs

MAX_EXPRESSION_CHARS = 2_000
"""The longest condition or display expression taken."""

MAX_BREAK_CHECKS = 1_000
"""Breakpoints whose condition is false are passed at most this many times in one ``cont``."""


def state_keys() -> list[str]:
    """The keys of a run's state, for completion and checks."""
    return list(SqlchorusState.__annotations__)


def node_names() -> list[str]:
    """Every node a run can pause before: the run's, and the steps of LIST's search."""
    return list(dict.fromkeys([*NODES, *(g.node for g in GENERATORS.values()), *SEARCH_NODES]))


KEPT_ANSWERS_ONLY = "kept-answers-only"
"""The name of the model a run opened without one gets (:func:`kept_answers_model`)."""


def kept_answers_model() -> ReplayChatModel:
    """The model of a run opened without one: its calls are served from their kept answers, and
    a call the run did not make (after an edit) says what is missing."""
    return ReplayChatModel(name=KEPT_ANSWERS_ONLY, refusal=(
        "No model is configured, and this call is not among the run's kept answers: "
        "give --model (or SQLCHORUS_MODEL) to make calls the run did not make"))


def _declared(key: str) -> Any:
    """The state's declared type of ``key`` (reducers stripped)."""
    return _fields_of(SqlchorusState)[0][key]


def _default(key: str) -> Any:
    """What a key not yet in the state stands for in a condition: the empty value of its type,
    so ``fix_round == 0`` holds before the first round."""
    hint = _declared(key)
    origin = typing.get_origin(hint) or hint
    return {int: 0, float: 0.0, str: "", bool: False, list: [], dict: {}}.get(origin) if isinstance(origin, type) else None


INT64 = 2**63
"""Integers in state are kept as 64-bit ones by the checkpoint store."""


def validate_value(key: str, value: Any, *, max_question_chars: int | None = None) -> None:
    """Refuse a value that does not have ``key``'s declared type, and one no run could have: an
    empty or too long question, a negative count, two candidates with one id, an integer beyond
    64 bits.

    The declared types are the state's own (:class:`~sqlchorus.core.state.SqlchorusState` and the
    typed dicts it holds), checked at every depth: a field a typed dict does not declare, a field
    it requires that is missing, a value of another type. Where a type is ``Any`` any JSON value
    is taken. The message names each problem by its path and the type expected there:
    ``candidates[0].sqll is not a field of a candidate (fields: id, generator, sql, ...)``,
    ``answer.rows must be a list of rows, not a string``.

    Raises:
        InvalidValueError: the value does not fit (a :class:`DebugError`).
    """
    if key not in state_keys():
        raise InvalidValueError(_not_a_field(key, SqlchorusState, None) + ".")
    _check_sizes(key, value)
    problems: list[str] = []
    _problems(value, _declared(key), key, key, problems)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise InvalidValueError("; ".join(problems[:3]) + more + ".")
    if key == "question" and isinstance(value, str):
        if not value.strip():
            raise InvalidValueError("question cannot be empty.")
        if max_question_chars is not None and len(value) > max_question_chars:
            raise InvalidValueError(f"question is {len(value)} characters; a run takes at most {max_question_chars} "
                             "(--max-question-chars).")
    if key == "fix_round" and isinstance(value, int) and value < 0:
        raise InvalidValueError("fix_round counts rounds: it cannot be negative.")
    if key == "candidates" and isinstance(value, list):
        ids = [c.get("id") for c in value if isinstance(c, dict)]
        repeated = sorted({i for i in ids if ids.count(i) > 1 and i is not None})
        if repeated:
            raise InvalidValueError(f"candidates have one id each; {', '.join(map(str, repeated))} is given twice.")
        if any(isinstance(c, dict) and isinstance(c.get("fix_attempts"), int) and c["fix_attempts"] < 0 for c in value):
            raise InvalidValueError("a candidate's fix_attempts counts rounds: it cannot be negative.")


def _check_sizes(key: str, value: Any) -> None:
    """Integers the store can keep, at a depth Python can walk."""
    stack, seen = [(value, 0)], 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if depth > 100:
            raise InvalidValueError(f"{key}'s value is nested more than 100 deep.")
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and not -INT64 <= item < INT64:
            raise InvalidValueError(f"{key}'s value holds {str(item)[:30]}..., beyond a 64-bit integer.")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


# -- the state's declared types ------------------------------------------------------------------

_REQUIRED = {typing.Required, typing_extensions.Required}
_NOT_REQUIRED = {typing.NotRequired, typing_extensions.NotRequired}
_UNIONS = (typing.Union, types.UnionType)


@lru_cache(maxsize=None)
def _fields_of(cls: Any) -> tuple[dict[str, Any], frozenset[str]]:
    """A typed dict's fields with their declared types (reducers stripped), and the fields every
    value of it has (``NotRequired`` ones and those of a ``total=False`` class are optional)."""
    plain = typing.get_type_hints(cls)
    marked = typing.get_type_hints(cls, include_extras=True)
    required = set()
    for name in plain:
        origin = typing.get_origin(marked[name])
        if origin in _REQUIRED or (origin not in _NOT_REQUIRED and name in cls.__required_keys__):
            required.add(name)
    return plain, frozenset(required)


def _is_record(hint: Any) -> bool:
    return typing_extensions.is_typeddict(hint)


def _is_object(hint: Any) -> bool:
    """Whether values of ``hint`` are JSON objects (a typed dict, or a dict)."""
    return _is_record(hint) or hint is dict or typing.get_origin(hint) is dict


def _noun(cls: Any) -> str:
    """A typed dict's name in words: ``UsageRecord`` is "usage record"."""
    return "the state" if cls is SqlchorusState else re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__).lower()


def _a(noun: str) -> str:
    """``noun`` with its article, as it is said: "an answer", "a usage record"."""
    vowel = noun[:1] in "aeiou" and not noun.startswith(("us", "uni", "eu", "one"))
    return f"{'an' if vowel else 'a'} {noun}"


def _names(hint: Any, name: str | None = None) -> tuple[str, str]:
    """What a value of ``hint`` is called, one and many: ("candidate", "candidates"). A list of
    lists held under a plural ``name`` is a list of what the name says: ``rows``, a list of rows."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return "JSON value", "JSON values"
    if _is_record(hint):
        noun = _noun(hint)
        return noun, noun + "s"
    if hint is list or origin is list:
        item = args[0] if args else Any
        items = _names(item)[1]
        if name and name.endswith("s") and (item is list or typing.get_origin(item) is list):
            items = name
        return f"list of {items}", f"lists of {items}"
    if hint is dict or origin is dict:
        values = args[1] if len(args) == 2 else Any
        if values is Any:
            return "object", "objects"
        return f"object of {_names(values)[1]}", f"objects of {_names(values)[1]}"
    plain = {str: ("string", "strings"), int: ("integer", "integers"), float: ("number", "numbers"),
             bool: ("boolean", "booleans"), type(None): ("null", "nulls")}
    if hint in plain:
        return plain[hint]
    return f"value that is {_kind(hint)}", f"values that are {_kind(hint)}"


def _kind(hint: Any, name: str | None = None) -> str:
    """A declared type in words, as JSON shows values: "a list of candidates", "a string or null"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return "any JSON value"
    if origin is typing.Literal:
        return "one of " + ", ".join(json.dumps(a) for a in args)
    if origin in _UNIONS:
        return " or ".join(_kind(a, name) for a in args)
    if hint is type(None):
        return "null"
    if hint is bool:
        return "true or false"
    if _is_record(hint):
        return f"{_a(_noun(hint))} (a JSON object)"
    return _a(_names(hint, name)[0])


def _given(value: Any) -> str:
    """What a value is, in the words :func:`_kind` uses."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    named = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}
    for cls, words in named.items():
        if isinstance(value, cls):
            return words
    return f"a Python {type(value).__name__}, which JSON has no form for"


def _shown(value: Any) -> str:
    """A short JSON rendering of ``value``, for a value outside a declared set."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _at(path: str, step: int | str) -> str:
    """``path`` and one step further: ``candidates[0]``, ``answer.rows``, ``values["a b"]``."""
    if isinstance(step, int):
        return f"{path}[{step}]"
    return f"{path}.{step}" if re.fullmatch(r"[A-Za-z_]\w*", step) else f"{path}[{json.dumps(step)}]"


def _not_a_field(name: str, cls: Any, path: str | None) -> str:
    fields = list(_fields_of(cls)[0])
    close = difflib.get_close_matches(name, fields, n=1)
    where = name if path is None else _at(path, name)
    return (f"{where} is not a field of {_noun(cls) if cls is SqlchorusState else _a(_noun(cls))} "
            f"(fields: {', '.join(fields)}" + (f"; the closest is {close[0]})" if close else ")"))


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` has ``hint``'s outer shape: which member of a union it is meant for."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin is typing.Literal:
        return any(type(value) is type(a) and value == a for a in typing.get_args(hint))
    if origin in _UNIONS:
        return any(_fits(value, a) for a in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is list or origin is list:
        return isinstance(value, list)
    if _is_object(hint):
        return isinstance(value, dict)
    return False


def _problems(value: Any, hint: Any, path: str, name: str | None, out: list[str]) -> None:
    """Append to ``out`` what in ``value`` (found at ``path``) does not have the type ``hint``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        _json_problems(value, path, out)
        return
    if origin in _UNIONS:
        member = next((a for a in args if _fits(value, a)), None)
        if member is None:
            out.append(f"{path} must be {_kind(hint, name)}, not {_given(value)}")
        else:
            _problems(value, member, path, name, out)
        return
    if not _fits(value, hint):
        shown = _shown(value) if origin is typing.Literal and isinstance(value, (str, int, float)) else _given(value)
        out.append(f"{path} must be {_kind(hint, name)}, not {shown}")
        return
    if hint is list or origin is list:
        item = args[0] if args else Any
        for i, v in enumerate(value):
            _problems(v, item, _at(path, i), None, out)
    elif _is_record(hint):
        fields, required = _fields_of(hint)
        for k in value:
            if k not in fields:
                out.append(_not_a_field(str(k), hint, path))
        missing = [f for f in fields if f in required and f not in value]
        if missing:
            out.append(f"{path} lacks {', '.join(missing)}: every {_noun(hint)} has "
                       + ("it" if len(missing) == 1 else "them"))
        for k, v in value.items():
            if k in fields:
                _problems(v, fields[k], _at(path, k), k, out)
    elif _is_object(hint):
        held = args[1] if len(args) == 2 else Any
        for k, v in value.items():
            if not isinstance(k, str):
                out.append(f"{path} has the key {_shown(k)}: a JSON object's keys are strings")
                continue
            _problems(v, held, _at(path, k), k, out)


def _json_problems(value: Any, path: str, out: list[str]) -> None:
    """Append to ``out`` what in ``value`` is not JSON (a field typed ``Any`` takes any JSON value)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _json_problems(v, _at(path, i), out)
    elif isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                out.append(f"{path} has the key {_shown(k)}: a JSON object's keys are strings")
                continue
            _json_problems(v, _at(path, k), out)
    else:
        out.append(f"{path} must be any JSON value, not {_given(value)}")


_TARGET = re.compile(r"^([A-Za-z_]\w*)((?:\[-?\d+\]|\.[A-Za-z_]\w*)*)$")
_STEP = re.compile(r"\[(-?\d+)\]|\.([A-Za-z_]\w*)")


def parse_target(target: str) -> tuple[str, list[int | str]]:
    """``candidates[0].sql`` as the state key and the path into its value.

    Raises:
        InvalidValueError: ``target`` is not a key or a path into one.
    """
    found = _TARGET.match(target)
    if not found:
        raise InvalidValueError(f"{target!r} is not a key or a path into one (such as candidates[0].sql).")
    steps: list[int | str] = [int(i) if i else name for i, name in _STEP.findall(found.group(2))]
    return found.group(1), steps


def edited(key: str, current: Any, path: Sequence[int | str], new: Any) -> Any:
    """A copy of ``current``, ``key``'s value, with the part at ``path`` replaced by ``new``.

    Each step must be one the declared type has: a field a typed dict declares (a declared field
    not set yet is added, as is a key of a plain object at the last step), an index within a list.
    The copy as a whole is not checked here (:func:`validate_value` does that).

    Raises:
        InvalidValueError: a step the value or its type does not have, naming it.
    """
    hint = _declared(key)
    start = json.loads(json.dumps(current, default=str)) if current is not None else None
    if start is None:  # a key not set yet: the empty value of its type
        start = {} if _is_object(hint) else [] if hint is list or typing.get_origin(hint) is list else None
    box: dict[str, Any] = {key: start}
    holder: Any = box
    slot: int | str = key
    at = key
    for n, step in enumerate(path):
        here = holder[slot]
        options = [a for a in typing.get_args(hint) if a is not type(None)] if typing.get_origin(hint) in _UNIONS else []
        if options:
            hint = next((a for a in options if _fits(here, a)), options[0])
        last = n == len(path) - 1
        if isinstance(step, int):
            if not isinstance(here, list):
                raise InvalidValueError(f"{at} is {_given(here)}, not a list: {_at(at, step)} names nothing.")
            if not -len(here) <= step < len(here):
                size = f"has {len(here)} item{'s' if len(here) != 1 else ''} ({at}[0] to {at}[{len(here) - 1}])" \
                    if here else "is empty"
                raise InvalidValueError(f"{_at(at, step)} is out of range: {at} {size}.")
            args = typing.get_args(hint)
            hint = args[0] if typing.get_origin(hint) is list and args else Any
        else:
            if _is_record(hint):
                fields = _fields_of(hint)[0]
                if step not in fields:
                    raise InvalidValueError(_not_a_field(step, hint, at) + ".")
                hint = fields[step]
            elif _is_object(hint) or hint is Any:
                args = typing.get_args(hint)
                hint = args[1] if len(args) == 2 else Any
            else:
                raise InvalidValueError(f"{at} is {_kind(hint)}: it has no fields, so {_at(at, step)} names nothing.")
            if not isinstance(here, dict):
                raise InvalidValueError(f"{at} is {_given(here)}, not an object: {_at(at, step)} names nothing.")
            if not last and step not in here:
                if not _is_object(hint):
                    raise InvalidValueError(f"{_at(at, step)} is not set, so nothing is inside it.")
                here[step] = {}
        holder, slot, at = here, step, _at(at, step)
    holder[slot] = new
    return box[key]


@dataclass(frozen=True)
class PostMortem:
    """A node that raised: which, what it raised, where, and the state it met."""

    node: str
    error: str
    traceback: str
    checkpoint: str | None
    state: dict[str, Any]


def _failed_node(error: BaseException, snap: Any) -> str:
    failed = [t.name for t in (snap.tasks if snap else ()) if getattr(t, "error", None)]
    if failed:
        return failed[0]
    for note in getattr(error, "__notes__", ()):  # LangGraph notes "During task with name 'X' ..."
        if note.startswith("During task with name '"):
            return note.split("'")[1]
    return ", ".join(snap.next) if snap and snap.next else "?"


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
        if len(text) > MAX_EXPRESSION_CHARS:
            raise DebugError(f"An expression is at most {MAX_EXPRESSION_CHARS} characters.")
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as e:
            raise DebugError(f"The condition {text!r} does not parse: {e.msg}.") from None
        except (RecursionError, MemoryError):
            raise DebugError(f"The condition {text[:40]!r}... is nested too deeply to read.") from None
        for node in ast.walk(tree):
            if not isinstance(node, self._ALLOWED):
                raise DebugError(f"The condition {text!r} uses {type(node).__name__}, which conditions cannot.")
            if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in self.FUNCTIONS):
                raise DebugError(f"A condition calls only {', '.join(self.FUNCTIONS)}.")
        # A name is a state key (the run's or a search's), a function, or a comprehension's own.
        bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        known = set(state_keys()) | set(ListState.__annotations__) | set(self.FUNCTIONS) | bound | {"True", "False", "None"}
        unknown = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in known})
        if unknown:
            raise DebugError(f"{', '.join(unknown)} is not a state key; the keys are {', '.join(state_keys())} "
                             f"(and, inside LIST's search, {', '.join(ListState.__annotations__)}).")
        try:
            self._code = compile(tree, "<condition>", "eval")
        except (RecursionError, MemoryError):
            raise DebugError(f"The condition {text[:40]!r}... is nested too deeply to run.") from None

    def value(self, state: Mapping[str, Any]) -> Any:
        """The expression's value over ``state``; a key not set yet stands for its type's empty
        value (0, "", [], {}).

        Raises:
            DebugError: the expression fails on this state.
        """
        names = {**{key: _default(key) for key in state_keys()}, **dict(state)}
        try:
            return eval(self._code, {"__builtins__": {}}, {**self.FUNCTIONS, **names})  # noqa: S307 - checked above
        except Exception as e:  # an expression that fails on this state says why
            raise DebugError(f"{self.text!r} failed on this state: {type(e).__name__}: {e}") from None

    def holds(self, state: Mapping[str, Any]) -> bool:
        return bool(self.value(state))


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
        self.displays: list[Condition] = []
        self.failure: PostMortem | None = None
        self.notes: list[str] = []
        # A debugger left open still finishes its trace before the interpreter goes.
        self._finalizer = weakref.finalize(self, run.close)
        self.config: dict[str, Any] = {"configurable": {"thread_id": run_id}}
        self._stepping_inside = False
        self.context.pause = self._pause_inside

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
                               settings=settings or session.settings, needs_checkpoints=True, steppable=True,
                               origin="debug", defer_trace=True)
        debugger = cls(session, run, run.run_id)
        for name in breakpoints:
            debugger.add_break(name)
        debugger._invoke({"question": run.question.strip(), "evidence": run.evidence}, interrupt_before="*",
                         command="start")
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
        run_id = info["run_id"]  # a unique start of the id names the run too
        # Its span starts with the first command that runs the graph: a session that only looks
        # (history, state, diff) adds no turn to the run's trace.
        run = session.open_run(info["question"], info["db_path"], evidence=info.get("evidence") or "",
                               settings=run_settings, replay_of=run_id, steppable=True, origin="debug",
                               defer_trace=True)
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
        chosen SQL, its rows) on the run span, as a run of ``ask`` does. A session that ran no
        step has no run span: it tells no outcome, the run's own trace already has it."""
        if self._finalizer.alive and not self.run.closed:
            try:
                if self.tracer.root is not None and self.finished:
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

    def inside(self) -> list[dict[str, Any]]:
        """Where the run is paused inside a search (LIST), one row per paused search: the parent
        node running it, the search's nodes due next, its state; empty when it is not."""
        snap = self.snapshot()
        rows = []
        for task in (snap.tasks if snap else ()):
            if not task.interrupts:
                continue
            # The search runs inside its node's function, where LangGraph cannot see it as a
            # subgraph: its state is read from its own checkpoints, under the task's namespace.
            ns = f"{task.name}:{task.id}"
            kept = self.store.get_tuple({"configurable": {"thread_id": self.run_id, "checkpoint_ns": ns}})
            values = dict(kept.checkpoint.get("channel_values") or {}) if kept else {}
            state = {k: v for k, v in values.items() if k in ListState.__annotations__}
            before = [i.value.get("before") for i in task.interrupts if isinstance(i.value, dict)]
            rows.append({"node": task.name, "next": tuple(n for n in before if n), "state": state,
                         "interrupts": [i.id for i in task.interrupts], "ns": ns,
                         "checkpoint": kept.config["configurable"]["checkpoint_id"] if kept else None,
                         "parent": kept.parent_config if kept else None})
        return rows

    def _inner_diff(self, row: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
        """What the search's last step changed in its state."""
        before: dict[str, Any] = {}
        if row["parent"] is not None:
            kept = self.store.get_tuple(row["parent"])
            before = dict(kept.checkpoint.get("channel_values") or {}) if kept else {}
        after = row["state"]
        return {k: (before.get(k), after.get(k)) for k in ListState.__annotations__ if before.get(k) != after.get(k)}

    def _pause_inside(self, node: str, state: Any) -> bool:
        """Asked by each step of a search before it runs (from the graph's threads)."""
        if node not in SEARCH_NODES:
            return False
        if self._stepping_inside:
            return True
        if node not in self.breakpoints:
            return False
        condition = self.breakpoints[node]
        try:
            return condition is None or condition.holds(state)
        except DebugError:  # a condition that fails stops there, where it can be looked at
            return True

    def _refuse_inside(self, what: str) -> None:
        inside = self.inside()
        if inside:
            raise DebugError(f"The run is paused inside {inside[0]['node']}'s search (before "
                             f"{', '.join(inside[0]['next'])}): {what} works between the run's steps; "
                             "next or continue out of the search first.")

    def state(self, key: str | None = None) -> Any:
        """The state at the current checkpoint, or one key of it.

        Raises:
            DebugError: an unknown key.
        """
        inside = self.inside()
        if inside:  # paused in a search: its state is the one a step there meets
            values, keys = inside[0]["state"], list(ListState.__annotations__)
        else:
            snap = self.snapshot()
            values, keys = (dict(snap.values) if snap else {}), state_keys()
        if key is None:
            return values
        if key not in keys:
            raise DebugError(f"No state key {key!r}; the keys are {', '.join(keys)}.")
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
        inside = self.inside()
        if inside:  # a step of the search: it pauses again before the search's next node
            nodes = [n for row in inside for n in row["next"]]
            self._stepping_inside = True
            try:
                self._invoke(None, interrupt_before="*", command="step")
            finally:
                self._stepping_inside = False
            return nodes
        nodes = list(self.next_nodes)
        if not nodes:
            raise DebugError("The run has ended: fork an earlier checkpoint to go on from there.")
        self._invoke(None, interrupt_before="*", command="step")
        return nodes

    def cont(self) -> str | None:
        """Run to the next breakpoint (whose condition holds) or the end; the node it stopped
        before, or None at the end."""
        if self.finished:
            raise DebugError("The run has ended: fork an earlier checkpoint to go on from there.")
        for _ in range(MAX_BREAK_CHECKS):
            # The run's own nodes pause by LangGraph's interrupt_before; a search's ask _pause_inside.
            names = [n for n in self.breakpoints if n in self.graph.nodes]
            self._invoke(None, interrupt_before=names or None, command="continue")
            inside = self.inside()
            if inside:
                return inside[0]["next"][0]
            stopped = [n for n in self.next_nodes if n in self.breakpoints]
            if not stopped:
                return None
            condition = self.breakpoints[stopped[0]]
            if condition is None or condition.holds(self.state()):
                return stopped[0]
            # the condition is false: step over this node and go on
            self._invoke(None, interrupt_before="*", command="continue")
            if self.finished:
                return None
        raise DebugError(f"Passed breakpoints {MAX_BREAK_CHECKS} times without stopping.")

    def _invoke(self, value: Any, *, interrupt_before: Any, command: str) -> None:
        """Run the graph for ``command`` (start, step, continue, rerun): one span of the
        session's run, ``debug.<command>``, which says the checkpoint it went on from and
        whether that was a fork (not the newest)."""
        config = dict(self.config)
        here = self.config["configurable"].get("checkpoint_id")
        forked = here is not None and here != self._latest()["configurable"].get("checkpoint_id")
        if not forked:
            # At the newest checkpoint the run simply goes on; naming it would fork a copy.
            config = {"configurable": {"thread_id": self.run_id}}
        before = self.snapshot()
        if value is None:
            pending = [i for row in self.inside() for i in row["interrupts"]]
            if pending:  # paused inside a search: resume those pauses, by id, and no other
                value = Command(resume={i: True for i in pending})
        try:
            self.run.invoke(value, config=config, interrupt_before=interrupt_before, catch=False,
                            span=attrs.DEBUG_SPAN_PREFIX + command,
                            span_attributes={attrs.SQLCHORUS_DEBUG_COMMAND: command, attrs.SQLCHORUS_FORKED: forked,
                                             **({attrs.SQLCHORUS_CHECKPOINT_ID: here} if here else {})})
        except KeyboardInterrupt:  # the steps that finished before Ctrl-C are kept: stand after them
            self.config = self._latest()
            raise
        except Exception as e:  # a node that raised: the run stays before it, and says why
            self.config = self._latest()
            snap = self.snapshot()
            node = _failed_node(e, snap)
            # The frames of the run's own code: LangGraph's machinery above the node says nothing.
            frames = [f for f in traceback.extract_tb(e.__traceback__) if "site-packages" not in f.filename]
            where = "".join(traceback.format_list(frames[-10:]))
            self.failure = PostMortem(
                node=node, error=f"{type(e).__name__}: {e}", traceback=where,
                checkpoint=self.checkpoint_id, state=dict((snap or before).values) if (snap or before) else {},
            )
            raise DebugError(f"{node} raised {type(e).__name__}: {e}. The run is paused before {node}; "
                             "post-mortem shows the exception and the state it met.") from None
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
            inner = [h for h in self.history(inner=True) if h.get("search") and checkpoint_id in h["id"]]
            if inner:
                started = self._search_start(inner[0])
                raise DebugError(f"{checkpoint_id} is a checkpoint of {inner[0]['search']}'s search, which goes on "
                                 f"only inside its step: fork {started}, the run's checkpoint before that step, "
                                 f"and break at {(inner[0]['next'] or ['list_plan'])[0]}.")
            raise UnknownRunError(f"Run {self.run_id} has no checkpoint {checkpoint_id!r}.")
        return config

    def _search_start(self, row: dict[str, Any]) -> str | None:
        """The run's checkpoint a search's checkpoint ``row`` goes back to."""
        rows = {h["id"]: h for h in self.history(inner=True)}
        for _ in range(len(rows) + 1):
            if row is None or not row.get("search"):
                break
            row = rows.get(row["parent"])
        return row["id"] if row else None

    # -- changing ---------------------------------------------------------------------------

    def set(self, target: str, value: Any) -> str:
        """Replace a key's value (not merged by its reducer), or one part of it (``target`` a path
        such as ``candidates[0].sql``), at the current checkpoint, as a new checkpoint. The run
        stays paused before the same nodes; generators about to start get their inputs again from
        the edited state.

        The key's whole new value is checked against its declared type first
        (:func:`validate_value`); a value refused leaves the run, its checkpoints and the
        debugger's place as they were.

        Returns:
            The new checkpoint's id.

        Raises:
            DebugError: an unknown key or field, an index out of range, a value that does not
                have the declared type, or a run that has not started.
        """
        self._refuse_inside("set")
        key, path = parse_target(target)
        if key not in state_keys():
            raise InvalidValueError(_not_a_field(key, SqlchorusState, None) + ".")
        snap = self.snapshot()
        if snap is None:
            raise DebugError("The run has no checkpoint to change yet.")
        if path:
            value = edited(key, snap.values.get(key), path, value)
        validate_value(key, value, max_question_chars=self.settings.max_question_chars)
        writer = self._writer(snap)
        reducers = {"candidates", "usage", "errors"}
        update = {key: Overwrite(value) if key in reducers else value}
        # Written as the node that made this checkpoint. The run stays paused before the same
        # nodes, the edit being what they will see; only the generators after link_schema are
        # sent again, their inputs made from the edited state.
        config = snap.config
        if writer in ROUTED and writer != "link_schema":
            config = {**config, "configurable": {**config["configurable"], routing.KEEP_NEXT: list(snap.next)}}
        config = self.graph.update_state(config, update, as_node=writer)
        self.config = {"configurable": {k: v for k, v in config["configurable"].items() if k != routing.KEEP_NEXT}}
        return self.config["configurable"]["checkpoint_id"]

    def _writer(self, snap: Any) -> str:
        """The node whose update made ``snap`` (the input's for a run not started); an edit's
        checkpoint counts as made by the node that made the checkpoint it edited, so that edits
        one after another all keep the run before the same nodes."""
        for _ in range(MAX_BREAK_CHECKS):
            if snap.parent_config is None or (snap.metadata or {}).get("source") != "update":
                break
            snap = self.graph.get_state(snap.parent_config)
        parent = snap.parent_config
        if parent is None:
            return START
        before = self.graph.get_state(parent)
        ran = [n for n in before.next if n != START] or list(before.next)
        return ran[0] if ran else START

    def answer(self, text: str) -> None:
        """The reply of the next model call, instead of calling the model."""
        self.calls.supply(text)

    def rerun(self) -> tuple[list[str], dict[str, tuple[Any, Any]]]:
        """Run the next step again with the model itself (a fresh sample: neither the kept
        answers nor the response cache), from this checkpoint; the kept answers serve every
        step after it.

        Returns:
            The nodes that ran and what differs from the step the run took from here before
            (``{key: (recorded, new)}``; every changed key when the run never took it).

        Raises:
            DebugError: the run has ended, or no model is configured.
        """
        self._refuse_inside("rerun")
        nodes = list(self.next_nodes)
        if not nodes:
            raise DebugError("The run has ended: fork an earlier checkpoint to rerun a step from there.")
        if any(model_name(m) == KEPT_ANSWERS_ONLY for m in self.context.models.values()):
            raise DebugError("rerun calls the model, and none is configured: open the run with --model.")
        here = self.checkpoint_id
        earlier = next((h for h in self.history() if h["parent"] == here and h["source"] == "loop"), None)
        recorded = dict(self.snapshot(earlier["id"]).values) if earlier else dict(self.snapshot().values)
        self.calls.live = True
        try:
            self._invoke(None, interrupt_before="*", command="rerun")
        finally:
            self.calls.live = False
        now = dict(self.snapshot().values)
        return nodes, {k: (recorded.get(k), now.get(k)) for k in state_keys() if recorded.get(k) != now.get(k)}

    def query(self, sql: str) -> Any:
        """Run one read query on the run's database, through the run's guard (its time and size
        limits; nothing that writes or reads outside the database).

        Raises:
            SqlchorusError: the guard refused the query, or it failed.
        """
        db = self.resources.db
        return db.execute(sql, timeout_s=self.settings.sql_timeout_s, max_rows=self.settings.answer_rows)

    # -- model calls ------------------------------------------------------------------------

    def calls_of(self, node: str | None = None, *, every: bool = False) -> list[dict[str, Any]]:
        """The model calls of this branch of the run, oldest first, numbered from 1: those of the
        step that made this checkpoint (by default), of ``node``, or ``every`` one. Each has
        ``n``, node, role, model, temperature, tokens, seconds, ``how`` (model, cached,
        replayed, typed) and, where the call log kept them, its ``messages`` and ``answer``.

        Raises:
            DebugError: an unknown node.
        """
        if node is not None:
            _known_node(node)
        snap = self.snapshot()
        inside = self.inside()
        usage = list(self.state().get("usage") or [])  # inside a search, the search's calls
        first = 0
        if node is None and not every:
            if inside:
                changed = self._inner_diff(inside[0]).get("usage")
                first = len(changed[0] or []) if changed else len(usage)
            elif snap is not None and snap.parent_config is not None:
                first = len(self.graph.get_state(snap.parent_config).values.get("usage") or [])
        kept = {c["usage"].get("call"): c for c in self.store.calls(self.run_id) if c["usage"].get("call")}
        # A generator's calls include those of its search's steps (LIST's are list_plan, ...).
        nodes = {node} | (set(SEARCH_NODES) if node == GENERATORS["list"].node else set()) if node else set()
        rows = []
        for n, u in enumerate(usage, start=1):
            if n <= first or (node is not None and u.get("node") not in nodes):
                continue
            log = kept.get(u.get("call"))
            how = next((k for k in ("typed", "replayed", "cached") if u.get(k)), "model")
            rows.append({
                "n": n, "node": u.get("node"), "role": u.get("role"), "model": u.get("model"),
                "temperature": (log or {}).get("params", {}).get("temperature"),
                "input_tokens": u.get("input_tokens"), "output_tokens": u.get("output_tokens"),
                "seconds": round((u.get("latency_ms") or 0.0) / 1000.0, 3), "how": how,
                "cost_usd": u.get("cost_usd"), "call": u.get("call"),
                "messages": (log or {}).get("messages"), "answer": (log or {}).get("answer"),
            })
        return rows

    def call(self, n: int) -> dict[str, Any]:
        """Model call ``n`` of this branch (as :meth:`calls_of` numbers them), with its prompt
        and answer.

        Raises:
            DebugError: no such call.
        """
        rows = self.calls_of(every=True)
        found = next((r for r in rows if r["n"] == n), None)
        if found is None:
            raise DebugError(f"No model call {n} on this branch; it has {len(rows)}." if rows
                             else "No model call on this branch yet.")
        return found

    # -- where we came from -----------------------------------------------------------------

    def path(self) -> list[dict[str, Any]]:
        """The checkpoints from the run's first to this one (this branch), oldest first, as
        :func:`checkpoint_history` gives them."""
        rows = {h["id"]: h for h in self.history()}
        chain, at = [], self.checkpoint_id
        for _ in range(len(rows) + 1):  # a chain of parents is never longer than the history
            if at is None or at not in rows:
                break
            chain.append(rows[at])
            at = rows[at]["parent"]
        return chain[::-1]

    def until(self, node: str) -> str | None:
        """Run to the next time the run is before ``node`` (or a breakpoint, or the end); the
        node it stopped before, or None at the end.

        Raises:
            DebugError: an unknown node, or a run that has ended.
        """
        _known_node(node)
        had = node in self.breakpoints
        previous = self.breakpoints.get(node)
        self.breakpoints[node] = None
        try:
            return self.cont()
        finally:
            if had:
                self.breakpoints[node] = previous
            else:
                self.breakpoints.pop(node, None)

    def display(self, expression: str) -> None:
        """Show ``expression`` (over the state's keys, as a breakpoint's condition) after every
        step.

        Raises:
            DebugError: an expression that is not accepted.
        """
        self.displays.append(Condition(expression))

    def undisplay(self, number: int | None = None) -> None:
        if number is None:
            self.displays.clear()
        elif not 1 <= number <= len(self.displays):
            raise DebugError(f"No display {number}; there are {len(self.displays)}.")
        else:
            del self.displays[number - 1]

    def displayed(self) -> list[tuple[int, str, Any]]:
        """Each display's number, text and value (or why it failed) at this checkpoint."""
        state = self.state()
        shown = []
        for number, expression in enumerate(self.displays, start=1):
            try:
                shown.append((number, expression.text, expression.value(state)))
            except DebugError as e:
                shown.append((number, expression.text, f"<{e}>"))
        return shown

    # -- breakpoints ------------------------------------------------------------------------

    def add_break(self, node: str, condition: str | None = None) -> None:
        """Stop before ``node`` (when ``condition`` holds on the state).

        Raises:
            DebugError: an unknown node or a condition that is not accepted.
        """
        _known_node(node)
        if node in SEARCH_NODES:
            if "list" not in self.settings.generators:
                raise DebugError(f"{node} is a step of LIST's search, and this run's generators "
                                 f"({', '.join(self.settings.generators)}) do not include list.")
        elif node not in self.graph.nodes:
            raise DebugError(f"{node} is not in this run's graph; its generators are "
                             f"{', '.join(self.settings.generators)}.")
        self.breakpoints[node] = Condition(condition) if condition else None

    def clear(self, node: str | None = None) -> None:
        if node is None:
            self.breakpoints.clear()
        elif self.breakpoints.pop(node, "missing") == "missing":
            raise DebugError(f"No breakpoint on {node!r}.")

    # -- looking back -----------------------------------------------------------------------

    def history(self, *, inner: bool = False) -> list[dict[str, Any]]:
        """Every checkpoint of the run, oldest first (see :func:`checkpoint_history`); with
        ``inner``, a search's (LIST's) own checkpoints too, each under the run's checkpoint the
        search started from."""
        return checkpoint_history(self.graph, self.run_id, inner=inner)

    def diff(self, a: str | None = None, b: str | None = None) -> dict[str, tuple[Any, Any]]:
        """What changed between two checkpoints (the current one and its parent by default):
        ``{key: (before, after)}`` for each key whose value differs."""
        if a is None and b is None:
            inside = self.inside()
            if inside:
                return self._inner_diff(inside[0])
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
        result = self.session.replay(self.run_id, start, settings=self.settings, origin="debug")
        self.config = self._latest()
        new = result.usage[before:]
        served = sum(1 for u in new if u.get("replayed") or u.get("typed"))
        return result, served, len(new) - served

    def export_test(self, path: str | Path) -> Path:
        """Write a pytest module at ``path`` (ending in .py), with its data file beside it, that
        replays the branch this debugger stands on from its kept answers and checks its SQL and
        rows (see :mod:`sqlchorus.runs.regression_test`).

        Raises:
            DebugError: a path that cannot be written, a run without an answer yet, or a branch
                its kept answers do not reproduce.
        """
        return regression_test.export_test(self, path)

    def teach(self, sql: str | None = None, *, hint: str | None = None, author: str | None = None) -> dict[str, Any]:
        """Teach the run's database this run's question with ``sql``, or with the answer of the
        branch the debugger stands on when no SQL is given; the entry kept (see
        :mod:`sqlchorus.runs.teach`). The run's hint goes with it, unless ``hint`` is given.

        Raises:
            DebugError: no SQL given and the branch has no answer yet.
            TaughtError: the example is refused (the SQL's guard, no rows, taught already).
        """
        values = self.state()
        if not (sql or "").strip():
            sql = self.result().sql if self.finished else None
            if not sql:
                raise DebugError("This branch has no answer yet: run it to its end (continue), or give the SQL: "
                                 "teach SELECT ...")
        evidence = values.get("evidence") or "" if hint is None else hint
        return Teacher(self.session, self.settings).teach(
            self.resources.db, values.get("question") or "", sql, hint=evidence, author=author, run_id=self.run_id,
            source="debug")

    def ends(self) -> dict[str, Any]:
        """The run's own last checkpoint and every branch that ended since (:func:`branch_ends`)."""
        return branch_ends(self.graph, self.run_id)


def branch_ends(graph: Any, run_id: str) -> dict[str, Any]:
    """What the run did first and where its branches ended, from its checkpoints in ``graph``'s
    store.

    The run's own path is told from the branches by age alone: starting at its first checkpoint,
    it goes each time to the oldest child a step of the run made (source ``loop``). A run is
    written before anyone debugs it, so at every fork its own child is the oldest, and an edit
    (source ``update``) is never a step of it; what a run did stays found however many branches
    are made from it later, and without anything recorded beside the checkpoints.

    Returns:
        ``{"original": ..., "branches": [...]}``. ``original`` is the last checkpoint of the run's
        own path (None for a run without checkpoints): ``checkpoint``, ``finished`` (nothing was
        due next) and ``values`` (the state there). ``branches`` holds, oldest first, every
        other checkpoint where the run had ended (nothing due next), each with ``checkpoint``,
        ``forked_from`` (the checkpoint of the run's own path it branched from), ``edits`` (the
        state keys edited on the way, in order, each once), ``sql`` (its answer's SQL, or None)
        and ``values``.
    """
    snaps = list(graph.get_state_history({"configurable": {"thread_id": run_id}}))[::-1]  # oldest first
    if not snaps:
        return {"original": None, "branches": []}
    by_id = {s.config["configurable"]["checkpoint_id"]: s for s in snaps}
    parent_of = {cid: (s.parent_config or {}).get("configurable", {}).get("checkpoint_id") for cid, s in by_id.items()}
    steps_from: dict[str | None, list[str]] = {}
    for cid, snap in by_id.items():
        if (snap.metadata or {}).get("source") == "loop":
            steps_from.setdefault(parent_of[cid], []).append(cid)
    root = next((cid for cid in by_id if parent_of[cid] not in by_id), None)
    own, at = [], root
    while at is not None and at not in own:
        own.append(at)
        at = (steps_from.get(at) or [None])[0]
    on_path = set(own)
    last = by_id[own[-1]]
    original = {"checkpoint": own[-1], "finished": not last.next, "values": dict(last.values)}
    branches = []
    for cid, snap in by_id.items():
        if cid == own[-1] or snap.next:
            continue
        found: list[list[str]] = []  # each edit's keys, newest edit first
        at = cid
        while at is not None and at not in on_path:
            here, before = by_id[at], by_id.get(parent_of[at])
            if (here.metadata or {}).get("source") == "update" and before is not None:
                found.append([k for k in state_keys() if before.values.get(k) != here.values.get(k)])
            at = parent_of[at] if parent_of[at] in by_id else None
        edits = list(dict.fromkeys(k for keys in reversed(found) for k in keys))
        answer = snap.values.get("answer") or {}
        branches.append({"checkpoint": cid, "forked_from": at, "edits": edits,
                         "sql": answer.get("sql") if isinstance(answer, dict) else None, "values": dict(snap.values)})
    return {"original": original, "branches": branches}


def _known_node(node: str) -> None:
    if node not in node_names():
        raise DebugError(f"No node {node!r}; the nodes are {', '.join(node_names())}.")
