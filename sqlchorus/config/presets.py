"""Presets: named choices of generators, selection and fixing that trade cost for accuracy.

* ``fast``: one generator (CHASE-SQL's divide-and-conquer chain of thought) plus the fixer:
  three model calls per question when the query runs.
* ``balanced``: N-rep's five greedy candidates, one per schema view, voted by execution result,
  with pairwise selection only when the vote is not confident. N-rep's published budget is 8 calls
  and 32K tokens per question (3 linking + 5 generation calls). Our graph also spends one call
  on keywords (for value retrieval) and one on ``link_schema``, whose M-Schema links N-rep reuses
  for its two M-Schema views; to stay within 8 calls the DDL view is filtered with those same
  links (``ddl:columns@m-schema``) instead of a DDL linking call of its own, which the paper made
  with a second model for diversity. That leaves one N-rep linking call (MAC-Schema). The
  fixer, which N-rep does not have, sees the linked tables with all their columns. An
  unconfident vote goes to pairwise selection over every result cluster, within N-rep's bound of
  2·C(M,2) calls for M = 5 candidates (20): every pair of up to five clusters, in both orders.
  N-rep's 32K tokens a question is its ``max_question_tokens``: a schema its three full-view
  calls (``link_schema``'s, N-rep's MAC-Schema linking and its ``mac-schema:full`` view) cannot
  all carry within it is narrowed for them.
* ``full``: every generator of the graph, CHASE-SQL's pairwise selection of the final answer over
  every result cluster, within two calls per candidate (20 for its ten): every pair of up to 5
  clusters, and past that the ladder, which still compares each of up to 11 clusters.
* ``paper``: CHASE-SQL's candidate pool: its three generators (divide-and-conquer, query plan,
  online synthetic examples), seven samples each, 21 candidates in all (the paper's Section 4.4).
  Samples after each generator's first are drawn at ``sample_temperature`` over a schema shuffled
  per sample, as the paper diversifies them; 0.5 is the lower of the two temperatures its
  Table 6 compares (0.5 and 1.8), the one at which plain self-consistency did better for all
  three generators, which matters while the selector is not fine-tuned. Pairwise selection
  always runs, over every result cluster, in a tournament bounded by ``max_pairwise_calls``:
  42 calls, two per candidate, which is every pair of up to 7 clusters (the paper's Algorithm 3
  in full) and, past that, a ladder that still compares each of up to 21 clusters.
* ``tiny``: for small local models (the offline demo's SmolLM2-135M): keywords from the question
  and lexical linking with no model call, one short direct prompt over the linked columns, and a
  grammar that admits only columns of the tables in FROM; one call per question when it runs;
  should pairwise selection be turned on, the terse selection prompt (no reasoning).

The presets that compare candidates (``balanced``, ``full``, ``paper``) keep
``selection_reasoning`` on, its default: their selection model is the run's own, used as is, not
fine-tuned as CHASE-SQL's is, so it reasons before its verdict.

A preset is data: the :class:`~sqlchorus.config.settings.Settings` fields it sets. ``Settings``
applies it: ``Settings(preset=...)`` gives every field not given its preset's value; what a preset costs in
model calls is worked out by the graph assembly, which knows the generators
(:func:`sqlchorus.graph.expected_calls.explain_preset`).

Every field but one is written here. The generators a preset runs are not: each generator's own
description says which presets run it and with how many samples (``presets={"full": 1}`` in its
node module, or in a plugin's), so that a new generator joins a preset without an edit here.
:attr:`Preset.fields` reads that membership from :mod:`sqlchorus.config.catalog`, which finds
the descriptions at run time, since this floor may not import the nodes that hold them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import comb
from typing import Any

from sqlchorus.config import catalog

BALANCED_VIEWS: tuple[str, ...] = (
    "mac-schema:full",
    "mac-schema:columns",
    "m-schema:tables",
    "m-schema:columns",
    "ddl:columns@m-schema",
)

BALANCED_QUESTION_TOKENS = 32_000
"""N-rep's published budget per question, 32K tokens: a schema too large for all of
``balanced``'s full-view calls to carry within it is narrowed for them
(``Settings.max_question_tokens``)."""

EVERY_CLUSTER = 50
"""``pairwise_max_clusters`` at its largest, more clusters than any preset draws candidates: no
cluster is left out, and ``max_pairwise_calls`` alone bounds the comparison's cost."""

BALANCED_PAIRWISE_CALLS = 2 * comb(len(BALANCED_VIEWS), 2)
"""N-rep's bound on its pairwise selection, 2·C(M,2) calls for its M candidates: every pair of its
five candidates, in both orders, whatever the vote's split."""

FULL_CANDIDATES = 10
"""The candidates ``full`` draws: one from each of its generators, N-rep's five views counted
each (``tests/test_presets.py`` checks this against the generators' own descriptions)."""

PAPER_SAMPLES = 7
"""CHASE-SQL's samples per generator, which its three generators' descriptions give for the
``paper`` preset."""
PAPER_CANDIDATES = 21
"""CHASE-SQL's candidate pool: seven samples from each of its three generators."""


@dataclass(frozen=True)
class Preset:
    """One preset.

    Attributes:
        name: its name.
        summary: one line on what it runs.
        settings: the ``Settings`` fields it sets besides the generators (fix rounds, views,
            selection, ...).
        selection_summary: how the answer is chosen, in words.
    """

    name: str
    summary: str
    settings: dict[str, Any] = field(default_factory=dict)
    selection_summary: str = ""

    @property
    def generators(self) -> dict[str, int]:
        """The generators it runs and the samples each draws: those whose description names
        this preset."""
        return catalog.preset_generators(self.name)

    @property
    def fields(self) -> dict[str, Any]:
        """Every ``Settings`` field it sets, its generators included."""
        return {"generators": self.generators, **self.settings}


PRESETS: dict[str, Preset] = {
    "fast": Preset(
        name="fast",
        summary="one generator (divide-and-conquer chain of thought) plus the fixer",
        settings={"fix_rounds": 3, "pairwise": "never"},
        selection_summary="the single candidate; no selection call",
    ),
    "balanced": Preset(
        name="balanced",
        summary="N-rep: five greedy candidates over five schema views",
        settings={"nrep_views": BALANCED_VIEWS, "fix_rounds": 1, "pairwise": "low-confidence",
                  "schema_level": "tables", "pairwise_max_clusters": EVERY_CLUSTER,
                  "max_pairwise_calls": BALANCED_PAIRWISE_CALLS, "max_question_tokens": BALANCED_QUESTION_TOKENS},
        selection_summary="execution-result voting; pairwise comparison of every result cluster only when the "
                          "vote is not confident",
    ),
    "full": Preset(
        name="full",
        summary="every generator of the graph",
        settings={"fix_rounds": 3, "pairwise": "always", "pairwise_max_clusters": EVERY_CLUSTER,
                  "max_pairwise_calls": 2 * FULL_CANDIDATES},
        selection_summary="CHASE-SQL pairwise selection over every result cluster, a round robin when it fits "
                          "the call budget, else a tournament (a ladder of the smaller clusters for the last "
                          "place of the largest ones' round robin)",
    ),
    "tiny": Preset(
        name="tiny",
        summary="one short direct prompt over the linked columns, for small local models",
        settings={
            "keywords": "question", "linking": "lexical", "grammar_scope": "from",
            "fix_rounds": 1, "schema_level": "columns", "pairwise": "never", "max_tokens": 96,
            # Should pairwise selection be turned on, a model this small cannot reason to a
            # verdict within 96 tokens: it gets the terse prompt.
            "selection_reasoning": False,
        },
        selection_summary="the single candidate; no selection call",
    ),
    "paper": Preset(
        name="paper",
        summary="CHASE-SQL's candidate pool: its three generators, seven samples each, diversified by "
                "temperature and a shuffled schema",
        settings={
            "sample_temperature": 0.5,
            "shuffle_schema": True,
            "fix_rounds": 3,
            "pairwise": "always",
            "pairwise_max_clusters": PAPER_CANDIDATES,
            "max_pairwise_calls": 2 * PAPER_CANDIDATES,
        },
        selection_summary="CHASE-SQL pairwise selection over every result cluster, a round robin when it fits "
                          "the call budget, else a tournament (a ladder of the smaller clusters for the last "
                          "place of the largest ones' round robin)",
    ),
}
PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)


def preset(name: str) -> Preset:
    """The preset called ``name``.

    Raises:
        ValueError: an unknown preset.
    """
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"Unknown preset {name!r}; choose one of {', '.join(PRESET_NAMES)}.") from None
