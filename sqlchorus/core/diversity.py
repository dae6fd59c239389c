"""Diversity across samples of a generator: temperature and schema order per sample.

CHASE-SQL raises the sampling temperature and shuffles the order of tables and columns in the
prompt so that samples of one generator differ. The first sample stays greedy and unshuffled, so
a single-sample run is deterministic. Retries (fixer rounds after the first, LIST's reprompts,
rewrites and re-plans) sample as LIST does for its self-correction.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from sqlchorus.core.budget import schema_view
from sqlchorus.core.context import Context
from sqlchorus.core.state import GeneratorInput
from sqlchorus.tools.values.shown import values_by_column


def sample_temperature(context: Context, generator: str, sample: int) -> float:
    """The sampling temperature of ``sample`` of ``generator``: greedy settings for the first."""
    settings = context.settings
    if sample == 0:
        return settings.temperature
    return float(settings.generator_temperatures.get(generator, settings.sample_temperature))


class Sampling(TypedDict, total=False):
    """Sampling arguments of :func:`~sqlchorus.core.llm.call_model`, to pass as ``**sampling``."""

    temperature: float
    top_p: float
    sample: int


def retry_sampling(context: Context) -> Sampling:
    """The sampling of a retry, any call made because an earlier attempt failed: LIST's
    self-correction setting (temperature 0.8, top-p 0.95) unless the settings say otherwise, so
    that a retry is a fresh draw rather than the greedy answer that failed (and, at a temperature
    above 0, never a response cache hit). Keyword arguments of
    :func:`~sqlchorus.core.llm.call_model`."""
    settings = context.settings
    return {"temperature": settings.retry_temperature, "top_p": settings.retry_top_p}


def shuffle_seed(context: Context, sample: int) -> int | None:
    """The schema shuffle seed of ``sample``: None for the first sample or with shuffling off."""
    return sample if sample and context.settings.shuffle_schema else None


def sample_view(state: GeneratorInput, context: Context) -> tuple[str, int | None]:
    """The schema view a sample sees, and the shuffle seed used (None: not shuffled).

    The first sample, or any sample when shuffling is off, sees the view ``link_schema`` made;
    later ones see the same tables and columns in an order shuffled with the sample number.
    """
    settings = context.settings
    seed = shuffle_seed(context, state.get("sample", 0))
    if seed is None:
        return state.get("schema_view") or "", None
    links = state.get("links") or {}
    level = settings.schema_level if links else "full"
    view = schema_view(
        context, state, level=level, links=links or None,
        values=values_by_column(state.get("values") or {}), shuffle_seed=seed,
    )
    return view, seed


def generation_meta(temperature: float, seed: int | None) -> dict[str, Any]:
    return {"temperature": temperature, "shuffle_seed": seed}
