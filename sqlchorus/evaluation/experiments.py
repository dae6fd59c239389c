"""A finished evaluation as an experiment in Arize Phoenix or Langfuse, so that two evaluations of
the same questions compare there question by question.

Each tool has a model of its own for this, and an evaluation maps onto it the same way:

* the benchmark's questions become a **dataset** (Phoenix: a dataset of examples; Langfuse: a
  dataset of items), one entry per question: input ``question`` (``evidence``, ``db_id``),
  expected output the gold SQL, metadata the question's number, database and difficulty. Every
  evaluation of the same benchmark (on the same engine) lands on the same dataset, each question
  on the same entry: an entry's id is the question's number, so an export updates, never doubles;
* the evaluation becomes an **experiment** (Phoenix) or a **dataset run** (Langfuse) named after
  its folder, with the models and settings of ``run.json`` as metadata, and one run per question:
  the predicted SQL, the verdict and the cost; the verdict also as an evaluation named ``correct``
  (1 or 0, its label the verdict as ``sqlchorus eval`` says it), which both tools average into the
  evaluation's EX, and ``soft_f1`` where BIRD's Soft-F1 was scored. A question whose run raised is
  a failed run; a question whose database was missing is a failed run without a ``correct`` score
  (not scored, as in the summary).

The input is the run folder alone (``records.jsonl`` and ``run.json``), so a finished evaluation
can be recorded at any time, from any machine that reaches the tool; its traces (``traces/``) give
each run its trace id and its times, so a run links to its trace where the spans were sent to the
same tool. Recording the same evaluation again is recognised (a fingerprint of its answers in the
experiment's metadata) and skipped.

Both tools are reached over their HTTP APIs with the standard library (no client package):

* **Phoenix** (its REST API, ``/v1``, as of Phoenix 20): ``POST /v1/datasets/upload?sync=true``
  (action ``append``, with ``example_ids``), ``GET /v1/datasets/{id}/examples``,
  ``POST /v1/datasets/{id}/experiments``, ``POST /v1/experiments/{id}/runs``,
  ``POST /v1/experiment_evaluations``. Where: ``PHOENIX_ENDPOINT``, else
  ``PHOENIX_COLLECTOR_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` (without ``/v1/traces``), else
  ``PHOENIX_HOST`` and ``PHOENIX_PORT``, else ``http://127.0.0.1:6006``: the order Phoenix's own
  client reads them in. ``PHOENIX_API_KEY`` (a bearer token) and ``PHOENIX_CLIENT_HEADERS`` go
  with every request.
* **Langfuse** (its public API): ``POST /api/public/v2/datasets`` (an upsert by name),
  ``POST /api/public/dataset-items`` (upserted by id), ``POST /api/public/ingestion`` (each run's
  trace, with the evaluation's name as its session, and its scores),
  ``POST /api/public/dataset-run-items``, and ``GET /api/public/datasets/{name}/runs/{run}`` to find
  an earlier export. Basic auth with ``LANGFUSE_PUBLIC_KEY`` and ``LANGFUSE_SECRET_KEY``; where:
  ``LANGFUSE_BASE_URL`` or ``LANGFUSE_HOST``, else Langfuse Cloud (``https://cloud.langfuse.com``),
  as Langfuse's SDKs do.

Failures are one line each (:class:`ExperimentError` and its kinds): a tool that does not answer
or fails (exit 3, the evaluation itself kept), credentials refused or missing, or a folder that
is not a finished evaluation (exit 2).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlchorus.evaluation.progress import ExProgress
from sqlchorus.evaluation.runs import RECORDS_FILE, RUN_FILE, EvalError, read_records
from sqlchorus.tools.errors import EXIT_BAD_INPUT, SqlchorusError

__all__ = [
    "TOOLS",
    "EXIT_TOOL_UNAVAILABLE",
    "Evaluation",
    "ExperimentError",
    "ExperimentAuthError",
    "ExperimentConfigError",
    "ExperimentResult",
    "export_experiment",
    "export_experiments",
    "export_langfuse",
    "export_phoenix",
    "langfuse_dataset",
    "langfuse_events",
    "langfuse_item",
    "langfuse_run_item",
    "langfuse_settings",
    "phoenix_dataset_upload",
    "phoenix_evaluations",
    "phoenix_experiment",
    "phoenix_run",
    "phoenix_settings",
    "read_evaluation",
]

TOOLS = ("phoenix", "langfuse")
"""The tools an evaluation can be recorded in (``sqlchorus eval --experiment``)."""

EXIT_TOOL_UNAVAILABLE = 3
"""Exit code when the tool cannot take the experiment now (it does not answer, or fails): the
evaluation is kept, and the same command records it later."""

TIMEOUT_S = 30.0
"""Time one request to a tool may take."""
RETRIES = 2
"""Requests answered 429 or 5xx are tried again this many times (after 1 s, then 2 s)."""
LANGFUSE_BATCH = 25
"""Questions whose traces and scores go in one ``/api/public/ingestion`` request."""
PHOENIX_DEFAULT = "http://127.0.0.1:6006"
LANGFUSE_DEFAULT = "https://cloud.langfuse.com"
CORRECT = "correct"
"""The name of the evaluation (Phoenix) or score (Langfuse) that carries each question's verdict."""


class ExperimentError(SqlchorusError, RuntimeError):
    """The tool could not take the experiment (it does not answer, or answered with an error);
    the message says which tool, where, and why, in one line."""

    kind = "experiment_unavailable"
    exit_code = EXIT_TOOL_UNAVAILABLE
    http_status = 502


class ExperimentAuthError(ExperimentError):
    """The tool refused the credentials, or none were given where they are needed."""

    kind = "experiment_auth"
    exit_code = EXIT_BAD_INPUT
    http_status = 401


class ExperimentConfigError(ExperimentError, ValueError):
    """An unknown tool, or an address that is not a URL."""

    kind = "experiment_config"
    exit_code = EXIT_BAD_INPUT
    http_status = 400


# -- the evaluation -----------------------------------------------------------------------------


@dataclass
class Evaluation:
    """A finished evaluation, as its run folder holds it.

    Attributes:
        folder: the run folder.
        name: its name (the folder's): the experiment's or dataset run's name, and the session of
            its runs' traces.
        meta: ``run.json`` (empty for a folder of scored predictions without one).
        records: one record per question, in question order.
        summary: ``summary.json`` where it is there.
        dataset: the name of the dataset in the tool: the benchmark's (``spider-dev``), with the
            engine when it is not SQLite (``spider-dev-duckdb``), whose gold SQL is the engine's.
        fingerprint: a digest of the answers (each question's run, SQL and verdict): the same
            evaluation exported twice has the same one.
    """

    folder: Path
    name: str
    meta: dict[str, Any]
    records: list[dict[str, Any]]
    summary: dict[str, Any] = field(default_factory=dict)
    dataset: str = ""
    fingerprint: str = ""
    _by_number: bool | None = field(default=None, repr=False)

    @property
    def ex(self) -> float | None:
        scored = [r for r in self.records if r.get("status") != "missing_db"]
        if not scored:
            return None
        return round(100.0 * sum(1 for r in scored if r.get("correct")) / len(scored), 2)


def read_evaluation(folder: str | os.PathLike[str]) -> Evaluation:
    """The finished evaluation in run folder ``folder``.

    Raises:
        EvalError: no such folder, no records, or an evaluation that has not finished (fewer
            records than ``run.json`` names questions): resume it first.
    """
    path = Path(folder)
    if not (path / RECORDS_FILE).is_file():
        raise EvalError(f"{path} is not an evaluation's run folder: it holds no {RECORDS_FILE}.")
    meta = _json_file(path / RUN_FILE)
    found = read_records(path / RECORDS_FILE)
    total = meta.get("n_questions")
    if isinstance(total, int):
        # records.jsonl also keeps questions past a later --limit, for a run to come: not this one's.
        found = {i: r for i, r in found.items() if i < total}
        if len(found) < total:
            raise EvalError(f"{path} holds {len(found)} of its {total} questions: the evaluation has not finished. "
                            f"Run the same sqlchorus eval command with --out {path} to finish it, then record it.")
    records = [r for _, r in sorted(found.items())]
    if not records:
        raise EvalError(f"{path / RECORDS_FILE} holds no records: there is nothing to record.")
    name = path.resolve().name
    summary = _json_file(path / "summary.json")
    for key in ("dataset", "benchmark", "engine"):  # a folder of scored predictions has no run.json
        if meta.get(key) is None and summary.get(key) is not None:
            meta[key] = summary[key]
    dataset = str(meta.get("dataset") or "sqlchorus-eval")
    if meta.get("engine", "sqlite") != "sqlite":
        dataset = f"{dataset}-{meta['engine']}"
    digest = hashlib.sha256(json.dumps(
        [[r.get("question_id"), r.get("run_id"), r.get("prediction"), r.get("verdict")] for r in records],
        default=str).encode()).hexdigest()[:16]
    return Evaluation(folder=path, name=name, meta=meta, records=records, summary=summary, dataset=dataset,
                      fingerprint=digest)


def _json_file(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _question_key(ev: Evaluation) -> Callable[[dict[str, Any]], str]:
    """The stable id of a record's question in the tool: its number, or its position where the
    numbers are not unique (a hand-made dataset file)."""
    if ev._by_number is None:
        ids = [str(r.get("question_id")) for r in ev.records]
        ev._by_number = len(set(ids)) == len(ids) and all(r.get("question_id") is not None for r in ev.records)
    if ev._by_number:
        return lambda r: f"question-{r.get('question_id')}"
    return lambda r: f"index-{r.get('index')}"


def _trace_of(record: dict[str, Any]) -> dict[str, Any]:
    """The trace id and times of a record's run, from its trace file's root span: ``{}`` where
    there is no trace file (``--no-trace``, a prediction file, a folder moved without it)."""
    path = record.get("trace_path")
    if not path or not Path(path).is_file():
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError:
        return {}
    spans = []
    for line in reversed(lines):  # the run's span ends last: usually the last line is the one
        try:
            last = json.loads(line)
        except ValueError:
            continue
        if isinstance(last, dict) and last.get("parent_id") is None:
            lines = [line]
        break
    for line in lines:
        try:
            span = json.loads(line)
        except ValueError:
            continue
        if isinstance(span, dict):
            spans.append(span)
    ids = {(s.get("context") or {}).get("span_id") for s in spans}
    # The run's span: the one without a parent in the file (named "run", or for what started it).
    roots = [s for s in spans if s.get("parent_id") is None or s.get("parent_id") not in ids]
    if not roots:
        return {}
    root = roots[-1]  # it ends last
    trace_id = str((root.get("context") or {}).get("trace_id") or "")
    return {"trace_id": trace_id.removeprefix("0x") or None, "start": root.get("start_time"),
            "end": root.get("end_time")}


def _times(ev: Evaluation, record: dict[str, Any], trace: dict[str, Any]) -> tuple[str, str]:
    """When a question's run started and ended: its trace's, else the evaluation's start and the
    run's seconds."""
    if trace.get("start") and trace.get("end"):
        return _iso(trace["start"]), _iso(trace["end"])
    try:
        start = datetime.fromisoformat(str(ev.meta.get("started")))
    except ValueError:
        start = datetime.now(timezone.utc)
    if start.tzinfo is None:
        start = start.replace(tzinfo=timezone.utc)
    end = start + timedelta(seconds=float(record.get("seconds") or 0.0))
    return start.isoformat(), end.isoformat()


def _iso(text: str) -> str:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).isoformat()


def _label(record: dict[str, Any]) -> str:
    """A verdict as ``sqlchorus eval`` says it: ``correct``, ``wrong (pred_error)``, ``missing_db``."""
    verdict = str(record.get("verdict") or "")
    if record.get("status") == "missing_db" or verdict == "missing_db":
        return "missing_db"
    if record.get("correct"):
        return "correct"
    return "wrong" if verdict in ("", "wrong", "incorrect") else f"wrong ({verdict})"


def _failure(record: dict[str, Any]) -> str | None:
    """Why a question has no run to show: its database was missing, or its run raised."""
    if record.get("status") == "missing_db":
        return "missing_db: the database was missing when the evaluation ran; not scored"
    if record.get("status") == "error":
        return str(record.get("error") or "the run raised")
    return None


def _inputs(record: dict[str, Any]) -> dict[str, Any]:
    shown = {"question": record.get("question") or ""}
    if record.get("evidence"):
        shown["evidence"] = record["evidence"]
    shown["db_id"] = record.get("db_id")
    return shown


def _example_metadata(ev: Evaluation, record: dict[str, Any]) -> dict[str, Any]:
    """What a dataset entry says besides its input and gold: the same for every evaluation of
    the question, so that exporting another evaluation leaves the entry as it is. ``key`` is the
    entry's id as sqlchorus gives it (``question-N``)."""
    return {"question_id": record.get("question_id"), "db_id": record.get("db_id"),
            "difficulty": record.get("difficulty"), "benchmark": ev.meta.get("benchmark"),
            "key": _question_key(ev)(record)}


def _output(record: dict[str, Any]) -> dict[str, Any]:
    """A question's run as the tool shows it: the SQL first, then how it was judged and what it cost."""
    out = {
        "sql": record.get("prediction"),
        "verdict": _label(record),
        "correct": bool(record.get("correct")),
        "chosen_generator": record.get("chosen_generator"),
        "candidates": len(record.get("candidates") or []),
        "any_candidate_correct": record.get("any_candidate_correct"),
        "model_calls": record.get("model_calls"),
        "cost_usd": record.get("cost_usd"),
        "seconds": record.get("seconds"),
        "run_id": record.get("run_id"),
    }
    for key in ("soft_f1", "ves_reward"):
        if key in record:
            out[key] = record[key]
    return out


def _experiment_metadata(ev: Evaluation) -> dict[str, Any]:
    settings = ev.meta.get("settings") or {}
    return {
        "sqlchorus_eval": ev.name,
        "sqlchorus_fingerprint": ev.fingerprint,
        "folder": str(ev.folder.resolve()),
        "dataset": ev.meta.get("dataset") or ev.dataset,
        "benchmark": ev.meta.get("benchmark"),
        "engine": ev.meta.get("engine", "sqlite"),
        "n_questions": len(ev.records),
        "ex": ev.ex,
        "started": ev.meta.get("started"),
        "model": settings.get("model"),
        "models": settings.get("models"),
        "generators": settings.get("generators"),
        "preset": settings.get("preset"),
        "predictions": ev.meta.get("predictions"),
    }


def _description(ev: Evaluation) -> str:
    ex = "n/a" if ev.ex is None else f"{ev.ex:g}%"
    model = (ev.meta.get("settings") or {}).get("model")
    of = ev.meta.get("dataset") or ev.dataset
    return f"sqlchorus eval {ev.name}: EX {ex} on {len(ev.records)} question(s) of {of}" + (
        f", model {model}" if model else "")


# -- Phoenix: payloads --------------------------------------------------------------------------


def phoenix_dataset_upload(ev: Evaluation) -> dict[str, Any]:
    """The body of ``POST /v1/datasets/upload``: the evaluation's questions appended to the
    dataset (created if needed), each question on its own example id."""
    key = _question_key(ev)
    return {
        "action": "append",
        "name": ev.dataset,
        "description": f"Questions of {ev.meta.get('dataset') or ev.dataset} ({ev.meta.get('benchmark') or 'sqlchorus'}"
                       " semantics), with their gold SQL, from sqlchorus eval.",
        "inputs": [_inputs(r) for r in ev.records],
        "outputs": [{"sql": r.get("gold_sql")} for r in ev.records],
        "metadata": [_example_metadata(ev, r) for r in ev.records],
        "example_ids": [key(r) for r in ev.records],
    }


def phoenix_experiment(ev: Evaluation, version_id: str | None = None) -> dict[str, Any]:
    """The body of ``POST /v1/datasets/{id}/experiments``."""
    body: dict[str, Any] = {"name": ev.name, "description": _description(ev), "metadata": _experiment_metadata(ev),
                            "repetitions": 1}
    if version_id:
        body["version_id"] = version_id
    return body


def phoenix_run(ev: Evaluation, record: dict[str, Any], example_id: str,
                trace: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body of ``POST /v1/experiments/{id}/runs`` for one question."""
    trace = _trace_of(record) if trace is None else trace
    start, end = _times(ev, record, trace)
    body: dict[str, Any] = {"dataset_example_id": example_id, "output": _output(record), "repetition_number": 1,
                            "start_time": start, "end_time": end}
    if trace.get("trace_id"):
        body["trace_id"] = trace["trace_id"]
    failure = _failure(record)
    if failure:
        body["error"] = failure
    return body


def phoenix_evaluations(ev: Evaluation, record: dict[str, Any], run_id: str, when: str) -> list[dict[str, Any]]:
    """The bodies of ``POST /v1/experiment_evaluations`` for one question's run: ``correct`` (1 or
    0, labelled with the verdict; a label alone for a question not scored) and ``soft_f1`` where
    scored."""
    label = _label(record)
    common = {"experiment_run_id": run_id, "annotator_kind": "CODE", "start_time": when, "end_time": when,
              "metadata": {"sqlchorus_eval": ev.name}}
    result: dict[str, Any] = {"label": label}
    if label != "missing_db":
        result["score"] = 1.0 if record.get("correct") else 0.0
    if record.get("verdict_error"):
        result["explanation"] = str(record["verdict_error"])[:2000]
    out = [{**common, "name": CORRECT, "result": result}]
    if isinstance(record.get("soft_f1"), (int, float)):
        out.append({**common, "name": "soft_f1", "result": {"score": float(record["soft_f1"])}})
    return out


# -- Langfuse: payloads -------------------------------------------------------------------------


def _langfuse_item_id(ev: Evaluation, record: dict[str, Any], key: Callable[[dict[str, Any]], str]) -> str:
    # Item ids are unique in a Langfuse project, across its datasets: the dataset's name goes in.
    return f"sqlchorus-{re.sub(r'[^A-Za-z0-9_.-]+', '_', ev.dataset)}-{key(record)}"


def _langfuse_trace_id(ev: Evaluation, record: dict[str, Any], trace: dict[str, Any]) -> str:
    """The run's own trace id (so its trace, where the spans were sent to Langfuse over OTLP, is
    the one the run item names), else one made from the evaluation and the question."""
    if trace.get("trace_id"):
        return str(trace["trace_id"])
    name = f"sqlchorus-eval:{ev.folder.resolve()}:{ev.fingerprint}:{record.get('index')}"
    return uuid.uuid5(uuid.NAMESPACE_URL, name).hex


def langfuse_dataset(ev: Evaluation) -> dict[str, Any]:
    """The body of ``POST /api/public/v2/datasets`` (an upsert by name)."""
    return {"name": ev.dataset,
            "description": f"Questions of {ev.meta.get('dataset') or ev.dataset} with their gold SQL, "
                           "from sqlchorus eval.",
            "metadata": {"benchmark": ev.meta.get("benchmark"), "engine": ev.meta.get("engine", "sqlite"),
                         "source": "sqlchorus"}}


def langfuse_item(ev: Evaluation, record: dict[str, Any]) -> dict[str, Any]:
    """The body of ``POST /api/public/dataset-items`` for one question (upserted on its id)."""
    return {"id": _langfuse_item_id(ev, record, _question_key(ev)), "datasetName": ev.dataset,
            "input": _inputs(record), "expectedOutput": {"sql": record.get("gold_sql")},
            "metadata": _example_metadata(ev, record)}


def langfuse_events(ev: Evaluation, record: dict[str, Any],
                    trace: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The ``/api/public/ingestion`` events of one question: its trace (the evaluation's name as
    its session, the gold SQL and the verdict in its metadata) and its scores."""
    trace = _trace_of(record) if trace is None else trace
    trace_id = _langfuse_trace_id(ev, record, trace)
    start, _ = _times(ev, record, trace)
    now = datetime.now(timezone.utc).isoformat()
    label = _label(record)
    body = {
        "id": trace_id, "timestamp": start, "name": f"sqlchorus eval {ev.name}: question {record.get('question_id')}",
        "sessionId": ev.name, "input": _inputs(record), "output": _output(record),
        "metadata": {"sqlchorus_eval": ev.name, "question_id": record.get("question_id"), "db_id": record.get("db_id"),
                     "gold_sql": record.get("gold_sql"), "verdict": label, "run_id": record.get("run_id"),
                     **({"error": _failure(record)} if _failure(record) else {})},
        "tags": ["sqlchorus-eval", ev.dataset],
    }
    events = [{"id": str(uuid.uuid4()), "type": "trace-create", "timestamp": now, "body": body}]
    scores: list[tuple[str, float, str | None]] = []
    if label != "missing_db":
        scores.append((CORRECT, 1.0 if record.get("correct") else 0.0, label))
    if isinstance(record.get("soft_f1"), (int, float)):
        scores.append(("soft_f1", float(record["soft_f1"]), None))
    for name, value, comment in scores:
        score = {"id": f"{trace_id}-{name}", "traceId": trace_id, "name": name, "value": value, "dataType": "NUMERIC"}
        if comment:
            score["comment"] = comment
        events.append({"id": str(uuid.uuid4()), "type": "score-create", "timestamp": now, "body": score})
    return events


def langfuse_run_item(ev: Evaluation, record: dict[str, Any], run_name: str,
                      trace: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body of ``POST /api/public/dataset-run-items`` for one question: its item in run
    ``run_name`` (the evaluation), linked to its trace."""
    trace = _trace_of(record) if trace is None else trace
    return {"runName": run_name, "runDescription": _description(ev), "metadata": _experiment_metadata(ev),
            "datasetItemId": _langfuse_item_id(ev, record, _question_key(ev)),
            "traceId": _langfuse_trace_id(ev, record, trace)}


# -- where the tools are ------------------------------------------------------------------------


def _parse_headers(text: str | None) -> dict[str, str]:
    """``k=v,k2=v2`` with URL-encoded values, as ``PHOENIX_CLIENT_HEADERS`` and the OTLP variables
    write headers."""
    headers = {}
    for part in (text or "").split(","):
        name, sep, value = part.partition("=")
        if sep and name.strip():
            headers[urllib.parse.unquote(name.strip())] = urllib.parse.unquote(value.strip())
    return headers


def phoenix_settings(environ: Mapping[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """Where Phoenix is and the headers it takes, from the environment (see the module's doc)."""
    env = os.environ if environ is None else environ
    base = None
    for name in ("PHOENIX_ENDPOINT", "PHOENIX_COLLECTOR_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "PHOENIX_BASE_URL"):
        value = (env.get(name) or "").strip()
        if value:
            base = re.sub(r"/v1/traces/?$", "", value)
            break
    if base is None and (env.get("PHOENIX_HOST") or "").strip():
        host = env["PHOENIX_HOST"].strip()
        if "://" in host:
            base = host
        else:
            host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
            base = f"http://{host}" if ":" in host else f"http://{host}:{(env.get('PHOENIX_PORT') or '6006').strip()}"
    headers = _parse_headers(env.get("PHOENIX_CLIENT_HEADERS"))
    key = (env.get("PHOENIX_API_KEY") or "").strip()
    if key and not any(h.lower() == "authorization" for h in headers):
        headers["Authorization"] = f"Bearer {key}"
    return (base or PHOENIX_DEFAULT).rstrip("/"), headers


def langfuse_settings(environ: Mapping[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """Where Langfuse is and its Basic authorization header, from the environment.

    Raises:
        ExperimentAuthError: the keys are not set.
    """
    env = os.environ if environ is None else environ
    base = (env.get("LANGFUSE_BASE_URL") or env.get("LANGFUSE_HOST") or "").strip() or LANGFUSE_DEFAULT
    public, secret = (env.get("LANGFUSE_PUBLIC_KEY") or "").strip(), (env.get("LANGFUSE_SECRET_KEY") or "").strip()
    if not public or not secret:
        raise ExperimentAuthError(
            "Recording in Langfuse needs a project's API keys: set LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY "
            f"(and LANGFUSE_HOST for a Langfuse other than {LANGFUSE_DEFAULT}).")
    token = base64.b64encode(f"{public}:{secret}".encode()).decode()
    return base.rstrip("/"), {"Authorization": f"Basic {token}"}


# -- HTTP ---------------------------------------------------------------------------------------


class _Api:
    """JSON over HTTP to one tool, each failure turned into one line that names the tool."""

    def __init__(self, tool: str, base: str, headers: dict[str, str], where: str, auth_hint: str):
        parsed = urllib.parse.urlsplit(base)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ExperimentConfigError(f"{tool}'s address {base!r} is not an http(s) URL: {where}.")
        self.tool, self.base, self.headers, self.where, self.auth_hint = tool, base, headers, where, auth_hint
        # The tool is named by the user; a proxy of the environment is not asked to reach loopback.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler(
            {} if parsed.hostname in ("127.0.0.1", "localhost", "::1") else None))

    def call(self, method: str, path: str, body: Any = None, params: Mapping[str, Any] | None = None,
             missing_ok: bool = False) -> Any:
        url = self.base + path + (("?" + urllib.parse.urlencode(params, doseq=True)) if params else "")
        data = None if body is None else json.dumps(body, default=str).encode()
        headers = {"Accept": "application/json", "User-Agent": "sqlchorus", **self.headers}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in range(RETRIES + 1):
            request = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with self._opener.open(request, timeout=TIMEOUT_S) as answer:
                    text = answer.read().decode("utf-8", errors="replace")
                return json.loads(text) if text.strip() else None
            except urllib.error.HTTPError as e:
                detail = _detail(e)
                if e.code == 404 and missing_ok:
                    return None
                if e.code in (401, 403):
                    raise ExperimentAuthError(f"{self.tool} at {self.base} refused the request "
                                              f"(HTTP {e.code}{detail}): {self.auth_hint}.") from None
                if (e.code == 429 or e.code >= 500) and attempt < RETRIES:
                    time.sleep(2.0 ** attempt)
                    continue
                raise ExperimentError(f"{self.tool} at {self.base} answered {method} {path} "
                                      f"with HTTP {e.code}{detail}.") from None
            except (urllib.error.URLError, OSError) as e:
                reason = _reason(e)
                raise ExperimentError(f"{self.tool} does not answer at {self.base} ({reason}): start it, "
                                      f"or name where it is with {self.where}.") from None
            except ValueError:
                raise ExperimentError(f"{self.tool} at {self.base} answered {method} {path} with something that is not "
                                      f"JSON: is {self.base} {self.tool}?") from None
        raise AssertionError("unreachable")


def _detail(error: urllib.error.HTTPError) -> str:
    """A few words of an error answer: its reason and the start of its body."""
    try:
        text = error.read().decode("utf-8", errors="replace").strip()
    except OSError:
        text = ""
    try:
        parsed = json.loads(text)
        if isinstance(parsed, dict):
            text = str(parsed.get("detail") or parsed.get("message") or parsed.get("error") or text)
    except ValueError:
        pass
    text = " ".join(text.split())
    reason = f" {error.reason}" if error.reason else ""
    return reason + (f": {text[:300]}" if text else "")


def _reason(error: BaseException) -> str:
    inner = getattr(error, "reason", error)
    if isinstance(inner, socket.timeout) or isinstance(error, TimeoutError):
        return f"no answer in {TIMEOUT_S:g} s"
    if isinstance(inner, OSError) and inner.strerror:
        return inner.strerror
    return str(inner) or type(inner).__name__


# -- exporting ----------------------------------------------------------------------------------


@dataclass
class ExperimentResult:
    """What an export recorded, where.

    Attributes:
        tool: ``phoenix`` or ``langfuse``.
        dataset: the dataset's name in the tool; ``dataset_id`` its id.
        experiment: the experiment's (Phoenix) or dataset run's (Langfuse) name; ``experiment_id``
            its id where the tool gives one.
        url: the page that shows it (Phoenix: the dataset's comparison view of the experiment).
        n_runs: questions recorded; ``n_correct`` of them correct.
        already: the same evaluation was recorded before: nothing was sent again.
    """

    tool: str
    dataset: str
    dataset_id: str | None
    experiment: str
    experiment_id: str | None
    url: str | None
    n_runs: int
    n_correct: int
    already: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        verb = "already recorded" if self.already else "recorded"
        what = "experiment" if self.tool == "phoenix" else "dataset run"
        return (f"{self.tool}: {verb} as {what} {self.experiment!r} on dataset {self.dataset!r} "
                f"({self.n_runs} question(s), {self.n_correct} correct)" + (f": {self.url}" if self.url else ""))


class _Bar:
    """The upload's progress on stderr (the evaluation's own bar: questions sent, EX so far)."""

    def __init__(self, description: str, total: int, shown: bool):
        self._bar = ExProgress(description, total) if shown else None

    def advance(self, record: dict[str, Any]) -> None:
        if self._bar is not None:
            self._bar.advance(record.get("status") != "missing_db", bool(record.get("correct")))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def export_phoenix(folder: str | os.PathLike[str] | Evaluation, *, base_url: str | None = None,
                   headers: Mapping[str, str] | None = None, progress: bool = False,
                   log: Callable[[str], None] | None = None) -> ExperimentResult:
    """Record the evaluation in ``folder`` in Arize Phoenix: its questions as a dataset, itself as
    an experiment on it, each question a run with its ``correct`` evaluation.

    Args:
        folder: the evaluation's run folder (or one :func:`read_evaluation` read).
        base_url, headers: where Phoenix is and what goes with each request; by default from the
            environment (:func:`phoenix_settings`).
        progress: a progress bar on stderr while the runs are sent.
        log: told one-line notes.

    Raises:
        EvalError: not a finished evaluation.
        ExperimentError: Phoenix does not answer or fails (exit 3); ExperimentAuthError: it
            refused the request (exit 2).
    """
    ev = folder if isinstance(folder, Evaluation) else read_evaluation(folder)
    say = log or (lambda message: None)
    env_base, env_headers = phoenix_settings()
    api = _Api("Phoenix", (base_url or env_base).rstrip("/"), dict(env_headers if headers is None else headers),
               "PHOENIX_ENDPOINT (or PHOENIX_COLLECTOR_ENDPOINT, or PHOENIX_HOST and PHOENIX_PORT)",
               "set PHOENIX_API_KEY to an API key of that Phoenix")
    upload = api.call("POST", "/v1/datasets/upload", phoenix_dataset_upload(ev), params={"sync": "true"})
    data = (upload or {}).get("data") or {}
    dataset_id, version_id = data.get("dataset_id"), data.get("version_id")
    if not dataset_id:
        raise ExperimentError(f"Phoenix at {api.base} took the dataset {ev.dataset!r} but did not say its id.")
    key = _question_key(ev)
    n_correct = sum(1 for r in ev.records if r.get("correct"))
    examples = _phoenix_examples(api, dataset_id, version_id)
    missing = [r.get("question_id") for r in ev.records if key(r) not in examples]
    if missing:
        raise ExperimentError(f"Phoenix at {api.base} did not keep question(s) {', '.join(map(str, missing[:5]))} of "
                              f"dataset {ev.dataset!r}.")
    earlier = next((e for e in _phoenix_paged(api, f"/v1/datasets/{_q(dataset_id)}/experiments")
                    if (e.get("metadata") or {}).get("sqlchorus_fingerprint") == ev.fingerprint), None)
    done: dict[str, str] = {}
    if earlier is not None:
        # This evaluation was recorded before: what is there is kept, and an export that stopped
        # half-way goes on where it stopped.
        experiment_id = earlier["id"]
        done = {run["dataset_example_id"]: run["id"]
                for run in _phoenix_paged(api, f"/v1/experiments/{_q(experiment_id)}/runs")}
        if all(examples[key(r)] in done for r in ev.records):
            return ExperimentResult("phoenix", ev.dataset, dataset_id, earlier.get("name") or ev.name, experiment_id,
                                    _phoenix_compare(api.base, dataset_id, experiment_id), len(ev.records), n_correct,
                                    already=True)
        say(f"phoenix: going on with experiment {ev.name!r}: {len(done)} of {len(ev.records)} question(s) are there")
    else:
        created = api.call("POST", f"/v1/datasets/{_q(dataset_id)}/experiments", phoenix_experiment(ev, version_id))
        experiment_id = ((created or {}).get("data") or {}).get("id")
        if not experiment_id:
            raise ExperimentError(f"Phoenix at {api.base} made no experiment on dataset {ev.dataset!r}.")
        say(f"phoenix: recording {len(ev.records)} question(s) as experiment {ev.name!r} on dataset {ev.dataset!r}")
    bar = _Bar(f"phoenix {ev.name}", len(ev.records), progress)
    try:
        for record in ev.records:
            example_id = examples[key(record)]
            trace = _trace_of(record)
            run_id = done.get(example_id)
            if run_id is None:
                made = api.call("POST", f"/v1/experiments/{_q(experiment_id)}/runs",
                                phoenix_run(ev, record, example_id, trace))
                run_id = ((made or {}).get("data") or {}).get("id")
            if run_id:  # evaluations are upserted by name: sent again for a run there before
                when = _times(ev, record, trace)[1]
                for evaluation in phoenix_evaluations(ev, record, run_id, when):
                    api.call("POST", "/v1/experiment_evaluations", evaluation)
            bar.advance(record)
    finally:
        bar.close()
    return ExperimentResult("phoenix", ev.dataset, dataset_id, ev.name, experiment_id,
                            _phoenix_compare(api.base, dataset_id, experiment_id), len(ev.records), n_correct)


def _q(value: str) -> str:
    return urllib.parse.quote(str(value), safe="")


def _phoenix_compare(base: str, dataset_id: str, experiment_id: str) -> str:
    return f"{base}/datasets/{_q(dataset_id)}/compare?experimentId={_q(experiment_id)}"


def _phoenix_paged(api: _Api, path: str) -> Iterator[dict[str, Any]]:
    """Every entry of one of Phoenix's paginated lists (experiments, runs)."""
    cursor = None
    while True:
        page = api.call("GET", path, params={"limit": 100, **({"cursor": cursor} if cursor else {})}) or {}
        yield from page.get("data") or []
        cursor = page.get("next_cursor")
        if not cursor:
            return


def _phoenix_examples(api: _Api, dataset_id: str, version_id: str | None) -> dict[str, str]:
    """The node ids (what runs name) of the dataset's examples, by question key (``question-N``):
    their ids as uploaded, or the key in their metadata."""
    answer = api.call("GET", f"/v1/datasets/{_q(dataset_id)}/examples",
                      params={"version_id": version_id} if version_id else None) or {}
    found = {}
    for example in (answer.get("data") or {}).get("examples") or []:
        node = example.get("node_id") or example.get("id")
        for key in (example.get("id"), (example.get("metadata") or {}).get("key")):
            if key:
                found.setdefault(str(key), node)
    return found


def export_langfuse(folder: str | os.PathLike[str] | Evaluation, *, base_url: str | None = None,
                    headers: Mapping[str, str] | None = None, progress: bool = False,
                    log: Callable[[str], None] | None = None) -> ExperimentResult:
    """Record the evaluation in ``folder`` in Langfuse: its questions as a dataset's items,
    itself as a dataset run, each question a run item linked to a trace (its session the
    evaluation's name, its scores ``correct`` and ``soft_f1``).

    Args:
        folder: the evaluation's run folder (or one :func:`read_evaluation` read).
        base_url, headers: where Langfuse is and its authorization; by default from the
            environment (:func:`langfuse_settings`).
        progress, log: as for :func:`export_phoenix`.

    Raises:
        EvalError: not a finished evaluation.
        ExperimentAuthError: no keys, or Langfuse refused them (exit 2).
        ExperimentError: Langfuse does not answer or fails (exit 3).
    """
    ev = folder if isinstance(folder, Evaluation) else read_evaluation(folder)
    say = log or (lambda message: None)
    if base_url is None or headers is None:
        env_base, env_headers = langfuse_settings()
        base_url, headers = base_url or env_base, env_headers if headers is None else headers
    api = _Api("Langfuse", base_url.rstrip("/"), dict(headers), "LANGFUSE_HOST (or LANGFUSE_BASE_URL)",
               "LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY must be a key pair of the project to record in")
    dataset = api.call("POST", "/api/public/v2/datasets", langfuse_dataset(ev)) or {}
    n_correct = sum(1 for r in ev.records if r.get("correct"))
    # The run is named after the evaluation; another evaluation run into the same folder (another
    # fingerprint) gets a run of its own, named with its fingerprint: Langfuse's run names are unique.
    done: set[str] = set()
    for run_name in (ev.name, f"{ev.name} {ev.fingerprint[:8]}"):
        earlier = api.call("GET", f"/api/public/datasets/{_q(ev.dataset)}/runs/{_q(run_name)}", missing_ok=True)
        if not earlier:
            break
        if (earlier.get("metadata") or {}).get("sqlchorus_fingerprint") == ev.fingerprint:
            done = {str(i.get("datasetItemId")) for i in earlier.get("datasetRunItems") or []}
            break
    else:
        raise ExperimentError(f"Langfuse at {api.base} already has dataset runs {ev.name!r} and {run_name!r} of other "
                              f"evaluations on dataset {ev.dataset!r}: rename the evaluation's folder to record it.")
    key = _question_key(ev)
    todo = [r for r in ev.records if _langfuse_item_id(ev, r, key) not in done]
    if not todo:
        return ExperimentResult("langfuse", ev.dataset, dataset.get("id"), run_name, earlier.get("id"),
                                _langfuse_page(api.base, dataset), len(ev.records), n_correct, already=True)
    if done:  # an export that stopped half-way goes on where it stopped
        say(f"langfuse: going on with dataset run {run_name!r}: {len(done)} of {len(ev.records)} question(s) are there")
    else:
        say(f"langfuse: recording {len(ev.records)} question(s) as dataset run {run_name!r} on dataset {ev.dataset!r}")
    bar = _Bar(f"langfuse {ev.name}", len(todo), progress)
    try:
        for chunk in _chunks(todo, LANGFUSE_BATCH):
            traces = [_trace_of(r) for r in chunk]
            for record in chunk:
                api.call("POST", "/api/public/dataset-items", langfuse_item(ev, record))
            events = [e for record, trace in zip(chunk, traces) for e in langfuse_events(ev, record, trace)]
            answer = api.call("POST", "/api/public/ingestion", {"batch": events}) or {}
            refused = answer.get("errors") or []
            if refused:
                first = refused[0]
                why = first.get("message") or first.get("error") or ""
                raise ExperimentError(f"Langfuse at {api.base} refused {len(refused)} of {len(events)} trace and score "
                                      f"event(s): HTTP {first.get('status')} {why}".rstrip() + ".")
            for record, trace in zip(chunk, traces):
                api.call("POST", "/api/public/dataset-run-items", langfuse_run_item(ev, record, run_name, trace))
                bar.advance(record)
    finally:
        bar.close()
    return ExperimentResult("langfuse", ev.dataset, dataset.get("id"), run_name, None, _langfuse_page(api.base, dataset),
                            len(ev.records), n_correct)


def _langfuse_page(base: str, dataset: Mapping[str, Any]) -> str | None:
    if dataset.get("projectId") and dataset.get("id"):
        return f"{base}/project/{_q(dataset['projectId'])}/datasets/{_q(dataset['id'])}"
    return None


def export_experiment(folder: str | os.PathLike[str] | Evaluation, tool: str, **options: Any) -> ExperimentResult:
    """Record the evaluation in ``folder`` in ``tool`` (``phoenix`` or ``langfuse``)."""
    if tool == "phoenix":
        return export_phoenix(folder, **options)
    if tool == "langfuse":
        return export_langfuse(folder, **options)
    raise ExperimentConfigError(f"Unknown experiment tool {tool!r}: name one of {', '.join(TOOLS)}.")


def export_experiments(folder: str | os.PathLike[str], tools: Sequence[str], *, progress: bool = False,
                       log: Callable[[str], None] | None = None
                       ) -> tuple[list[dict[str, Any]], ExperimentError | EvalError | None]:
    """Record the evaluation in ``folder`` in each of ``tools`` in turn, as ``sqlchorus eval
    --experiment`` does: what was recorded (:meth:`ExperimentResult.as_dict` each, with ``line``),
    and the error that stopped it (None when every tool took it). The error's message ends with
    the command that records the evaluation later."""
    done: list[dict[str, Any]] = []
    try:
        ev = read_evaluation(folder)
        for tool in dict.fromkeys(tools):
            result = export_experiment(ev, tool, progress=progress, log=log)
            done.append({**result.as_dict(), "line": result.line()})
    except (ExperimentError, EvalError) as e:
        again = " ".join(f"--experiment {t}" for t in dict.fromkeys(tools))
        e.args = (f"{e} The evaluation is kept in {folder}; record it later with: sqlchorus eval --out {folder} {again}",)
        return done, e
    return done, None
