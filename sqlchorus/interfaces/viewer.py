"""The viewer: ``sqlchorus ui``, a web app over the runs on disk, made for text-to-SQL.

Pages (one app, its assets in ``sqlchorus/ui/``, nothing fetched from elsewhere): the runs list
(an evaluation's runs correct or wrong, debugging sessions under the run they came from); a run —
the graph of the generators it ran with the path it took, its spans as a tree, its model calls,
candidates and their fixes, selection, answer and cost per node, read from the checkpoint store
that holds it (an evaluation's own for its runs); step-through with the debugger (timeline and
fork tree, state and diff at any checkpoint, edit and resume or fork, breakpoints); a live run
whose nodes light up as they run; an evaluation's questions (gold and predicted SQL and their
rows, filters, accuracy charts); two runs or two evaluations compared; and plots across runs.
The JSON API under ``/api`` is what the page uses.

Teaching (:class:`~sqlchorus.runs.teach.Teacher`): a run's question, hint and answer (or SQL the
user gives) kept as a taught example of the run's database, and an evaluation's wrong questions
taught with their gold SQL; a run's page says which taught examples its nodes showed and which
glossary terms its question named. The database and the question come from the run's own record,
never from the request: a request names a run, and at most gives SQL, which the database's guard
checks before anything is kept.

Runs are addressed by id only. Every value reaches the page as JSON and is put into it as text,
never as markup. The app never writes to a database: edits go to the checkpoint store, taught
examples to the examples store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import threading
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict
from sse_starlette.sse import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from sqlchorus.config.settings import Settings
from sqlchorus.core.candidates import fix_record
from sqlchorus.core.checkpoints import UnknownRunError
from sqlchorus.core.trace_file import is_run_span, read_spans
from sqlchorus.core.tracing import valid_run_id
from sqlchorus.evaluation.report import verdict_text
from sqlchorus.evaluation.runs import read_branches, score_branches
from sqlchorus.graph.build import build_graph
from sqlchorus.interfaces.http_guard import Guard, client_of, install_error_handlers
from sqlchorus.runs.debugger import DebugError, Debugger, branch_ends
from sqlchorus.runs.run_index import (
    MAX_SPANS,
    RunIndex,
    call_of,
    layout,
    match_calls,
    path_taken,
    span_info,
    span_usage,
    summarise,
    waterfall,
)
from sqlchorus.runs.service import RunService
from sqlchorus.runs.teach import TaughtError, Teacher
from sqlchorus.tools.tracing import attributes as attrs
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.json_values import json_value
from sqlchorus.tools.models.pricing import usage_cost
from sqlchorus.tools.examples.taught import without_glossary

ASSETS = Path(__file__).parent / "ui"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
"""Everything the page loads comes from its own origin."""
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'"
"""An evaluation's report is a page of its own, shown with no scripts at all."""
_log = logging.getLogger(__name__)


class NoModel(BaseChatModel):
    """The model of a viewer started without one: runs on disk are shown and stepped through
    (their calls are served from their call logs), but a call that needs a model says why not."""

    @property
    def _llm_type(self) -> str:
        return "none"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        raise RuntimeError("no model is configured: start sqlchorus ui with --model (or SQLCHORUS_MODEL) to ask "
                           "questions or to call a model from a changed step")


class Question(BaseModel):
    question: str
    database: str | None = None
    evidence: str = ""


class Edit(BaseModel):
    key: str
    value: Any = None


class Breakpoint(BaseModel):
    node: str
    condition: str | None = None


class Teach(BaseModel):
    """What the run's page teaches: ``sql`` the user says is right, or none for the run's own
    answer. Nothing else: the question, hint and database are the run's, so a field naming one
    is refused rather than ignored."""

    model_config = ConfigDict(extra="forbid")

    sql: str | None = None


class Viewer:
    """What the app reads and drives: the runs index, the run service (live runs, databases),
    and the debuggers opened from the page."""

    def __init__(self, service: RunService, index: RunIndex):
        self.service = service
        self.index = index
        self.settings = service.settings
        self._debuggers: dict[str, Debugger] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._graphs: dict[tuple, dict[str, Any]] = {}
        self._traces: dict[tuple, dict[str, Any]] = {}

    # -- a run ----------------------------------------------------------------------------------

    def detail(self, run_id: str) -> dict[str, Any]:
        found = self.index.path_of(run_id)
        if found is None:
            raise UnknownRunError(f"No run {run_id!r}.")
        try:
            return self._detail(run_id, *found)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"The trace of run {run_id} cannot be read ({type(e).__name__}: {e}).") from e

    def _read(self, run_id: str, group: str, path: Path) -> dict[str, Any]:
        """What a run's trace file gives its page, read again only when the file changes (a
        large run's page opens again at once)."""
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if key in self._traces:
                return self._traces[key]
        spans = read_spans(path, MAX_SPANS)
        answered = [u for u in span_usage(spans) if u["node"] and "cost_usd" in u]
        root = (_run_span(spans) or {}).get("attributes") or {}
        read = {"summary": summarise(run_id, group, spans).to_dict(), "rows": waterfall(spans),
                "path": path_taken(spans), "answered": answered, "spans": spans, "root": root,
                "taught": _taught_uses(spans), "glossary": _json_list(root.get(attrs.SQLCHORUS_GLOSSARY))}
        with self._lock:
            self._traces[key] = read
            while len(self._traces) > 8:
                self._traces.pop(next(iter(self._traces)))
        return read

    def _detail(self, run_id: str, group: str, path: Path) -> dict[str, Any]:
        read = self._read(run_id, group, path)
        detail: dict[str, Any] = {"summary": dict(read["summary"])}
        rows = [dict(r) for r in read["rows"]]  # each page's own: its calls are matched below
        _mark_taught(rows, read["taught"])
        detail["path"] = read["path"]
        record, state, calls = self._kept(run_id)
        match_calls(rows, calls)
        for call in calls:  # each call names the model that answered it, as its usage record does
            call.setdefault("model", (call.get("usage") or {}).get("model") or "")
        detail["graph"] = self.graph_of(record)
        detail["checkpoints"] = record is not None
        detail["calls"] = calls
        judged = self.index.record_of(group, run_id)
        if judged is not None:
            detail["eval"] = _eval_row(judged)
            detail["summary"].update(correct=detail["eval"]["correct"], verdict=judged.get("verdict"),
                                     hardness=judged.get("difficulty"), gold_sql=judged.get("gold_sql"),
                                     question_id=judged.get("question_id"))
            # The page shows what was scored, the run's own path; debugging branches go beside it,
            # each with its own verdict against the gold.
            original, detail["eval"]["branches"] = self._branches(run_id, group, judged, record)
            if original is not None:
                state = original
        # The debugging sessions and replays that came from this run.
        detail["sessions"] = [r.to_dict() for r in self.index.runs() if r.replay_of == run_id]
        if state is not None:
            detail["answer"] = state.get("answer")
            # The Fixes column counts the rounds the fixer spent on a candidate, as recorded
            # (``fix_attempts`` counts only those that gave a new query).
            detail["candidates"] = [{**c, "fixer_rounds": fix_record({"fix_attempts": 0, **c})["rounds"]}
                                    for c in state.get("candidates") or []]
            detail["selection"] = state.get("selection") or {}
            detail["errors"] = state.get("errors") or []
        # The calls that answered: a failed call has no cost, and no tokens to show.
        answered = usage_cost(read["answered"])
        # A cost with unpriced calls reads "unpriced" on the page, not $0.
        detail["summary"].update(unpriced_calls=answered["unpriced_calls"], unpriced_models=answered["unpriced_models"],
                                 cached_calls=answered["cached_calls"])
        detail["cost_by_node"] = {
            node: {"calls": c["calls"], "tokens": c["input_tokens"] + c["output_tokens"], "cost_usd": c["cost_usd"],
                   "unpriced_calls": c["unpriced_calls"], "cached_calls": c["cached_calls"],
                   "ms": round(c["model_seconds"] * 1000, 1)}
            for node, c in answered["by_node"].items()
        }
        detail["asked"] = _asked(read["root"], read["glossary"], judged, record, detail.get("answer"))
        detail["taught"] = {"examples": self._known(read["taught"]), "glossary": read["glossary"]}
        detail = json_value(detail)
        detail["spans"] = rows  # JSON values already (read from JSON), many: not walked again
        return detail

    def _branches(self, run_id: str, group: str, judged: dict[str, Any],
                  kept: dict[str, Any] | None) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """An evaluation's run: the state its own path ended with, and its debugging branches that
        ended, scored against the question's gold (:func:`score_branches`)."""
        store, folder = self.store_of(run_id), self.index.eval_dir(group)
        if store is None or kept is None or folder is None:
            return None, []
        generators = (kept.get("settings") or {}).get("generators") or self.settings.generators
        graph = self.service.session.graph(self.settings.replace(generators=dict(generators)), store)
        ends = branch_ends(graph, run_id)
        original = ends["original"]["values"] if ends["original"] is not None else None
        return original, score_branches(folder, judged, ends["branches"])

    def _ended_branch(self, run_id: str, debugger: Debugger) -> dict[str, Any] | None:
        """The verdict of the branch the step-through just ended, for a run of an evaluation."""
        found = self.index.path_of(run_id)
        folder = self.index.eval_dir(found[0]) if found and found[0] else None
        judged = self.index.record_of(found[0], run_id) if folder is not None and found else None
        if judged is None or not debugger.finished:
            return None
        here = debugger.checkpoint_id
        ended = [b for b in debugger.ends()["branches"] if b["checkpoint"] == here]
        scored = score_branches(folder, judged, ended) if ended else []
        return scored[0] if scored else None

    def settings_of(self, run_id: str) -> Settings:
        """The viewer's settings with the checkpoint store that holds ``run_id``: an evaluation's
        own store for its runs, the viewer's for the rest."""
        kept = self.index.checkpoints_of(run_id)
        return self.settings.replace(checkpoints=str(kept)) if kept is not None else self.settings

    def store_of(self, run_id: str) -> Any:
        kept = self.index.checkpoints_of(run_id)
        if kept is None:
            return self.service.store
        return self.service.session.checkpoints(self.settings.replace(checkpoints=str(kept)))

    def span(self, run_id: str, span_id: str) -> dict[str, Any]:
        found = self.index.path_of(run_id)
        if found is None:
            raise UnknownRunError(f"No run {run_id!r}.")
        info = span_info(self._read(run_id, *found)["spans"], span_id)  # the page's own read of the trace
        if info is None:
            raise UnknownRunError(f"Run {run_id} has no span {span_id!r}.")
        if attrs.SQLCHORUS_CALL_ID in info["attributes"]:  # a model call: its prompt and answer, as kept
            info["call"] = call_of(info, self._kept(run_id)[2])
        info["taught"] = self._known(_taught_uses([info]))
        return json_value(info)

    # -- evaluations ----------------------------------------------------------------------------

    def evals(self) -> list[dict[str, Any]]:
        found = []
        for name in self.index.evals():
            rows = [_eval_row(r) for r in self.index.records(name)]
            scored = [r for r in rows if r["scored"]]
            meta = _read_json(self.index.eval_dir(name) / "run.json")  # type: ignore[operator]
            found.append({"name": name, "questions": len(rows), "scored": len(scored),
                          "correct": sum(1 for r in scored if r["correct"]),
                          "dataset": meta.get("dataset"), "started": meta.get("started"),
                          "settings": meta.get("settings") or {}, "report": self.index.report(name) is not None})
        return found

    def evaluation(self, name: str) -> dict[str, Any]:
        folder = self.index.eval_dir(name)
        records = self.index.records(name) if folder is not None else []
        if folder is None or not records:
            raise UnknownRunError(f"No evaluation {name!r} with records.")
        listed = {s.run_id for s in self.index.runs() if s.group == name}
        rows = [_eval_row(r) for r in records]
        # Beside each recorded verdict, the verdicts of its debugging branches, as scored when they ended.
        branches = read_branches(folder)
        for row in rows:
            row["has_run"] = row["run_id"] in listed
            row["branches"] = branches.get(row["run_id"] or "", [])
        # BIRD's Soft-F1 and R-VES come from the scorer's summary: R-VES is timed, so the records
        # alone cannot give it again.
        summary = _read_json(folder / "summary.json")
        metrics = {key: summary.get(key) for key in ("soft_f1", "r_ves") if key in summary}
        return json_value({"name": name, "run": _read_json(folder / "run.json"), "questions": rows,
                           "report": self.index.report(name) is not None, "metrics": metrics})

    def eval_rows(self, name: str, index: int) -> dict[str, Any]:
        """The rows of a question's gold SQL and of its prediction, run read-only on its database."""
        record = next((r for r in self.index.records(name) if r.get("index") == index), None)
        if record is None:
            raise UnknownRunError(f"No question {index} in evaluation {name!r}.")
        db_path = record.get("db_path")
        if not db_path or not Path(db_path).is_file():
            missing = {"error": f"The database of question {record.get('question_id')} is not on this machine."}
            return {"gold": missing, "predicted": missing}
        out: dict[str, Any] = {}
        with GuardedDatabase(Path(db_path), timeout_s=self.settings.sql_timeout_s, max_rows=ROWS_SHOWN) as db:
            for side, sql in (("gold", record.get("gold_sql")), ("predicted", record.get("prediction"))):
                if not sql:
                    out[side] = {"error": "no SQL"}
                    continue
                try:
                    result = db.execute(sql, max_rows=ROWS_SHOWN)
                    out[side] = {"columns": list(result.columns), "rows": [list(r) for r in result.rows],
                                 "truncated": bool(result.truncated)}
                except Exception as e:  # a wrong query's own error is what this shows
                    out[side] = {"error": f"{type(e).__name__}: {e}"}
        return json_value(out)

    def _kept(self, run_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None, list[dict[str, Any]]]:
        """The run's record, its newest state and its model calls, from the checkpoint store
        that holds it (an evaluation's own, for its runs)."""
        record, state = self._record_and_state(run_id)
        if record is None:
            return None, None, []
        return record, state, self.store_of(run_id).calls(run_id)

    def _record_and_state(self, run_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The run's record and newest state, without its model calls (teaching needs no more)."""
        store = self.store_of(run_id)
        if store is None:
            return None, None
        try:
            record = store.run(run_id)
        except UnknownRunError:
            return None, None
        item = store.get_tuple({"configurable": {"thread_id": run_id, "checkpoint_ns": ""}})
        state = dict(item.checkpoint.get("channel_values") or {}) if item is not None else None
        return record, state

    def graph_of(self, record: dict[str, Any] | None) -> dict[str, Any]:
        """The drawing of the graph a run ran (its generators; the viewer's own for a run with no
        record), laid out in layers."""
        generators = (record or {}).get("settings", {}).get("generators") or self.settings.generators
        key = tuple(sorted((str(k), int(v)) for k, v in generators.items()))
        with self._lock:
            if key not in self._graphs:
                drawn = build_graph(Settings(generators=dict(key))).get_graph()
                self._graphs[key] = layout(list(drawn.nodes), [(e.source, e.target) for e in drawn.edges])
            return self._graphs[key]

    # -- teaching -------------------------------------------------------------------------------

    def teacher(self) -> Teacher:
        """Teaches into the viewer's examples store (``--examples-store``; its checkpoint store
        by default), whichever store holds the run: later runs read the examples from there."""
        return Teacher(self.service.session, self.settings)

    def asked(self, run_id: str) -> dict[str, Any]:
        """What ``run_id`` was asked and answered, as teaching takes it: its question, the hint it
        was given, its database and the SQL of its answer (an evaluation's run: what was scored).

        Raises:
            UnknownRunError: no such run.
        """
        found = self.index.path_of(run_id)
        if found is None:
            raise UnknownRunError(f"No run {run_id!r}.")
        group, path = found
        read = self._read(run_id, group, path)
        judged = self.index.record_of(group, run_id)
        record, state = self._record_and_state(run_id)
        return _asked(read["root"], read["glossary"], judged, record, (state or {}).get("answer"))

    def teach_run(self, run_id: str, sql: str | None) -> dict[str, Any]:
        """Keep the run's question and hint with ``sql`` (the run's own answer when None) as a
        taught example of the run's database; the entry kept.

        Raises:
            UnknownRunError: no such run.
            TaughtError: refused, in one line (no SQL chosen, no database known, or what
                :meth:`Teacher.teach` refuses); NoExamplesStoreError, CheckpointFileError: no usable store.
        """
        asked = self.asked(run_id)
        if sql is None and not asked["sql"]:
            raise TaughtError(f"Run {run_id} chose no SQL, so there is none to call right: give the right SQL instead.")
        if not asked["database"]:
            raise TaughtError(f"The database of run {run_id} is not known (its record and trace name none), "
                              "so nothing was taught.")
        entry = self.teacher().teach(asked["database"], asked["question"], asked["sql"] if sql is None else sql,
                                     hint=asked["hint"], run_id=run_id, source="ui")
        return json_value({"kept": entry})

    def teach_gold(self, name: str) -> dict[str, Any]:
        """Teach the gold SQL of every question evaluation ``name`` scored wrong, with its hint,
        from its run: how many were kept, and each refused one with why. A refusal (a duplicate,
        a gold query that returns no rows) does not stop the others.

        Raises:
            UnknownRunError: no such evaluation.
            NoExamplesStoreError, CheckpointFileError: no usable store (said before any question).
        """
        records = self.index.records(name) if self.index.eval_dir(name) is not None else []
        if not records:
            raise UnknownRunError(f"No evaluation {name!r} with records.")
        teacher = self.teacher()
        teacher.store()
        wrong = [r for r in records if _is_wrong(r)]
        kept, refused = [], []
        for record in wrong:
            which = {"index": record.get("index"), "question_id": record.get("question_id"),
                     "question": record.get("question") or ""}
            try:
                kept.append({**which, "id": _teach_gold_of(teacher, record)["id"]})
            except SqlchorusError as e:
                refused.append({**which, "error": _first_line(e)})
            except Exception as e:  # noqa: BLE001 - one question's fault is its own line; the others go on
                _log.exception("sqlchorus ui: teaching question %s of evaluation %s failed", which["question_id"], name)
                refused.append({**which, "error": f"It could not be taught ({type(e).__name__}: {_first_line(e)})."})
        return json_value({"wrong": len(wrong), "n_kept": len(kept), "kept": kept,
                           "n_refused": len(refused), "refused": refused})

    def _known(self, uses: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Taught examples a run used, each with whether the viewer has the run it was taught
        from (the page links it then) and, while the examples store keeps it, its question and SQL."""
        entries = self._taught_entries({u["id"] for u in uses})
        runs = {u["run_id"] for u in uses if u.get("run_id")}
        known = {r for r in runs if valid_run_id(r) and self.index.path_of(r) is not None}
        out = []
        for use in uses:
            entry = entries.get(use["id"]) or {}
            out.append({**use, "known": use.get("run_id") in known, "kept": bool(entry),
                        "question": entry.get("question"), "sql": entry.get("sql")})
        return out

    def _taught_entries(self, ids: set[str]) -> dict[str, dict[str, Any]]:
        """The entries of ``ids`` the examples store keeps; none when it is off or away (the
        trace alone still says which examples were used)."""
        if not ids:
            return {}
        try:
            store = self.teacher().store()
        except SqlchorusError:
            return {}
        try:
            return {e["id"]: e for e in store.taught(ids=sorted(ids))}
        except store.db_errors:
            return {}

    # -- step-through -----------------------------------------------------------------------

    def _debugger(self, run_id: str, at: str | None = None, reopen: bool = False) -> Debugger:
        with self._lock:
            debugger = self._debuggers.get(run_id)
            if debugger is not None and not reopen:
                return debugger
        if debugger is not None:
            debugger.close()
        opened = Debugger.open(run_id, at=at, settings=self.settings_of(run_id), session=self.service.session)
        with self._lock:
            self._debuggers[run_id] = opened
            self._locks.setdefault(run_id, threading.Lock())
        return opened

    def debug_start(self, question: str, database: str | None, evidence: str) -> dict[str, Any]:
        _, path = self.service.resolve(database)
        debugger = Debugger.start(question, path, evidence=evidence, settings=self.settings, session=self.service.session)
        with self._lock:
            self._debuggers[debugger.run_id] = debugger
            self._locks.setdefault(debugger.run_id, threading.Lock())
        return self.position(debugger.run_id)

    def position(self, run_id: str, checkpoint: str | None = None) -> dict[str, Any]:
        debugger = self._debugger(run_id)
        with self._locks[run_id]:
            history = debugger.history()
            current = debugger.checkpoint_id
            shown = checkpoint or current
            by_id = {h["id"]: h for h in history}
            if shown not in by_id:
                shown = next((h["id"] for h in history if checkpoint and checkpoint in h["id"]), current)
            snap = debugger.snapshot(shown)
            values = dict(snap.values) if snap is not None else {}
            parent = by_id.get(shown, {}).get("parent")
            diff = debugger.diff(parent, shown) if parent else {}
            return json_value({
                "run_id": run_id, "checkpoint": current, "shown": shown, "next": list(debugger.next_nodes),
                "finished": debugger.finished, "history": history, "state": values,
                "diff": {k: {"before": b, "after": a} for k, (b, a) in diff.items()},
                "breakpoints": {n: (str(c) if c is not None else None) for n, c in debugger.breakpoints.items()},
                "notes": debugger.notes,
            })

    def act(self, run_id: str, action: str, **kw: Any) -> dict[str, Any]:
        debugger = self._debugger(run_id)
        with self._locks[run_id]:
            said: Any = None
            if action == "step":
                said = debugger.step()
            elif action == "cont":
                said = debugger.cont()
            elif action == "set":
                said = debugger.set(kw["key"], kw["value"])
            elif action == "fork":
                debugger.goto(kw["checkpoint"])
            elif action == "break":
                debugger.add_break(kw["node"], kw.get("condition"))
            elif action == "clear":
                debugger.clear(kw.get("node"))
            else:
                raise DebugError(f"Unknown action {action!r}.")
            branch = self._ended_branch(run_id, debugger)
        position = self.position(run_id)
        position["said"] = json_value(said)
        if branch is not None:
            position["branch"] = json_value(branch)
        return position

    def close(self) -> None:
        with self._lock:
            debuggers, self._debuggers = list(self._debuggers.values()), {}
        for debugger in debuggers:
            debugger.close()


def create_app(service: RunService, index: RunIndex, *, token: str | None = None, host: str | None = None) -> Any:
    """The viewer over ``service`` (databases, live runs, checkpoints) and ``index`` (traces);
    ``host``: the address it listens on, whose names it answers."""
    viewer = Viewer(service, index)
    # Known to the viewer's own page only: a page elsewhere cannot read it, so it cannot send it.
    csrf = secrets.token_urlsafe(32)
    index_html = (ASSETS / "index.html").read_text(encoding="utf-8").replace("{csrf}", csrf)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        yield
        viewer.close()  # the debuggers opened from the page finish their traces

    app = FastAPI(title="sqlchorus viewer", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.viewer = viewer

    @app.middleware("http")
    async def headers(request: Request, call_next: Any) -> Any:
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response

    install_error_handlers(app, {ValueError: (422, "invalid_request")})

    @app.get("/", include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(index_html)

    @app.get("/assets/{name}", include_in_schema=False)
    async def asset(name: str) -> FileResponse:
        files = {p.name: p for p in ASSETS.iterdir() if p.is_file() and p.name != "index.html"}
        if name not in files:
            raise StarletteHTTPException(404, f"No asset {name!r}.")
        types = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
        return FileResponse(files[name], media_type=types.get(files[name].suffix, "application/octet-stream"))

    @app.get("/api/runs")
    async def runs() -> dict[str, Any]:
        found = await asyncio.to_thread(index.runs)
        groups = sorted({s.group for s in found if s.group})
        return {"runs": [s.to_dict() for s in found],
                "groups": [{"name": g, "report": index.report(g) is not None} for g in groups]}

    @app.get("/api/runs/{run_id}")
    async def run(run_id: str) -> Response:
        _check(run_id)
        # Already JSON values: written at once, not walked again (a run may have 20,000 spans).
        body = await asyncio.to_thread(lambda: json.dumps(viewer.detail(run_id), separators=(",", ":")))
        return Response(body, media_type="application/json")

    @app.get("/api/runs/{run_id}/spans/{span_id}")
    async def span(run_id: str, span_id: str) -> dict[str, Any]:
        _check(run_id)
        return await asyncio.to_thread(viewer.span, run_id, span_id)

    @app.get("/api/evals")
    async def evals() -> dict[str, Any]:
        return {"evals": await asyncio.to_thread(viewer.evals)}

    @app.get("/api/evals/{name}")
    async def evaluation(name: str) -> dict[str, Any]:
        return await asyncio.to_thread(viewer.evaluation, name)

    @app.get("/api/evals/{name}/rows/{index}")
    async def eval_rows(name: str, index: int) -> dict[str, Any]:
        return await asyncio.to_thread(viewer.eval_rows, name, index)

    @app.get("/api/stats")
    async def stats(last: int = 50) -> dict[str, Any]:
        return await asyncio.to_thread(index.stats, max(1, min(last, 1000)))

    @app.get("/api/graph")
    async def graph() -> dict[str, Any]:
        """The graph new runs from the page run, laid out."""
        return {"graph": await asyncio.to_thread(viewer.graph_of, None)}

    @app.get("/api/databases")
    async def databases() -> dict[str, Any]:
        return {"databases": await asyncio.to_thread(service.databases)}

    # -- teaching -------------------------------------------------------------------------------
    # State-changing requests like every POST here: the Guard below checks host, token, origin
    # and the page's CSRF token before they reach these.

    @app.post("/api/runs/{run_id}/teach")
    async def teach_run(run_id: str, body: Teach) -> dict[str, Any]:
        _check(run_id)
        return await asyncio.to_thread(viewer.teach_run, run_id, body.sql)

    @app.post("/api/evals/{name}/teach")
    async def teach_gold(name: str) -> dict[str, Any]:
        return await asyncio.to_thread(viewer.teach_gold, name)

    @app.get("/evals/{name}/report", include_in_schema=False)
    async def report(name: str) -> Any:
        path = index.report(name)
        if path is None:
            raise StarletteHTTPException(404, f"No report for {name!r}.")
        return HTMLResponse(path.read_text(encoding="utf-8"), headers={"Content-Security-Policy": REPORT_CSP})

    # -- live runs ------------------------------------------------------------------------------

    @app.post("/api/live")
    async def live(body: Question, request: Request) -> dict[str, Any]:
        started = await asyncio.to_thread(service.start, body.question, body.database, body.evidence,
                                          client=client_of(request))
        return {"run_id": started.run_id}

    @app.get("/api/live/{run_id}/events")
    async def live_events(run_id: str) -> Any:
        _check(run_id)
        started = service.live(run_id)
        if started is None:
            raise UnknownRunError(f"Run {run_id} is not running here.")

        async def events() -> Any:
            async for event in started.listen():
                yield {"event": event["event"], "data": json.dumps(json_value(event))}

        return EventSourceResponse(events(), ping=15)

    # -- step-through ---------------------------------------------------------------------------

    async def act(run_id: str, action: str, **kw: Any) -> dict[str, Any]:
        _check(run_id)
        return await asyncio.to_thread(viewer.act, run_id, action, **kw)

    @app.post("/api/debug")
    async def debug_start(body: Question) -> dict[str, Any]:
        return await asyncio.to_thread(viewer.debug_start, body.question, body.database, body.evidence)

    @app.get("/api/debug/{run_id}")
    async def debug_position(run_id: str, checkpoint: str | None = None) -> dict[str, Any]:
        _check(run_id)
        return await asyncio.to_thread(viewer.position, run_id, checkpoint)

    @app.post("/api/debug/{run_id}/step")
    async def debug_step(run_id: str) -> dict[str, Any]:
        return await act(run_id, "step")

    @app.post("/api/debug/{run_id}/continue")
    async def debug_cont(run_id: str) -> dict[str, Any]:
        return await act(run_id, "cont")

    @app.post("/api/debug/{run_id}/set")
    async def debug_set(run_id: str, body: Edit) -> dict[str, Any]:
        return await act(run_id, "set", key=body.key, value=body.value)

    @app.post("/api/debug/{run_id}/fork/{checkpoint}")
    async def debug_fork(run_id: str, checkpoint: str) -> dict[str, Any]:
        return await act(run_id, "fork", checkpoint=checkpoint)

    @app.post("/api/debug/{run_id}/breakpoints")
    async def debug_break(run_id: str, body: Breakpoint) -> dict[str, Any]:
        return await act(run_id, "break", node=body.node, condition=body.condition)

    @app.delete("/api/debug/{run_id}/breakpoints/{node}")
    async def debug_clear(run_id: str, node: str) -> dict[str, Any]:
        return await act(run_id, "clear", node=node)

    return Guard(app, token, 256 * 1024, browser=True, host=host, csrf=csrf)


ROWS_SHOWN = 50
"""Rows of a gold query and of a prediction the evaluation page shows side by side."""


def _read_json(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _error_kind(record: dict[str, Any]) -> str:
    """What went wrong with a question, in one word, the scorer's verdict (``missing_prediction``
    for a question with no prediction, whether its run had no answer or raised): none when it
    was answered right."""
    if record.get("correct"):
        return "none"
    if record.get("status") == "missing_db":
        return "missing_db"
    return str(record.get("verdict") or "wrong")


def _eval_row(record: dict[str, Any]) -> dict[str, Any]:
    """One question of an evaluation as its page shows it: scored as the scorer scores it (every
    question whose database is there; one with no prediction counts as wrong), its verdict in the
    words of the report and the command line (:func:`verdict_text`)."""
    scored = record.get("status") != "missing_db"
    return {
        "verdict_text": verdict_text(record),
        "unpriced": bool(record.get("unpriced_calls") or record.get("unpriced_models")),
        "index": record.get("index"), "question_id": record.get("question_id"), "db_id": record.get("db_id"),
        "hardness": record.get("difficulty") or "", "question": record.get("question") or "",
        "gold_sql": record.get("gold_sql") or "", "prediction": record.get("prediction") or "",
        "correct": bool(record.get("correct")), "scored": scored, "verdict": record.get("verdict"),
        "verdict_error": record.get("verdict_error"), "status": record.get("status"), "error": record.get("error"),
        "error_kind": _error_kind(record), "generator": record.get("chosen_generator") or "",
        "any_candidate_correct": bool(record.get("any_candidate_correct")),
        "candidates": len(record.get("candidates") or []),
        "cost_usd": float(record.get("cost_usd") or 0.0), "seconds": float(record.get("seconds") or 0.0),
        "tokens": int(record.get("input_tokens") or 0) + int(record.get("output_tokens") or 0),
        "calls": int(record.get("model_calls") or 0),
        "run_id": record.get("run_id") if valid_run_id(str(record.get("run_id") or "")) else None,
    }


def _check(run_id: str) -> None:
    if not valid_run_id(run_id):
        raise UnknownRunError(f"{run_id!r} is not a run id.")


# -- teaching -------------------------------------------------------------------------------------


def _first_line(error: BaseException) -> str:
    """An error as the page's one line says it: a refusal's first line, or its type's name."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _json_list(raw: Any) -> list[dict[str, Any]]:
    """A span attribute holding a JSON list of objects, as its objects; anything else (a trace
    of another version, a torn value) as none, so that it costs its own line, not the page."""
    if not isinstance(raw, str):
        return []
    try:
        found = json.loads(raw)
    except ValueError:
        return []
    return [x for x in found if isinstance(x, dict)] if isinstance(found, list) else []


def _run_span(spans: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The run's own span: the run span whose parent is not in the file (as :func:`summarise`
    finds it)."""
    ids = {s["context"]["span_id"] for s in spans}
    runs = [s for s in spans if is_run_span(s.get("name"), s.get("attributes"))]
    return next((s for s in runs if s.get("parent_id") not in ids), runs[0] if runs else None)


def _taught_uses(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each taught example a span's prompts showed (``sqlchorus.taught_examples``), with the
    span and the node it was in, in the spans' order."""
    uses = []
    for span in spans:
        a = span.get("attributes") or {}
        node = a.get(attrs.SQLCHORUS_NODE) or str(span.get("name") or "").removeprefix(attrs.NODE_SPAN_PREFIX)
        for shown in _json_list(a.get(attrs.SQLCHORUS_TAUGHT_EXAMPLES)):
            if not shown.get("id"):
                continue
            run_id = shown.get("run_id")
            uses.append({"span_id": (span.get("context") or {}).get("span_id") or span.get("span_id"), "node": node,
                         "id": str(shown["id"]), "run_id": str(run_id) if run_id else None,
                         "source": shown.get("source"), "score": shown.get("score")})
    return uses


def _mark_taught(rows: list[dict[str, Any]], uses: list[dict[str, Any]]) -> None:
    """Say in a span row's text which taught examples it showed, so the tree shows (and its
    filter finds) the nodes that used them."""
    by_span: dict[str, list[str]] = {}
    for use in uses:
        by_span.setdefault(use["span_id"], []).append(use["id"])
    for row in rows:
        ids = by_span.get(row["span_id"])
        if ids:
            said = "taught examples " + ", ".join(ids)
            row["detail"] = f"{row['detail']} — {said}" if row.get("detail") else said


def _own_hint(hint: str, glossary: list[dict[str, Any]]) -> str:
    """The hint a run was asked with: its record keeps it with the sentences of the glossary
    terms its question named added (``hint; term means ...``), which are not the user's. The
    terms are those its trace names, so a term removed since is still taken out, and the page
    shows the hint that will be taught."""
    entries = [{"question": str(g.get("term") or ""), "hint": str(g.get("hint") or ""), "sql": str(g.get("sql") or "")}
               for g in glossary]
    return without_glossary(hint, entries) if entries else hint


def _traced_hint(root: dict[str, Any]) -> str:
    """The hint the run span's input names (``{"question", "evidence"}`` as JSON), when a run
    has no record to say it."""
    try:
        given = json.loads(root.get(attrs.INPUT_VALUE) or "")
    except (TypeError, ValueError):
        return ""
    return str(given.get("evidence") or "") if isinstance(given, dict) else ""


def _asked(root: dict[str, Any], glossary: list[dict[str, Any]], judged: dict[str, Any] | None,
           record: dict[str, Any] | None, answer: dict[str, Any] | None) -> dict[str, Any]:
    """What a run was asked and answered, as teaching takes it. An evaluation's record says
    best (its question, hint, database and the prediction it scored); else the checkpoint
    store's record with the newest answer, as the run's page shows; else the trace."""
    record = record or {}
    traced_sql = root.get(attrs.SQLCHORUS_SQL) or ""
    database = record.get("db_path") or root.get(attrs.SQLCHORUS_DATABASE) or ""
    if judged is not None:
        return {"question": judged.get("question") or record.get("question") or "",
                "hint": judged.get("evidence") or "", "database": judged.get("db_path") or database,
                "sql": judged.get("prediction") or ""}
    if record:
        return {"question": record.get("question") or "", "hint": _own_hint(record.get("evidence") or "", glossary),
                "database": database, "sql": (answer or {}).get("sql") or traced_sql}
    return {"question": str(root.get(attrs.SQLCHORUS_QUESTION) or ""),
            "hint": _own_hint(_traced_hint(root), glossary), "database": database, "sql": traced_sql}


def _is_wrong(record: dict[str, Any]) -> bool:
    """A question the evaluation scored, and scored wrong, as its page counts it (:func:`_eval_row`)."""
    row = _eval_row(record)
    return row["scored"] and not row["correct"]


def _teach_gold_of(teacher: Teacher, record: dict[str, Any]) -> dict[str, Any]:
    """Teach one evaluation question's gold SQL, with its hint, from its run; the entry kept."""
    if not (record.get("gold_sql") or "").strip():
        raise TaughtError("It has no gold SQL to teach.")
    if not record.get("db_path"):
        raise TaughtError("Its database is not on this machine.")
    run_id = record.get("run_id")
    return teacher.teach(record["db_path"], record.get("question") or "", record["gold_sql"],
                         hint=record.get("evidence") or "", run_id=run_id if valid_run_id(str(run_id or "")) else None,
                         source="ui")
