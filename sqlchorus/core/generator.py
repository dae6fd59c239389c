"""Generator: everything the rest of sqlchorus needs to know about one generator branch.

A generator is described once, by a ``GENERATOR = Generator(...)`` object in its own node module
(``nodes/generate_<name>.py``), or in a module of another package that names it under the entry
point group ``sqlchorus.generators``. The description says what the graph runs (node name and
function, the search subgraph if it has one), what a sample costs in model calls and candidates,
the paper it implements and where it departs from it, how the scripted oracle model answers its
prompts, and which presets run it with how many samples. Everything that lists generators reads
these descriptions: the registry and the graph assembly (:mod:`sqlchorus.graph.generators`), the
cost explanation (:mod:`sqlchorus.graph.expected_calls`), the scripted models
(:mod:`sqlchorus.testing.scripted_models`) and the presets (:mod:`sqlchorus.config.presets`, through
the discovery of :mod:`sqlchorus.config.catalog`).

The class sits on the core floor, below the nodes that declare it and above the settings its
cost functions read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlchorus.config.settings import Settings
from sqlchorus.core.updates import GeneratorUpdate

PLUGIN_ORDER = 1000
"""Where a generator that states no order of its own comes: after every shipped one."""


def one(settings: Settings) -> int:
    """One model call, or one candidate, per sample whatever the settings."""
    return 1


@dataclass(frozen=True)
class Generator:
    """One generator branch, as described by its node module.

    Attributes:
        key: its name in ``Settings.generators``, ``--generator`` and presets (``"din"``); also
            the prefix of its candidates' ids.
        node: the node name it runs as (``"generate_din"``).
        fn: the node function, ``(state, runtime)`` (plus ``search=`` when ``search`` is set).
        calls: model calls one sample makes, given the settings (the typical count).
        candidates: candidates one sample makes, given the settings.
        schema_views: of those calls, how many show the full schema view (the rest show a
            linked part, or none); None: every call does. A per-question token budget
            (``Settings.max_question_tokens``) is shared among these views.
        search: for a generator that runs a subgraph of its own, the function that compiles it,
            or its import path ``"package.module:function"`` when it lives on a floor above the
            nodes (LIST's subgraph is wired by the graph floor from nodes of their own, which a
            node module may not import); the registry resolves the path, and the node gets the
            compiled subgraph as its ``search`` argument.
        paper: the method it implements (``"CHASE-SQL"``), or None for one of the project's own.
        differs: where it departs from that paper, in one sentence (for ``--explain-preset``;
            docs/how-it-answers.md's table of nodes says the same at length).
        sampled: one of CHASE-SQL's generators, whose samples differ as the paper's do (the
            explanation of a preset then adds the note on sampling).
        detail: the settings that shape what it does, in words (``"views: ..."``), shown beside
            it when a preset is explained.
        oracle: how the scripted oracle model (:func:`sqlchorus.testing.oracle_model`) answers
            each prompt template this generator sends, by template name: ``"generation"``
            (divide-and-conquer reasoning, then the query), ``"generation:<name>"`` (reasoning,
            then the query after ``**Final Optimized SQL Query:**``), ``"generation:direct"``
            (the bare query), ``"synthesis:<name>"`` (examples over the prompt's schema), and
            DIN-SQL's, N-rep's and LIST's own roles (``"din:classification"``,
            ``"nrep:linking"``, ``"list:plan"``, ...); see :mod:`sqlchorus.testing.scripted_models`.
        presets: the presets that run it, with the samples each draws (``{"full": 1}``).
        order: where it comes among generators (in presets and in the registry); ties go
            by key.
    """

    key: str
    node: str
    fn: Callable[..., GeneratorUpdate]
    calls: Callable[[Settings], int] = one
    candidates: Callable[[Settings], int] = one
    schema_views: Callable[[Settings], int] | None = None
    search: Callable[[], Any] | str | None = None
    paper: str | None = None
    differs: str = ""
    sampled: bool = False
    detail: Callable[[Settings], str] | None = None
    oracle: Mapping[str, str] = field(default_factory=dict)
    presets: Mapping[str, int] = field(default_factory=dict)
    order: int = PLUGIN_ORDER

    def __post_init__(self) -> None:
        if not self.key or not self.node:
            raise ValueError("A generator needs a key and a node name.")
        bad = {name: n for name, n in self.presets.items() if not isinstance(n, int) or n < 1}
        if bad:
            raise ValueError(f"Generator {self.key!r}: samples per preset must be 1 or more, got {bad}.")

    @property
    def note(self) -> str:
        """Where it departs from its paper, led by the paper's name (what ``--explain-preset``
        prints for its node)."""
        return f"{self.paper or 'no paper'}: {self.differs}"
