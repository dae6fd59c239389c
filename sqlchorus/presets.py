"""Presets: named choices of generators, selection and fixing that trade cost for accuracy.

* ``fast``: one generator (CHASE-SQL's divide-and-conquer chain of thought) plus the fixer:
  three model calls per question when the query runs.
* ``balanced``: N-rep's five greedy candidates, one per schema view, voted by execution result,
  with pairwise selection only when the vote is not confident. N-rep's published budget is 8 calls
  and 32K tokens per question (3 linking + 5 generation calls). Our graph also spends one call
  on keywords (for value retrieval) and one on ``link_schema``, whose M-Schema links N-rep reuses
  for its two M-Schema views; to stay within 8 calls the DDL view is filtered with those same
  links (``ddl:columns@m-schema``) instead of a DDL linking call of its own, which the paper made
  with a second model for diversity. That leaves one N-rep linking call (MAC-Schema).
* ``full``: every generator the graph has, CHASE-SQL's pairwise selection of the final answer.

A preset names generators that may not be registered yet (another branch may add them later);
they are skipped, and :func:`explain_preset` says so. Selection settings are applied only where
:class:`~sqlchorus.settings.Settings` has the field, so a preset keeps working while the selection
agent's settings evolve.

``Settings(preset=...)`` fills every field the preset covers that is still at its default
(explicit choices win); :func:`apply_preset` overrides them all.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlchorus.settings import SCHEMA_FORMATS, SCHEMA_LEVELS, Settings

# Fixed nodes before the generators: extract_keywords and link_schema, one call each.
FIXED_CALLS: dict[str, int] = {"extract_keywords": 1, "link_schema": 1}

# Model calls per sample of generators whose modules do not say (``model_calls(settings)``).
KNOWN_CALLS: dict[str, int] = {"divide_conquer": 1, "query_plan": 1}

BALANCED_VIEWS: tuple[str, ...] = (
    "mac-schema:full",
    "mac-schema:columns",
    "m-schema:tables",
    "m-schema:columns",
    "ddl:columns@m-schema",
)


@dataclass(frozen=True)
class Preset:
    """One preset.

    Attributes:
        name: its name.
        summary: one line on what it runs.
        generators: samples per generator, by name; unregistered names are skipped.
        every_generator: add every other registered generator with one sample.
        fields: other ``Settings`` fields it sets (fix rounds, views, ...).
        selection: selection settings by field name, applied where ``Settings`` has the field.
        selection_summary: how the answer is chosen, in words.
    """

    name: str
    summary: str
    generators: dict[str, int]
    every_generator: bool = False
    fields: dict[str, Any] = field(default_factory=dict)
    selection: dict[str, Any] = field(default_factory=dict)
    selection_summary: str = ""


PRESETS: dict[str, Preset] = {
    "fast": Preset(
        name="fast",
        summary="one generator (divide-and-conquer chain of thought) plus the fixer",
        generators={"divide_conquer": 1},
        fields={"fix_rounds": 3},
        selection={"pairwise": "never"},
        selection_summary="the single candidate; no selection call",
    ),
    "balanced": Preset(
        name="balanced",
        summary="N-rep: five greedy candidates over five schema views",
        generators={"nrep": 1},
        fields={"nrep_views": BALANCED_VIEWS, "fix_rounds": 1},
        selection={"pairwise": "low-confidence"},
        selection_summary="execution-result voting; pairwise comparison only when the vote is not confident",
    ),
    "full": Preset(
        name="full",
        summary="every generator of the graph",
        generators={"divide_conquer": 1, "query_plan": 1, "synthetic": 1, "din": 1, "nrep": 1, "list": 1},
        every_generator=True,
        fields={"fix_rounds": 3},
        selection={"pairwise": "always"},
        selection_summary="CHASE-SQL pairwise selection among result clusters",
    ),
}
PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)


# -- N-rep views -----------------------------------------------------------------------------


class View(NamedTuple):
    """One N-rep schema view: a representation at a filter level, filtered with ``link_format``'s links."""

    format: str
    level: str
    link_format: str

    @property
    def spec(self) -> str:
        base = f"{self.format}:{self.level}"
        return base if self.link_format == self.format or self.level == "full" else f"{base}@{self.link_format}"


def parse_view(spec: str) -> View:
    """Parse ``format:level[@link_format]``.

    Raises:
        ValueError: an unknown format or level, or a link format on an unfiltered view.
    """
    text = str(spec).strip()
    body, at, link = text.partition("@")
    fmt, colon, level = body.partition(":")
    fmt, level, link = fmt.strip(), level.strip(), link.strip()
    if not colon:
        raise ValueError(f"N-rep view {spec!r} is not of the form format:level.")
    if fmt not in SCHEMA_FORMATS:
        raise ValueError(f"Unknown format in N-rep view {spec!r}; formats are {', '.join(SCHEMA_FORMATS)}.")
    if level not in SCHEMA_LEVELS:
        raise ValueError(f"Unknown level in N-rep view {spec!r}; levels are {', '.join(SCHEMA_LEVELS)}.")
    if at:
        if link not in SCHEMA_FORMATS:
            raise ValueError(f"Unknown link format in N-rep view {spec!r}; formats are {', '.join(SCHEMA_FORMATS)}.")
        if level == "full":
            raise ValueError(f"N-rep view {spec!r} shows the full schema, so it uses no links.")
    return View(fmt, level, link if at else fmt)


def linking_formats(views: tuple[str, ...] | list[str], schema_format: str) -> list[str]:
    """The formats N-rep must link with itself: those its filtered views need, except the one
    ``link_schema`` already linked with (``schema_format``), in first-use order."""
    out: list[str] = []
    for spec in views:
        view = parse_view(spec)
        if view.level != "full" and view.link_format != schema_format and view.link_format not in out:
            out.append(view.link_format)
    return out


# -- applying presets ------------------------------------------------------------------------


def registered_generators() -> list[str]:
    from sqlchorus.graph.generators import GENERATORS

    return list(GENERATORS)


def _preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"Unknown preset {name!r}; choose one of {', '.join(PRESET_NAMES)}.") from None


def preset_generators(name: str) -> tuple[dict[str, int], list[str]]:
    """``(generators to run, names skipped because no generator by that name is registered)``."""
    preset = _preset(name)
    registered = registered_generators()
    chosen = {g: n for g, n in preset.generators.items() if g in registered}
    skipped = [g for g in preset.generators if g not in registered]
    if preset.every_generator:
        for g in registered:
            chosen.setdefault(g, 1)
    if not chosen:  # none of its generators is available: the first registered one stands in
        chosen = {registered[0]: 1}
    return chosen, skipped


def preset_changes(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(changes to Settings, selection settings Settings has no field for)``."""
    preset = _preset(name)
    names = {f.name for f in dataclasses.fields(Settings)}
    generators, _ = preset_generators(name)
    changes: dict[str, Any] = {"generators": generators, **preset.fields}
    missing = {}
    for key, value in preset.selection.items():
        if key in names:
            changes[key] = value
        else:
            missing[key] = value
    return changes, missing


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


def fill_defaults(settings: Settings) -> None:
    """Set, in place, every field ``settings.preset`` covers that is still at its default."""
    changes, _ = preset_changes(settings.preset)  # type: ignore[arg-type]
    defaults = {f.name: f for f in dataclasses.fields(Settings)}
    for key, value in changes.items():
        if getattr(settings, key) == _default(defaults[key]):
            setattr(settings, key, value)


def apply_preset(settings: Settings, name: str) -> Settings:
    """A copy of ``settings`` with every choice of preset ``name``.

    Raises:
        ValueError: an unknown preset.
    """
    changes, _ = preset_changes(name)
    return dataclasses.replace(settings, preset=name, **changes)


# -- expected cost ---------------------------------------------------------------------------


def _generator_module(name: str):
    from sqlchorus.graph.generators import GENERATORS

    return importlib.import_module(GENERATORS[name].fn.__module__)


def expected_calls(settings: Settings) -> dict[str, Any]:
    """Model calls per question that ``settings`` will make.

    Returns:
        ``by_node`` (calls per node when every candidate runs; None where a generator does not
        say), ``typical`` (their sum), ``candidates``, ``fixer_max`` (beta times candidates),
        ``selection_max`` (pairwise comparisons, both orders, of at most
        ``pairwise_max_clusters`` clusters when every candidate disagrees)
        and ``most`` (everything at once), ``unknown`` (generators of unknown cost).
    """
    by_node: dict[str, int | None] = dict(FIXED_CALLS)
    candidates = 0
    unknown: list[str] = []
    from sqlchorus.graph.generators import GENERATORS

    for name, samples in settings.generators.items():
        if name not in GENERATORS:
            continue
        module = _generator_module(name)
        calls_fn = getattr(module, "model_calls", None)
        count_fn = getattr(module, "candidate_count", None)
        per_sample = calls_fn(settings) if calls_fn else KNOWN_CALLS.get(name)
        candidates += samples * (count_fn(settings) if count_fn else 1)
        node = GENERATORS[name].node
        if per_sample is None:
            unknown.append(name)
            by_node[node] = None
        else:
            by_node[node] = per_sample * samples
    typical = sum(v for v in by_node.values() if v is not None)
    fixer_max = settings.fix_rounds * candidates
    pairwise = getattr(settings, "pairwise", "always")
    clusters = min(candidates, getattr(settings, "pairwise_max_clusters", candidates))
    selection_max = 0 if pairwise == "never" or clusters < 2 else clusters * (clusters - 1)
    return {
        "by_node": by_node,
        "typical": typical,
        "candidates": candidates,
        "fixer_max": fixer_max,
        "selection_max": selection_max,
        "most": None if unknown else typical + fixer_max + selection_max,
        "unknown": unknown,
    }


def explain_preset(name: str) -> str:
    """What preset ``name`` runs and the model calls it is expected to make per question.

    Raises:
        ValueError: an unknown preset.
    """
    preset = _preset(name)
    settings = apply_preset(Settings(), name)
    generators, skipped = preset_generators(name)
    _, missing = preset_changes(name)
    cost = expected_calls(settings)
    lines = [f"preset {name}: {preset.summary}", "generators:"]
    for gen, samples in generators.items():
        extra = ""
        if gen == "nrep":
            extra = f" (views: {', '.join(settings.nrep_views)})"
        elif gen == "din":
            extra = f" (self-correction: {settings.din_correction})"
        lines.append(f"  {gen} x{samples}{extra}")
    if skipped:
        lines.append(f"not available yet, skipped: {', '.join(skipped)}")
    lines.append(f"fixer: up to {settings.fix_rounds} round(s) per candidate that fails or returns no rows")
    lines.append(f"selection: {preset.selection_summary}")
    if missing:
        lines.append(
            "selection settings not supported by this version, ignored: "
            + ", ".join(f"{k}={v!r}" for k, v in missing.items())
        )
    lines.append("expected model calls per question:")
    for node, calls in cost["by_node"].items():
        lines.append(f"  {node}: {calls if calls is not None else 'unknown'}")
    typical = f"{cost['typical']}" + (" + unknown" if cost["unknown"] else "")
    lines.append(f"  typical: {typical} (every candidate runs, the vote is confident)")
    most = cost["most"] if cost["most"] is not None else "unknown"
    lines.append(
        f"  at most: {most} (fixer {cost['fixer_max']}, pairwise selection {cost['selection_max']})"
    )
    return "\n".join(lines)
