"""The runs on disk, read for the viewer: trace files and what the checkpoint store kept.

A run is found by its id only: ``<id>.jsonl`` in a trace folder (the main one, the other stores
runs are kept in, such as the Python API's, or an evaluation run's ``traces/``; see
:mod:`sqlchorus.runs.run_stores`). :class:`RunIndex` reads each trace file once (again when it
changes) into a :class:`RunSummary`, with an evaluation's verdict from its ``records.jsonl``, and
knows which checkpoint store holds each run that is not the viewer's own; :func:`waterfall` gives a run's spans as a tree,
:func:`path_taken` the path it took through the graph.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlchorus.core.trace_file import is_run_span, read_spans, span_time
from sqlchorus.core.tracing import valid_run_id
from sqlchorus.runs.run_stores import EVAL_CHECKPOINTS, RECORDS_FILE, RunStore
from sqlchorus.tools.tracing import attributes as attrs
from sqlchorus.tools.models.pricing import usage_cost

MAX_SPANS = 20_000
"""Spans of one run the viewer reads at most."""


@dataclass
class RunSummary:
    """One line of the runs list."""

    run_id: str
    group: str
    question: str = ""
    database: str = ""
    status: str = "ok"
    failure: str | None = None
    error: str | None = None
    sql: str | None = None
    calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    """Calls of models with no price, which ``cost_usd`` leaves out: shown as ``unpriced``, not ``$0``."""
    seconds: float = 0.0
    started: str = ""
    replay_of: str | None = None
    spans: int = 0
    correct: bool | None = None
    """An evaluation's run: whether its answer was scored correct (None: not an evaluation's, or not scored)."""
    verdict: str | None = None
    question_id: Any = None
    hardness: str | None = None
    gold_sql: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Cached:
    """What one read of a trace file gives: its line of the runs list, and each node's seconds
    and cost (for the plots across runs)."""

    key: tuple[float, int]
    summary: RunSummary
    nodes: dict[str, list[float]]


def _time(text: str) -> float:
    return span_time(text).timestamp()


def _bounds(span: dict[str, Any]) -> tuple[float, float]:
    """When a span started and ended; one that has not ended, where it started."""
    start = _time(span["start_time"])
    return start, _time(span["end_time"]) if span.get("end_time") else start


def span_usage(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The usage records of a trace's model calls, in the order they started, as the run kept
    them: a call that failed has no ``cost_usd`` (nor tokens, counted as 0)."""
    usage = []
    for span in sorted(spans, key=lambda s: s["start_time"]):
        a = span.get("attributes") or {}
        if a.get(attrs.GEN_AI_OPERATION) != "chat":
            continue
        start, end = _bounds(span)
        record: dict[str, Any] = {
            "node": a.get(attrs.SQLCHORUS_NODE) or "", "role": a.get(attrs.SQLCHORUS_ROLE) or "",
            "model": a.get(attrs.GEN_AI_REQUEST_MODEL) or "",
            "input_tokens": int(a.get(attrs.GEN_AI_USAGE_INPUT) or 0),
            "output_tokens": int(a.get(attrs.GEN_AI_USAGE_OUTPUT) or 0),
            "latency_ms": round((end - start) * 1000, 3),
        }
        if attrs.SQLCHORUS_COST_USD in a:
            record.update(cost_usd=float(a[attrs.SQLCHORUS_COST_USD] or 0.0), priced=a.get(attrs.SQLCHORUS_PRICED),
                          cached=bool(a.get(attrs.SQLCHORUS_CACHE_HIT)), replayed=bool(a.get(attrs.SQLCHORUS_REPLAYED)))
        usage.append(record)
    return usage


def summarise(run_id: str, group: str, spans: list[dict[str, Any]]) -> RunSummary:
    summary = RunSummary(run_id=run_id, group=group, spans=len(spans))
    ids = {s["context"]["span_id"] for s in spans}
    runs = [s for s in spans if is_run_span(s.get("name"), s.get("attributes"))]
    # The run's own span: the one whose parent is not in the file (a host application's span,
    # or none); a debugging session's file may hold more than one.
    root = next((s for s in runs if s.get("parent_id") not in ids), runs[0] if runs else None)
    cost = usage_cost(span_usage(spans))
    summary.calls = cost["calls"]
    summary.tokens = cost["input_tokens"] + cost["output_tokens"]
    summary.unpriced_calls = int(cost.get("unpriced_calls") or 0)
    if root is not None:
        a = root.get("attributes") or {}
        summary.question = str(a.get(attrs.SQLCHORUS_QUESTION, ""))
        summary.database = str(a.get(attrs.DB_NAMESPACE, ""))
        summary.error = a.get(attrs.SQLCHORUS_ERROR)
        summary.sql = a.get(attrs.SQLCHORUS_SQL)
        summary.failure = a.get(attrs.SQLCHORUS_FAILURE)
        summary.cost_usd = float(a.get(attrs.SQLCHORUS_COST_USD) or 0.0)
        summary.replay_of = a.get(attrs.SQLCHORUS_REPLAY_OF)
        summary.started = root["start_time"]
        if root.get("end_time"):
            summary.seconds = round(_time(root["end_time"]) - _time(root["start_time"]), 4)
        summary.status = "ok" if not summary.error else ("cancelled" if summary.failure == "cancelled" else "no_answer")
    else:
        summary.status = "incomplete"
        summary.started = min((s["start_time"] for s in spans), default="")
    return summary


class RunIndex:
    """The runs in ``trace_dir``, in the ``others`` stores, and in every evaluation run under
    ``evals_dir``.

    Args:
        trace_dir: the main trace folder (its runs' checkpoints are the viewer's own store).
        evals_dir: the folder of evaluation runs (each with ``traces/`` and ``report.html``).
        others: more stores whose runs are listed with the main folder's (the Python API's),
            each with its own checkpoint store.
    """

    def __init__(self, trace_dir: str | Path | None, evals_dir: str | Path | None = None, *,
                 others: Sequence[RunStore] = ()):
        self.trace_dir = Path(trace_dir) if trace_dir else None
        self.evals_dir = Path(evals_dir) if evals_dir else None
        main = self.trace_dir.absolute() if self.trace_dir is not None else None
        self.others = [s for s in others if s.traces is not None and s.traces.absolute() != main]
        self._cache: dict[Path, _Cached] = {}
        self._records: dict[Path, tuple[tuple[float, int], list[dict[str, Any]]]] = {}
        self._lock = threading.Lock()

    def folders(self) -> list[tuple[str, Path]]:
        """(group, folder) of every trace folder, in the order a run is looked for: group "" for
        the main one and the other stores, else the evaluation's name."""
        return [(group, folder) for group, folder, _ in self._places()]

    def _places(self) -> list[tuple[str, Path, str | None]]:
        """(group, folder, checkpoint store) of every trace folder; the store None for the main
        folder (the viewer's own) and for an evaluation's (see :meth:`checkpoints_of`)."""
        found: list[tuple[str, Path, str | None]] = []
        if self.trace_dir is not None and self.trace_dir.is_dir():
            found.append(("", self.trace_dir, None))
        for store in self.others:
            if store.traces is not None and store.traces.is_dir():
                found.append(("", store.traces, store.checkpoints))
        if self.evals_dir is not None and self.evals_dir.is_dir():
            for run in sorted(self.evals_dir.iterdir()):
                if (run / "traces").is_dir():
                    found.append((run.name, run / "traces", None))
        return found

    def report(self, group: str) -> Path | None:
        """An evaluation's report file, by its name only."""
        folder = self.eval_dir(group)
        path = folder / "report.html" if folder is not None else None
        return path if path is not None and path.is_file() else None

    def eval_dir(self, group: str) -> Path | None:
        """An evaluation's folder, by its name only (one folder under ``evals_dir``)."""
        if self.evals_dir is None or not group or "/" in group or "\\" in group or group.startswith("."):
            return None
        folder = self.evals_dir / group
        return folder if folder.is_dir() else None

    def evals(self) -> list[str]:
        """The names of the evaluations that kept records."""
        if self.evals_dir is None or not self.evals_dir.is_dir():
            return []
        return sorted(p.name for p in self.evals_dir.iterdir() if (p / RECORDS_FILE).is_file() and self.eval_dir(p.name))

    def records(self, group: str) -> list[dict[str, Any]]:
        """An evaluation's records, the last of each question, in question order (read again
        only when the file changes)."""
        folder = self.eval_dir(group)
        path = folder / RECORDS_FILE if folder is not None else None
        if path is None or not path.is_file():
            return []
        stat = path.stat()
        key = (stat.st_mtime, stat.st_size)
        with self._lock:
            cached = self._records.get(path)
            if cached is not None and cached[0] == key:
                return cached[1]
        found: dict[int, dict[str, Any]] = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line torn by an interruption
                if isinstance(record, dict) and isinstance(record.get("index"), int):
                    found[record["index"]] = record
        records = [found[i] for i in sorted(found)]
        with self._lock:
            self._records[path] = (key, records)
        return records

    def record_of(self, group: str, run_id: str) -> dict[str, Any] | None:
        """The evaluation record of ``run_id``, in evaluation ``group``."""
        return next((r for r in self.records(group) if r.get("run_id") == run_id), None) if group else None

    def checkpoints_of(self, run_id: str) -> Path | None:
        """The checkpoint file of a run that is not the viewer's own: for an evaluation's run,
        the one its record names, else the evaluation's own ``traces/checkpoints.sqlite``; for a
        run of another store (the Python API's), that store's. None for a run of the main trace
        folder (the viewer's own store holds those) or when no such file exists."""
        place = self._place_of(run_id)
        if place is None:
            return None
        group, _, kept = place
        if not group:
            return Path(kept) if kept and "://" not in kept and Path(kept).is_file() else None
        folder = self.eval_dir(group)
        if folder is None:
            return None
        record = self.record_of(group, run_id) or {}
        recorded = record.get("checkpoint_path")
        if recorded and Path(recorded).is_file():
            return Path(recorded)
        own = folder / EVAL_CHECKPOINTS
        return own if own.is_file() else None

    def path_of(self, run_id: str) -> tuple[str, Path] | None:
        """The group and trace file of ``run_id``, found by id only."""
        place = self._place_of(run_id)
        return (place[0], place[1]) if place is not None else None

    def _place_of(self, run_id: str) -> tuple[str, Path, str | None] | None:
        """The group, trace file and checkpoint store (as :meth:`_places` gives it) of ``run_id``."""
        if not valid_run_id(run_id):
            return None
        for group, folder, kept in self._places():
            path = folder / f"{run_id}.jsonl"
            if path.is_file():
                return group, path, kept
        return None

    def runs(self) -> list[RunSummary]:
        """Every run, newest first; an evaluation's with its verdict. A trace file still empty
        (a debugging session opened, nothing written yet) is not a run to list."""
        found = []
        for group, folder in self.folders():
            by_run = {r.get("run_id"): r for r in self.records(group)} if group else {}
            for path in folder.glob("*.jsonl"):
                if valid_run_id(path.stem):
                    summary = self._summary(group, path)
                    if summary is None or (summary.spans == 0 and _empty(path)):
                        continue
                    record = by_run.get(summary.run_id)
                    if record is not None:
                        summary = _judged(summary, record)
                    found.append(summary)
        found.sort(key=lambda s: (s.started, s.run_id), reverse=True)
        return found

    def _summary(self, group: str, path: Path) -> RunSummary | None:
        entry = self._entry(group, path)
        return entry.summary if entry is not None else None

    def _entry(self, group: str, path: Path) -> _Cached | None:
        """The trace file read once, and again only when it changes."""
        try:
            stat = path.stat()
        except OSError:
            return None
        key = (stat.st_mtime, stat.st_size)
        with self._lock:
            cached = self._cache.get(path)
            if cached is not None and cached.key == key:
                return cached
        try:
            spans = read_spans(path, MAX_SPANS)
        except OSError:
            return None
        unreadable = (KeyError, TypeError, ValueError, AttributeError)  # not a trace this version wrote
        try:
            summary = summarise(path.stem, group, spans)
        except unreadable:
            summary = RunSummary(run_id=path.stem, group=group, status="unreadable")
        try:
            nodes = _node_totals(spans)
        except unreadable:
            nodes = {}
        entry = _Cached(key, summary, nodes)
        with self._lock:
            self._cache[path] = entry
        return entry

    def stats(self, last: int = 50) -> dict[str, Any]:
        """Over the newest ``last`` runs: each node's seconds and cost per run, and the failure
        kinds counted."""
        runs = self.runs()[:last]
        per_node: dict[str, dict[str, list]] = defaultdict(
            lambda: {"seconds": [], "cost_usd": [], "tokens": [], "unpriced_calls": [], "runs": [], "started": []})
        for summary in reversed(runs):  # oldest first, as a plot reads
            found = self.path_of(summary.run_id)
            entry = self._entry(*found) if found is not None else None
            if entry is None:
                continue
            for node, (seconds, cost, *tokens) in entry.nodes.items():
                per_node[node]["seconds"].append(round(seconds, 4))
                per_node[node]["cost_usd"].append(round(cost, 8))
                per_node[node]["tokens"].append(int(tokens[0]) if tokens else 0)
                per_node[node]["unpriced_calls"].append(int(tokens[1]) if len(tokens) > 1 else 0)
                per_node[node]["runs"].append(summary.run_id)
                per_node[node]["started"].append(summary.started)
        failures = Counter(s.failure or s.status for s in runs if s.status != "ok")
        return {"runs": len(runs), "ok": sum(1 for s in runs if s.status == "ok"),
                "nodes": dict(per_node), "failures": dict(failures)}


def _empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return True


def _judged(summary: RunSummary, record: dict[str, Any]) -> RunSummary:
    """``summary`` with what its evaluation record says: scored correct or not, against which gold."""
    scored = bool(record.get("ran")) and record.get("status") != "error"
    judged = RunSummary(**summary.to_dict())
    judged.correct = bool(record.get("correct")) if scored else None
    judged.verdict = record.get("verdict")
    judged.question_id = record.get("question_id")
    judged.hardness = record.get("difficulty")
    judged.gold_sql = record.get("gold_sql")
    return judged


def _node_totals(spans: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Seconds (the node's own spans, model calls and all), cost, tokens and unpriced calls per
    node over one run's spans."""
    seconds: dict[str, float] = defaultdict(float)
    for span in spans:
        if span["name"].startswith(attrs.NODE_SPAN_PREFIX) and span.get("end_time"):
            node = span["name"][len(attrs.NODE_SPAN_PREFIX):]
            seconds[node] += _time(span["end_time"]) - _time(span["start_time"])
    cost = usage_cost(span_usage(spans))["by_node"]
    return {node: [took, cost[node]["cost_usd"] if node in cost else 0.0,
                   cost[node]["input_tokens"] + cost[node]["output_tokens"] if node in cost else 0,
                   cost[node].get("unpriced_calls", 0) if node in cost else 0]
            for node, took in seconds.items()}


# -- one run ------------------------------------------------------------------------------------


def waterfall(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Spans as rows of a waterfall, as a tree: each span under its parent (a span whose parent
    is not in the file is a root), siblings in the order they started, so the model calls of
    parallel branches sit under their own node. A row has its start offset and duration in ms,
    its depth, its kind, what it did, and ``end``: the index after its last descendant (the rows
    a collapsed row hides are those up to ``end``)."""
    if not spans:
        return []
    by_id = {s["context"]["span_id"]: s for s in spans}
    t0 = min(_time(s["start_time"]) for s in spans)
    children: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for span in spans:
        parent = span.get("parent_id")
        children[parent if parent in by_id and parent != span["context"]["span_id"] else None].append(span)
    for kids in children.values():
        kids.sort(key=lambda s: (s["start_time"], s["name"]))

    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    # Depth first without recursion (a trace may be deep); a span met twice (a cycle) is shown once.
    stack: list[tuple[dict[str, Any], int, int | None]] = [(s, 0, None) for s in reversed(children[None])]
    opened: list[int] = []
    while stack:
        span, depth, _ = stack.pop()
        span_id = span["context"]["span_id"]
        if span_id in seen:
            continue
        seen.add(span_id)
        while opened and rows[opened[-1]]["depth"] >= depth:
            rows[opened.pop()]["end"] = len(rows)
        a = span.get("attributes") or {}
        start, end = _bounds(span)
        rows.append({
            "span_id": span_id, "name": span["name"],
            "kind": a.get(attrs.OPENINFERENCE_KIND) or "", "start_ms": round((start - t0) * 1000, 3),
            "ms": round((end - start) * 1000, 3), "depth": depth,
            "status": (span.get("status") or {}).get("status_code", "UNSET"), "detail": _detail(span["name"], a),
            "node": a.get(attrs.SQLCHORUS_NODE), "role": a.get(attrs.SQLCHORUS_ROLE),
            "tokens_in": a.get(attrs.GEN_AI_USAGE_INPUT),
            "tokens_out": a.get(attrs.GEN_AI_USAGE_OUTPUT), "cost_usd": a.get(attrs.SQLCHORUS_COST_USD),
            "chat": a.get(attrs.GEN_AI_OPERATION) == "chat", "end": 0,
        })
        if attrs.SQLCHORUS_CALL_ID in a:  # a model call's id in the run's call log
            rows[-1]["call_id"] = a[attrs.SQLCHORUS_CALL_ID]
        opened.append(len(rows) - 1)
        for kid in reversed(children.get(span_id, [])):
            if depth < 256:
                stack.append((kid, depth + 1, None))
    while opened:
        rows[opened.pop()]["end"] = len(rows)
    # Spans in a cycle of parents (no root reaches them) still show, at the top level.
    for span in sorted((s for s in spans if s["context"]["span_id"] not in seen), key=lambda s: s["start_time"]):
        extra = waterfall([{**span, "parent_id": None}])[0]
        extra["end"] = len(rows) + 1
        rows.append(extra)
    return rows


def match_calls(rows: list[dict[str, Any]], calls: list[dict[str, Any]]) -> None:
    """Give each model call row of a waterfall ``call``: the index of its kept call (prompt and
    answer) in ``calls``. A row whose span names its call (``call_id``, the usage record's
    ``call``) gets that call; the rest (traces written before spans named their call) are
    matched in order within each node and role, among the calls no span named."""
    by_id = {str(c["usage"]["call"]): i for i, c in enumerate(calls)
             if isinstance(c.get("usage"), dict) and c["usage"].get("call")}
    chats = [r for r in rows if r.get("chat")]
    taken: set[int] = set()
    rest = []
    for row in chats:
        found = by_id.get(str(row.get("call_id") or ""))
        if found is not None:
            row["call"] = found
            taken.add(found)
        elif not row.get("call_id"):
            rest.append(row)
    if not rest:
        return
    queues: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, call in enumerate(calls):
        if i not in taken:
            queues[(str(call.get("node") or ""), str(call.get("role") or ""))].append(i)
    rest.sort(key=lambda r: r["start_ms"] + r["ms"])  # a call is kept as it ends
    for row in rest:
        queue = queues.get((str(row.get("node") or ""), str(row.get("role") or "")))
        if queue:
            row["call"] = queue.pop(0)


def call_of(span: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The kept call (prompt and answer) a model call span names by its ``sqlchorus.call_id``."""
    wanted = (span.get("attributes") or {}).get(attrs.SQLCHORUS_CALL_ID)
    if not wanted:
        return None
    return next((c for c in calls if isinstance(c.get("usage"), dict) and c["usage"].get("call") == wanted), None)


def span_info(spans: list[dict[str, Any]], span_id: str) -> dict[str, Any] | None:
    """One span as its details show it: name, status, attributes and events."""
    span = next((s for s in spans if s["context"]["span_id"] == span_id), None)
    if span is None:
        return None
    return {"span_id": span_id, "name": span["name"], "status": span.get("status") or {},
            "start_time": span.get("start_time"), "end_time": span.get("end_time"),
            "trace_id": (span.get("context") or {}).get("trace_id"), "parent_id": span.get("parent_id"),
            "attributes": span.get("attributes") or {}, "events": span.get("events") or []}


def _detail(name: str, a: dict[str, Any]) -> str:
    if a.get(attrs.GEN_AI_OPERATION) == "chat":
        return f"{a.get(attrs.SQLCHORUS_ROLE, '?')}: {a.get(attrs.GEN_AI_USAGE_INPUT, 0)} in / " \
               f"{a.get(attrs.GEN_AI_USAGE_OUTPUT, 0)} out" + (f" — {a[attrs.SQLCHORUS_ERROR]}" if attrs.SQLCHORUS_ERROR in a else "")
    if name == "sql":
        text = " ".join(str(a.get(attrs.DB_QUERY_TEXT, "")).split())
        return text + (f" — {a['sql.error']}" if "sql.error" in a else f" — {a.get('sql.rows', '?')} rows")
    return str(a.get(attrs.SQLCHORUS_ERROR) or "")


def path_taken(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """Visits per node and per edge, with the reasons the routes gave."""
    visits: Counter = Counter()
    edges: dict[tuple[str, str], dict[str, Any]] = {}
    for span in sorted(spans, key=lambda s: s["start_time"]):
        if not span["name"].startswith(attrs.NODE_SPAN_PREFIX):
            continue
        node = span["name"][len(attrs.NODE_SPAN_PREFIX):]
        visits[node] += 1
        for event in span.get("events") or []:
            if event.get("name") != attrs.ROUTE_EVENT:
                continue
            ea = event.get("attributes") or {}
            key = (str(ea.get("from", node)), str(ea.get("to", "")))
            entry = edges.setdefault(key, {"from": key[0], "to": key[1], "count": 0, "reasons": []})
            entry["count"] += 1
            reason = str(ea.get("reason", ""))
            if reason and reason not in entry["reasons"] and len(entry["reasons"]) < 20:
                entry["reasons"].append(reason)
    return {"visits": dict(visits), "edges": list(edges.values())}


def layout(nodes: list[str], edges: list[tuple[str, str]]) -> dict[str, Any]:
    """Layers for drawing a graph top to bottom: each node one below the longest path to it,
    back edges (loops) left out of the layering."""
    order = {n: i for i, n in enumerate(nodes)}
    succ: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        succ[a].append(b)
    back: set[tuple[str, str]] = set()
    state: dict[str, int] = {}

    def visit(n: str, depth: int = 0) -> None:
        state[n] = 1
        for m in succ[n]:
            if state.get(m) == 1:
                back.add((n, m))
            elif m not in state and depth < 1000:
                visit(m, depth + 1)
        state[n] = 2

    for n in nodes:
        if n not in state:
            visit(n)
    layer = {n: 0 for n in nodes}
    for _ in range(len(nodes)):  # longest path, bounded by the number of nodes
        changed = False
        for a, b in edges:
            if (a, b) not in back and a in layer and b in layer and layer[b] < layer[a] + 1:
                layer[b] = layer[a] + 1
                changed = True
        if not changed:
            break
    rows: dict[int, list[str]] = defaultdict(list)
    for n in sorted(nodes, key=lambda n: order[n]):
        rows[layer[n]].append(n)
    return {"nodes": [{"id": n, "layer": layer[n], "index": rows[layer[n]].index(n), "width": len(rows[layer[n]])}
                      for n in nodes],
            "edges": [{"from": a, "to": b, "back": (a, b) in back} for a, b in edges]}
