"""The graph's state: what every node reads and the partial updates it returns.

Candidates, usage records and errors are written by parallel generator branches, so each has a
reducer. Everything in state is plain data (dicts, lists, strings, numbers), so checkpoints
serialise without an allow-list and a trace or checkpoint can be read without sqlchorus.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal

from typing_extensions import NotRequired, TypedDict

CandidateStatus = Literal["unchecked", "ok", "empty", "error"]


class Candidate(TypedDict):
    """One SQL candidate.

    ``status`` is set by ``check_candidates``: ``ok`` (ran, returned rows), ``empty`` (ran, no
    rows), ``error`` (did not run; ``error`` says why), or ``unchecked``. ``fingerprint`` is a
    digest of the result rows as a bag, so candidates with equal results share it. ``history``
    keeps each earlier SQL and its error, newest last. ``fix_attempts`` counts the fixer rounds
    that produced a new query; ``meta["fix"]`` keeps every round the fixer spent on it
    (:func:`sqlchorus.core.candidates.fix_record`).
    """

    id: str
    generator: str
    sql: str
    reasoning: str
    status: CandidateStatus
    error: str | None
    error_kind: str | None
    fingerprint: str | None
    row_count: int | None
    fix_attempts: int
    history: list[dict[str, Any]]
    meta: NotRequired[dict[str, Any]]


class UsageRecord(TypedDict):
    """One model call: who made it, with which model, what it cost in tokens and time."""

    node: str
    role: str
    model: str
    input_tokens: int
    output_tokens: int
    latency_ms: float
    cached: NotRequired[bool]
    replayed: NotRequired[bool]
    typed: NotRequired[bool]
    call: NotRequired[str]
    cost_usd: NotRequired[float]
    priced: NotRequired[bool]


class ErrorRecord(TypedDict):
    node: str
    kind: str
    message: str


class Answer(TypedDict, total=False):
    sql: str | None
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    candidate_id: str | None
    generator: str | None
    error: str | None


class Selection(TypedDict, total=False):
    """How the answer was chosen.

    ``clusters`` groups candidates by execution result; ``votes``/``vote`` are the
    confidence-aware vote over them; ``pairwise`` lists each pairwise verdict of the selection
    model, ``scores`` the summed scores and ``tournament`` how its rounds were played;
    ``method`` is ``vote`` or ``pairwise`` and ``reason`` says why in words.
    """

    clusters: list[dict[str, Any]]
    votes: list[int]
    vote: dict[str, Any]
    pairwise: list[dict[str, Any]]
    scores: dict[str, float]
    model_calls: int
    tournament: dict[str, Any]
    chosen: str | None
    chosen_cluster: int | None
    confidence: float
    method: str
    reason: str


def merge_candidates(left: list[Candidate] | None, right: list[Candidate] | None) -> list[Candidate]:
    """Reducer: upsert candidates by id, keeping first-seen order.

    Generators append new candidates; the fixer and the checker replace existing ones by id.
    """
    merged: dict[str, Candidate] = {c["id"]: c for c in (left or [])}
    for c in right or []:
        merged[c["id"]] = c
    return list(merged.values())


class SqlchorusState(TypedDict, total=False):
    """Full state of one question's run."""

    # input
    question: str
    evidence: str
    database: str  # the SQLite file, where the host carries it in state (LangGraph Studio)
    # keywords and values
    keywords: list[str]
    values: dict[str, list[dict[str, Any]]]
    # schema
    schema_view: str
    links: dict[str, list[str]]
    schema_links: str  # the linking model's own Schema_links list, as written (DIN-SQL)
    link_reasoning: str
    schema_note: str
    # candidates and their loop
    candidates: Annotated[list[Candidate], merge_candidates]
    fix_round: int
    # selection and answer
    selection: Selection
    answer: Answer
    # bookkeeping
    usage: Annotated[list[UsageRecord], operator.add]
    errors: Annotated[list[ErrorRecord], operator.add]


class GeneratorInput(TypedDict, total=False):
    """What a generator branch receives through ``Send``: the shared context plus its sample."""

    question: str
    evidence: str
    database: str
    keywords: list[str]
    values: dict[str, list[dict[str, Any]]]
    links: dict[str, list[str]]
    schema_links: str
    schema_view: str
    generator: str
    sample: int
