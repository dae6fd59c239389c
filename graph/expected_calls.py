"""What a run will cost in model calls, worked out from the settings and the generator registry.

What each generator costs, and where it departs from its paper, is in its own description
(:class:`sqlchorus.core.generator.Generator`); the nodes before and after the generators keep
their figures and notes here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlchorus.config.presets import preset
from sqlchorus.config.settings import Settings
from sqlchorus.graph.generators import GENERATORS, LiveView, enabled
from sqlchorus.tools.candidates.selection import tournament, tournament_calls

FIXED_CALLS: dict[str, int] = {"extract_keywords": 1, "link_schema": 1}
"""Nodes before the generators: one call each (none when the settings take keywords from the
question and link lexically)."""

SAMPLING = (
    "CHASE-SQL's generators: of several samples, the first is greedy over link_schema's view in its own "
    "order and later ones are drawn at sample_temperature over a schema shuffled per sample; the paper "
    "diversifies its samples the same two ways but says neither whether any stays greedy nor at what "
    "temperature its 21-candidate pool was drawn (its Table 6 compares 0.5 and 1.8)"
)
NOTES: dict[str, str] = {
    "fix_candidates": (
        "CHASE-SQL: the few-shot examples are the project's own, over the demo database (the paper does "
        "not print its examples); the prompt also shows the retrieved values; schemas are in the run's "
        "schema format rather than table creation statements"
    ),
    "select_candidate": (
        "CHASE-SQL: one representative per result cluster (its earliest member) is compared for all its "
        "members, in both orders, and the scores are Algorithm 3's sums; with max_pairwise_calls set and "
        "more clusters than every pair allows, a tournament replaces comparing every pair; the selection "
        "model is not fine-tuned unless you name one (the paper's Table 5: 60.21% and 63.98% binary "
        "accuracy for untuned Claude-3.5-sonnet and Gemini-1.5-pro, 71.01% for its tuned Gemini-1.5-flash)"
    ),
}
"""Where the nodes after the generators depart from CHASE-SQL, by node name."""

DIFFERS_FROM_PAPER: Mapping[str, str] = LiveView(
    lambda: {**{g.node: g.note for g in GENERATORS.values()}, **NOTES}
)
"""Where each node departs from the paper it implements, by node name: the generators' notes come
from their descriptions, the other nodes' from :data:`NOTES`. ``--explain-preset`` prints the
notes of the nodes a preset runs, and README.md's table of nodes says the same at length."""

UNTUNED = (
    "selection model: the selection role's model (--role-model selection=MODEL, else --model), used "
    "as is, not fine-tuned as CHASE-SQL's is; to tune one, run sqlchorus eval --export-pairs pairs.jsonl "
    "on questions you do not evaluate on (a training set): each line is a labelled pair of result "
    "clusters in the selection prompt, in the chat fine-tuning JSON Lines format, and the tuned model "
    "is named as the selection role's model"
)


def expected_calls(settings: Settings) -> dict[str, Any]:
    """Model calls per question that ``settings`` will make.

    Returns:
        ``by_node`` (calls per node when every candidate runs), ``typical`` (their sum),
        ``candidates``, ``fixer_max`` (beta times candidates), ``selection_max`` (pairwise
        comparisons, both orders, of at most ``pairwise_max_clusters`` clusters within
        ``max_pairwise_calls``, for the number of clusters that costs most) and ``most``
        (everything at once).

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
    selection_max = 0 if settings.pairwise == "never" else max(
        (tournament_calls(n, settings.pairwise_max_clusters, settings.max_pairwise_calls)
         for n in range(2, candidates + 1)),
        default=0,
    )
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
    settings = Settings(preset=name)
    cost = expected_calls(settings)
    lines = [f"preset {name}: {chosen.summary}", "generators:"]
    for gen, generator, samples in enabled(settings.generators):
        extra = f" ({generator.detail(settings)})" if generator.detail else ""
        lines.append(f"  {gen} x{samples}{extra}")
    if any(n > 1 for n in settings.generators.values()):
        lines.append(f"samples after each generator's first: temperature {settings.sample_temperature}"
                     f"{', schema shuffled per sample' if settings.shuffle_schema else ''}")
    lines.append(f"fixer: up to {settings.fix_rounds} round(s) per candidate that fails or returns no rows")
    lines.append(f"selection: {chosen.selection_summary}")
    if settings.pairwise != "never":
        lines.append(f"  {_pairwise_plan(settings, cost['candidates'])}")
        lines.append(f"  {UNTUNED}")
    lines.append("expected model calls per question:")
    for node, calls in cost["by_node"].items():
        lines.append(f"  {node}: {calls}")
    typical = {"never": "every candidate runs", "low-confidence": "every candidate runs, the vote is confident",
               "always": "every candidate runs, all with one result"}[settings.pairwise]
    lines.append(f"  typical: {cost['typical']} ({typical})")
    lines.append(
        f"  at most: {cost['most']} (fixer {cost['fixer_max']}, pairwise selection {cost['selection_max']})"
    )
    notes = [(generator.node, generator.note) for _, generator, _ in enabled(settings.generators)]
    later = ["fix_candidates"] * (settings.fix_rounds > 0) + ["select_candidate"] * (settings.pairwise != "never")
    notes += [(node, NOTES[node]) for node in later]
    lines.append("where it differs from the papers:")
    lines += [f"  {node}: {note}" for node, note in notes]
    if any(n > 1 for _, generator, n in enabled(settings.generators) if generator.sampled):
        lines.append(f"  sampling: {SAMPLING}")
    return "\n".join(lines)


def _pairwise_plan(settings: Settings, candidates: int) -> str:
    """How many clusters pairwise selection compares, in words, with its call bound."""
    budget = settings.max_pairwise_calls
    when = "when the vote is not confident" if settings.pairwise == "low-confidence" else "whenever results disagree"
    most = min(candidates, settings.pairwise_max_clusters)
    clusters = (f"the {settings.pairwise_max_clusters} largest result clusters" if settings.pairwise_max_clusters < candidates
                else f"the result clusters (up to {most}, one per candidate)")
    if not budget or most * (most - 1) <= budget:
        bound = f"; max_pairwise_calls is {budget}" if budget else ""
        return f"pairwise: {when}, every pair of {clusters}, in both orders ({most * (most - 1)} calls at most{bound})"
    entrants, finalists = tournament(candidates, settings.pairwise_max_clusters, budget)
    full = max((n for n in range(2, most + 1) if n * (n - 1) <= budget), default=1)
    return (f"pairwise: {when}, {clusters} within {budget} calls (max_pairwise_calls): every pair, in both orders, "
            f"of up to {full} clusters; with more, the largest meet in a round robin and the others climb a ladder "
            f"for its last place (with {candidates} clusters: {entrants} compared, {finalists} in the final, "
            f"{tournament_calls(candidates, settings.pairwise_max_clusters, budget)} calls)")
