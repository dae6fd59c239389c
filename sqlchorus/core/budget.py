"""The prompt budget: every model call fits, and a schema too large for a prompt is narrowed.

A call's budget (:func:`prompt_budget`) is ``Settings.max_prompt_tokens``, lowered to the model's
own context window when the model says what it is (LangChain's ``model.profile``,
``max_input_tokens``). Tokens are counted by the model's provider's tokenizer where one is
installed, otherwise by a stated approximation (:mod:`sqlchorus.tools.models.tokens`).

A schema view (:func:`schema_view`) may take what the smallest prompt budget of the run's roles
leaves beside :data:`PROMPT_RESERVE` and the question and hint (a quarter of it at least), and
``Settings.max_schema_tokens`` at most when that is set lower. A schema that fits is shown whole,
however large, since CHASE-SQL gives its generators "all contextual information", the schema
included: only a schema the prompt cannot hold is cut.

A run may also have a budget per question, ``Settings.max_question_tokens`` (the ``balanced``
preset carries N-rep's 32,000): the prompt tokens of all of a question's calls together. The
schema is then shown whole only when every call that shows the full view can carry it within
that budget (:func:`question_plan`: each of the run's typical calls keeps :data:`CALL_RESERVE`
for the rest of its prompt, and the full views share what is left); otherwise each full view
takes its share, and the calls that show only the linked part are not cut. Whole or narrowed
is thus decided once per question, by what the whole run would cost, not by one call alone.

A view that would be larger than its budget is rendered from a narrowed schema
(:mod:`sqlchorus.tools.schema.narrow`) in two tiers: the details (types, descriptions, sample
values) of the columns ranked first for the question (by its words and the hint's, the
retrieved values, readable names and descriptions, foreign-key neighbourhoods and bridges, with
the linked columns kept first), then the names alone of as many other columns as the rest of
the room holds (:data:`NAMES_SHARE` of it at most kept from the details), best tables first:
the linking model sees, by name, columns the details had no room for, and its links bring their
details into every later view, as RSL-SQL's bidirectional linking does.
The node's span records what was left out, and :func:`call_model
<sqlchorus.core.llm.call_model>` refuses any call still over its budget rather than send it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from opentelemetry import trace

from sqlchorus.config import catalog
from sqlchorus.config.settings import Settings
from sqlchorus.core.context import Context
from sqlchorus.core.models import model_name
from sqlchorus.tools.tracing import attributes as attrs
from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.engines.catalog import DatabaseSchema
from sqlchorus.tools.schema.narrow import (
    EVIDENCE,
    Narrowing,
    names_listing,
    narrow_schema,
    rank_columns,
)
from sqlchorus.tools.models.tokens import APPROXIMATE, TokenCounter, tiktoken_counter
from sqlchorus.tools.schema.views import render_view, resolve_links

_OPENAI_CLASSES = frozenset({"ChatOpenAI", "AzureChatOpenAI"})


class PromptBudgetError(SqlchorusError, RuntimeError):
    """A prompt that does not fit its model's budget even with the schema narrowed."""

    kind = "prompt_budget"


def token_counter(model: Any) -> TokenCounter:
    """The counter for ``model``'s prompts: tiktoken for OpenAI's own models (not an
    OpenAI-compatible server's), the approximation otherwise."""
    if type(model).__name__ in _OPENAI_CLASSES and not _custom_base_url(model):
        counter = tiktoken_counter(model_name(model))
        if counter is not None:
            return counter
    return APPROXIMATE


def _custom_base_url(model: Any) -> bool:
    url = getattr(model, "openai_api_base", None) or ""
    return bool(url) and "api.openai.com" not in str(url)


def context_window(model: Any) -> int | None:
    """The prompt tokens ``model`` accepts, when it says (``model.profile``'s
    ``max_input_tokens``)."""
    profile = getattr(model, "profile", None) or {}
    window = profile.get("max_input_tokens") if isinstance(profile, Mapping) else None
    return int(window) if isinstance(window, (int, float)) and window > 0 else None


def prompt_budget(context: Context, role: str) -> int:
    """Prompt tokens a call for ``role`` may send at most."""
    budget = context.settings.max_prompt_tokens
    window = context_window(context.models.get(role))
    return min(budget, window) if window else budget


PROMPT_RESERVE = 4_000
"""Tokens kept beside a schema view for the rest of a prompt: instructions, few-shot examples (the
longest, divide-and-conquer's, take about 3,300) and the candidates; the question and hint are
counted apart (:func:`schema_budget`)."""


CALL_RESERVE = 1_250
"""Tokens each of a question's calls keeps for the rest of its prompt when a per-question budget
is shared among the full schema views (:func:`question_plan`): about what ``balanced``'s calls
take beside their views on average (its keyword call about 1,000, its linking prompt's examples
up to 2,500, its generation prompts with a linked part of the schema 1,300 to 3,000)."""

NAMES_SHARE = 0.5
"""The most of a narrowed view's room kept from the details for the names-only tier."""

NAMES = "names"
"""The names-only tier of a narrowed view, as a source of evidence :func:`schema_view` can leave
out besides :data:`~sqlchorus.tools.schema.narrow.EVIDENCE`."""


def question_plan(settings: Settings) -> tuple[int, int]:
    """The model calls a question typically makes under ``settings`` and how many of them show
    the full schema view: the keyword and linking calls (when a model makes them; linking shows
    the full view) and each generator's calls and views (``Generator.schema_views``), times its
    samples."""
    calls = int(settings.keywords == "model") + int(settings.linking == "model")
    views = int(settings.linking == "model")
    described = {g.key: g for g in catalog.generators()}
    for key, samples in settings.generators.items():
        generator = described.get(key)
        if generator is None:
            continue
        made = generator.calls(settings)
        shown = getattr(generator, "schema_views", None)
        calls += made * samples
        views += (shown(settings) if shown is not None else made) * samples
    return calls, views


def question_share(context: Context) -> int | None:
    """Tokens each full schema view may take under the per-question budget, or None without
    one: what each call's :data:`CALL_RESERVE` leaves of ``max_question_tokens``, shared among
    the full views (an eighth of the prompt budget at least)."""
    budget = context.settings.max_question_tokens
    if not budget:
        return None
    plan = context.memo.get("question_plan")
    if plan is None:
        plan = context.memo["question_plan"] = question_plan(context.settings)
    calls, views = plan
    floor = context.settings.max_prompt_tokens // 8
    return max((budget - calls * CALL_RESERVE) // max(views, 1), floor)


def schema_budget(context: Context, state: Mapping[str, Any] | None = None) -> int:
    """Tokens one schema view may take: what the smallest prompt budget among the run's roles
    leaves beside :data:`PROMPT_RESERVE` and ``state``'s question and hint (a quarter of it at
    least), ``max_schema_tokens`` at most, and the view's share of ``max_question_tokens`` at
    most when that is set (:func:`question_share`).

    The question and hint are counted apart from the reserve because every prompt with a schema
    also has them, and a hint may be thousands of tokens long: a schema that fills the rest of the
    budget would otherwise push such a prompt over it."""
    smallest = min((prompt_budget(context, role) for role in context.models), default=context.settings.max_prompt_tokens)
    asked = 0
    if state:
        counter = schema_counter(context)
        asked = sum(counter.count(state.get(key) or "") for key in ("question", "evidence"))
    budget = min(context.settings.max_schema_tokens, max(smallest - PROMPT_RESERVE - asked, smallest // 4))
    share = question_share(context)
    return max(1, min(budget, share) if share is not None else budget)


def schema_counter(context: Context) -> TokenCounter:
    """The counter a schema view is measured with: the approximation unless every role's model
    counts the same way."""
    counters = {counter.name: counter for counter in map(token_counter, context.models.values())}
    return next(iter(counters.values())) if len(counters) == 1 else APPROXIMATE


def ranked_columns(
    context: Context, question: str, values: Mapping[str, Sequence[Any]] | None,
    links: Mapping[str, Sequence[str]] | None, *, hint: str = "", evidence: Collection[str] = EVIDENCE,
) -> list[tuple[str, str]]:
    """The schema's columns ranked for the question and hint (memoised for the run)."""
    key = (question, hint, repr(sorted((values or {}).items())), repr(sorted((links or {}).items())),
           tuple(sorted(evidence)))
    memo = context.memo.setdefault("ranked_columns", {})
    if key not in memo:
        memo[key] = rank_columns(context.schema, question, values, links, hint=hint, evidence=evidence)
    return memo[key]


def schema_view(
    context: Context,
    state: Mapping[str, Any],
    fmt: str | None = None,
    *,
    level: str = "full",
    links: Mapping[str, Sequence[str]] | None = None,
    values: Mapping[str, Sequence[Any]] | None = None,
    shuffle_seed: int | None = None,
    sample_values: int | None = None,
    evidence: Collection[str] | None = None,
) -> str:
    """:func:`~sqlchorus.tools.schema.views.render_view` of the run's schema, narrowed to the schema
    budget when it would not fit (see the module docstring).

    ``state`` gives the question, hint, retrieved values and schema links the narrowing ranks by;
    ``links`` are the view's own (for the ``tables`` and ``columns`` levels), kept first when
    narrowing. ``evidence`` names what a narrowing may use (:data:`~sqlchorus.tools.schema.narrow.EVIDENCE`
    and :data:`NAMES`; all of it by default).
    """
    evidence = (*EVIDENCE, NAMES) if evidence is None else tuple(evidence)
    settings = context.settings
    whole = context.schema
    fmt = fmt or settings.schema_format
    samples = settings.sample_values if sample_values is None else sample_values
    budget = schema_budget(context, state)
    counter = schema_counter(context)

    def render(part: DatabaseSchema) -> str:
        return render_view(part, fmt, level=level, links=links, values=values, shuffle_seed=shuffle_seed,
                           sample_values=samples)

    def fits(part: DatabaseSchema) -> bool:
        return counter.count(render(part)) <= budget

    # Whether the whole schema fits does not depend on the shuffle: measured once per run.
    measured = context.memo.setdefault("whole_fits", {})
    key = (fmt, level, repr(links), repr(sorted((values or {}).items())), samples, budget)
    if measured.get(key) is not False:
        text = render(whole)
        measured[key] = counter.count(text) <= budget
        if measured[key]:
            return text
    keep = resolve_links(whole, links) if links and level != "full" else (state.get("links") or {})
    ranked = ranked_columns(context, state.get("question") or "", state.get("values"), keep,
                            hint=state.get("evidence") or "", evidence=evidence)
    # The names-only tier lists what the details leave out, for a first pass to choose from;
    # once a linker has chosen (``keep``), a view shows the details alone, of the same room, and
    # the names' room is not spent. Only a full view has such a rest.
    room = budget
    if NAMES in evidence and level == "full":
        every, _ = names_listing(whole, ranked, (), counter.count, 10**9)
        room = budget - min(counter.count(every), int(budget * NAMES_SHARE))
    listing = NAMES in evidence and level == "full" and not keep

    def fits_details(part: DatabaseSchema) -> bool:
        return counter.count(render(part)) <= room

    narrowing = narrow_schema(whole, ranked, fits_details, linked=sum(len(v) for v in keep.values()),
                              whole_checked=True)
    if narrowing is None:  # pragma: no cover - the whole schema was measured too large
        return render(whole)
    text = render(narrowing.schema)
    if listing:
        shown = {(t.name, c.name) for t in narrowing.schema.tables for c in t.columns}
        prefix = "-- " if fmt == "ddl" else ""  # a DDL view stays valid SQL
        left = budget - counter.count(text) - 2
        for _ in range(4):  # a tokenizer may count the joined text a little above its parts
            names, listed = names_listing(whole, ranked, shown, counter.count, left, prefix=prefix)
            joined = f"{text}\n\n{names}" if names else text
            over = counter.count(joined) - budget
            if over <= 0:
                text, narrowing.listed = joined, listed
                break
            left -= 2 * over
    record_narrowing(context, narrowing)
    return text


def record_narrowing(context: Context, narrowing: Narrowing) -> None:
    """Put what a narrowing left out on the current span, and keep the run's first note."""
    note = narrowing.note()
    trace.get_current_span().set_attribute(attrs.SQLCHORUS_SCHEMA_NARROWED, note)
    context.memo["last_narrowing"] = narrowing
    context.memo.setdefault("notes", [])
    if note not in context.memo["notes"]:
        context.memo["notes"].append(note)


def check_prompt(context: Context, role: str, texts: Sequence[str]) -> tuple[int, int, str]:
    """The prompt's tokens, the budget and the counter's name for a call of ``role``.

    Raises:
        PromptBudgetError: the prompt is over the budget.
    """
    counter = token_counter(context.models.get(role))
    tokens = counter.count_messages(texts)
    budget = prompt_budget(context, role)
    if tokens > budget:
        raise PromptBudgetError(
            f"The {role} prompt has {tokens:,} tokens ({counter.name}), over its budget of {budget:,}; "
            "it was not sent. Raise --max-prompt-tokens if the model takes more, or shorten the question."
        )
    return tokens, budget, counter.name
