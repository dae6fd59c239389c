"""What each node may return: its partial update of the state, as a type.

A node returns only the keys it writes. Each node (or family of nodes) declares those keys here,
as a ``TypedDict`` with ``total=False``, with the value types its state declares: the graph's
nodes update :class:`~sqlchorus.core.state.SqlchorusState`, the LIST subgraph's nodes
:class:`~sqlchorus.core.list_search.ListState`. Where the state has a reducer that appends
(``candidates``, ``usage``, ``errors``, ``trail``), the update holds the list to append. The type
checker (``mypy``, configured in ``pyproject.toml``) then holds every node to its contract, and
``tests/test_types.py`` checks that each key here has its state's type.

=====================  =====================================================================
node                   update
=====================  =====================================================================
extract_keywords       :class:`KeywordsUpdate`
retrieve_values        :class:`ValuesUpdate`
link_schema            :class:`LinkUpdate`
generate_* (every      :class:`GeneratorUpdate`
generator)
check_candidates       :class:`CheckUpdate`
fix_candidates         :class:`FixUpdate`
select_candidate       :class:`SelectUpdate`
list_plan              :class:`PlanUpdate`
list_write_step        :class:`WriteStepUpdate`
list_verify_step       :class:`VerifyStepUpdate`
list_reprompt          :class:`RepromptUpdate`
list_traceback         :class:`TracebackUpdate`
=====================  =====================================================================
"""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from sqlchorus.core.state import Answer, Candidate, ErrorRecord, Selection, UsageRecord

# -- shared parts --------------------------------------------------------------------------------


class ModelCallUpdate(TypedDict, total=False):
    """The bookkeeping of a node that calls a model: the calls' usage records and the errors it
    went on after. Both are appended by the state's reducers. Also the whole update of a node
    whose only model call failed (:func:`sqlchorus.core.generation.model_error_update`)."""

    usage: list[UsageRecord]
    errors: list[ErrorRecord]


# -- the graph's nodes (SqlchorusState) ----------------------------------------------------------


class KeywordsUpdate(ModelCallUpdate, total=False):
    """``extract_keywords``."""

    keywords: list[str]


class ValuesUpdate(TypedDict, total=False):
    """``retrieve_values``: the values found per column; an error when none could be looked up
    (it calls no model, so it has no usage)."""

    values: dict[str, list[dict[str, Any]]]
    errors: list[ErrorRecord]


class LinkUpdate(ModelCallUpdate, total=False):
    """``link_schema``: the links, the linking model's own list and reasoning, the schema view the
    generators see, and a note when the schema was narrowed to fit."""

    links: dict[str, list[str]]
    schema_links: str
    link_reasoning: str
    schema_view: str
    schema_note: str


class GeneratorUpdate(ModelCallUpdate, total=False):
    """Every generator branch (``generate_divide_conquer``, ``generate_query_plan``,
    ``generate_synthetic``, ``generate_din``, ``generate_nrep``, ``generate_list``,
    ``generate_direct``, and plug-in generators): its new candidates, appended by id."""

    candidates: list[Candidate]


class CheckUpdate(TypedDict, total=False):
    """``check_candidates``: the candidates it ran, replacing them by id."""

    candidates: list[Candidate]


class FixUpdate(ModelCallUpdate, total=False):
    """``fix_candidates``: the candidates it rewrote (replacing them by id) and the round count."""

    candidates: list[Candidate]
    fix_round: int


class SelectUpdate(ModelCallUpdate, total=False):
    """``select_candidate`` (and :func:`sqlchorus.core.selection.choose`, which makes all of it
    but the answer)."""

    selection: Selection
    answer: Answer


# -- the LIST subgraph's nodes (ListState) -------------------------------------------------------


class PlanUpdate(ModelCallUpdate, total=False):
    """``list_plan``: a new plan, and the search's per-plan state started afresh."""

    plan: list[str]
    plan_round: int
    plan_fallback: bool
    step: int
    verified: list[dict[str, Any]]
    attempt: dict[str, Any]
    check: dict[str, Any]
    failures: list[dict[str, Any]]
    local_attempts: int
    dead_ends: list[dict[str, Any]]
    halt: str | None


class WriteStepUpdate(ModelCallUpdate, total=False):
    """``list_write_step``: the query written for the current step."""

    attempt: dict[str, Any]
    failures: list[dict[str, Any]]
    local_attempts: int
    global_attempts: int
    halt: str | None


class RepromptUpdate(ModelCallUpdate, total=False):
    """``list_reprompt``: the repaired query of the current step."""

    attempt: dict[str, Any]
    local_attempts: int
    global_attempts: int
    halt: str | None


class VerifyStepUpdate(TypedDict, total=False):
    """``list_verify_step``: the verdict, and on success the verified path grown by one step."""

    check: dict[str, Any]
    trail: list[dict[str, Any]]
    written: list[str]
    accepted: list[str]
    failures: list[dict[str, Any]]
    verified: list[dict[str, Any]]
    step: int
    local_attempts: int
    best: dict[str, Any] | None


class TracebackUpdate(TypedDict, total=False):
    """``list_traceback``: back to the last verified step, or the plan set aside for a re-plan."""

    tracebacks: int
    local_attempts: int
    failures: list[dict[str, Any]]
    verified: list[dict[str, Any]]
    step: int
    dead_ends: list[dict[str, Any]]
    failed_plans: list[dict[str, Any]]
    last_traceback: dict[str, Any]


GRAPH_UPDATES: tuple[type, ...] = (
    KeywordsUpdate, ValuesUpdate, LinkUpdate, GeneratorUpdate, CheckUpdate, FixUpdate, SelectUpdate,
)
"""The updates of the graph's nodes: each key is a key of ``SqlchorusState``, of the same type."""

LIST_UPDATES: tuple[type, ...] = (PlanUpdate, WriteStepUpdate, RepromptUpdate, VerifyStepUpdate, TracebackUpdate)
"""The updates of the LIST subgraph's nodes: each key is a key of ``ListState``, of the same type."""
