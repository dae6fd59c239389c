"""What a run will cost in model calls, worked out from the settings and the generator registry."""

from __future__ import annotations

from typing import Any

from sqlchorus.config.presets import preset
from sqlchorus.config.settings import Settings
from sqlchorus.graph.generators import enabled

FIXED_CALLS: dict[str, int] = {"extract_keywords": 1, "link_schema": 1}
"""Nodes before the generators: one call each (none when the settings take keywords from the
question and link lexically)."""


def expected_calls(settings: Settings) -> dict[str, Any]:
    """Model calls per question that ``settings`` will make.

    Returns:
        ``by_node`` (calls per node when every candidate runs), ``typical`` (their sum),
        ``candidates``, ``fixer_max`` (beta times candidates), ``selection_max`` (pairwise
        comparisons, both orders, of at most ``pairwise_max_clusters`` clusters when every
        candidate disagrees) and ``most`` (everything at once).

    Raises:
        ValueError: a generator name that is not registered.
    """
    by_node: dict[str, int] = {
        "extract_keywords": FIXED_CALLS["extract_keywords"] if settings.keywords == "model" else 0,
        "link_schema": FIXED_CALLS["link_schema"] if settings.linking == "model" else 0,
    }
    candidates = 0
    for _, generator, samples in enabled(settings.generators):
        by_node[generator.node] = generator.calls(settings) * samples
        candidates += samples * generator.candidates(settings)
    typical = sum(by_node.values())
    fixer_max = settings.fix_rounds * candidates
    clusters = min(candidates, settings.pairwise_max_clusters)
    selection_max = 0 if settings.pairwise == "never" or clusters < 2 else clusters * (clusters - 1)
    return {
        "by_node": by_node,
        "typical": typical,
        "candidates": candidates,
        "fixer_max": fixer_max,
        "selection_max": selection_max,
        "most": typical + fixer_max + selection_max,
    }


def explain_preset(name: str) -> str:
    """What preset ``name`` runs and the model calls it is expected to make per question.

    Raises:
        ValueError: an unknown preset.
    """
    chosen = preset(name)
    settings = Settings().with_preset(name)
    cost = expected_calls(settings)
    lines = [f"preset {name}: {chosen.summary}", "generators:"]
    for gen, samples in settings.generators.items():
        extra = ""
        if gen == "nrep":
            extra = f" (views: {', '.join(settings.nrep_views)})"
        elif gen == "din":
            extra = f" (self-correction: {settings.din_correction})"
        lines.append(f"  {gen} x{samples}{extra}")
    lines.append(f"fixer: up to {settings.fix_rounds} round(s) per candidate that fails or returns no rows")
    lines.append(f"selection: {chosen.selection_summary}")
    lines.append("expected model calls per question:")
    for node, calls in cost["by_node"].items():
        lines.append(f"  {node}: {calls}")
    lines.append(f"  typical: {cost['typical']} (every candidate runs, the vote is confident)")
    lines.append(
        f"  at most: {cost['most']} (fixer {cost['fixer_max']}, pairwise selection {cost['selection_max']})"
    )
    return "\n".join(lines)
