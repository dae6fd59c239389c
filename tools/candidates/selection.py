"""Choosing among candidate queries, without a model: clusters, votes, pairwise score sums.

Everything here is deterministic and works on plain dicts, so it serves the graph's
``select_candidate`` node, the standalone ``sqlchorus select`` and tests alike. The model's part
(the pairwise verdicts) comes in as data.

* **Clusters.** Candidates that ran are grouped by result fingerprint (equal rows as a bag).
  Candidates with rows vote; empty results vote only when no candidate returned rows. Clusters are
  ordered by size, then by their earliest member in candidate order, which is also the order in
  which every tie is broken.
* **Votes.** Every candidate given is a vote, including those that failed (a failed candidate is a
  vote for no answer), so a cluster's share is ``size / candidates``. :func:`vote` says whether the
  largest cluster is a confident answer; the rules and their defaults are explained in
  :mod:`sqlchorus.core.selection`.
* **Pairwise scores** follow CHASE-SQL's Algorithm 3 with one representative per cluster (its
  earliest member). In the algorithm every ordered pair of candidates scores a point for its
  winner, and a pair with equal results scores for the first of the two, so each member of a
  cluster of size ``s`` collects ``s - 1`` points from its own cluster. Members of one cluster
  share their execution result, so the representative's verdicts stand for every member: a
  member of cluster ``a`` gains ``size(b) * wins(a over b)`` from each other cluster ``b``, where
  ``wins`` counts the two orders in which the pair is shown (0, 1 or 2). This is the algorithm's
  sum, with one model comparison per pair of clusters and order instead of one per pair of
  candidates.
* **Tournament.** Which clusters meet, within a budget of model calls (two calls a pair, one
  per order). Without a budget, every pair of the largest ``max_clusters`` clusters meets: a round
  robin, the algorithm itself. With one, as many of the largest clusters enter as a ladder can
  reach (two calls per entrant after the first), so every entrant is compared at least once; the
  largest of them go straight to a final round robin and the others climb a ladder, smallest
  first, each match won by the algorithm's sum over its two orders, whose winner takes the last
  final place. The final round robin decides (:func:`play`).
* **Schema union.** The tables and columns two queries use (sqlglot), which is the schema the
  selection model sees for that pair.
* **Reasoned verdicts.** A selection model that reasons before its verdict names both candidates
  on the way; :func:`reasoned_verdict` reads only its final ``Answer: X``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlglot import exp

from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.engines.catalog import DatabaseSchema
from sqlchorus.tools.sql.errors import SqlError


def voting_pool(candidates: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The candidates that vote: those with rows, or the empty ones when none has rows."""
    with_rows = [c for c in candidates if c.get("status") == "ok"]
    return with_rows or [c for c in candidates if c.get("status") == "empty"]


def cluster(candidates: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Voting candidates grouped by fingerprint, largest first, ties by earliest member.

    Returns:
        ``[{"fingerprint", "members": [ids], "size", "status"}]``.
    """
    order = {c["id"]: i for i, c in enumerate(candidates)}
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for candidate in voting_pool(candidates):
        groups.setdefault(candidate.get("fingerprint") or f"id:{candidate['id']}", []).append(candidate)
    ranked = sorted(groups.values(), key=lambda g: (-len(g), min(order[c["id"]] for c in g)))
    return [
        {
            "fingerprint": g[0].get("fingerprint"),
            "members": [c["id"] for c in g],
            "size": len(g),
            "status": g[0].get("status"),
        }
        for g in ranked
    ]


def vote(
    clusters: Sequence[Mapping[str, Any]],
    total: int,
    *,
    confident_share: float,
    contender_share: float,
) -> dict[str, Any]:
    """Whether the largest cluster wins by votes alone.

    It does when it holds at least ``confident_share`` of the ``total`` votes, no other cluster
    is as large, and the runner-up holds less than ``contender_share``.

    Returns:
        ``{"confident", "votes", "share", "runner_up_share", "reason"}`` where ``votes`` lists
        the size of each cluster.
    """
    sizes = [int(c["size"]) for c in clusters]
    if not sizes:
        return {"confident": False, "votes": [], "share": 0.0, "runner_up_share": 0.0,
                "reason": "no candidate ran"}
    total = max(total, sum(sizes), 1)
    share = sizes[0] / total
    runner = sizes[1] / total if len(sizes) > 1 else 0.0
    tally = f"{sizes[0]} of {total} votes"
    if len(sizes) == 1:
        confident, reason = True, f"every candidate that ran agrees ({tally})"
    elif sizes[1] == sizes[0]:
        confident, reason = False, f"the two largest clusters tie ({sizes[0]} votes each of {total})"
    elif share < confident_share:
        confident, reason = False, f"the largest cluster has {tally}, below the {confident_share:.0%} needed"
    elif runner >= contender_share:
        confident, reason = False, (
            f"the runner-up has {sizes[1]} of {total} votes, at least the {contender_share:.0%} of a strong contender"
        )
    else:
        confident, reason = True, f"the largest cluster has {tally} and no strong contender"
    return {"confident": confident, "votes": sizes, "share": round(share, 4),
            "runner_up_share": round(runner, 4), "reason": reason}


def tournament(n_clusters: int, max_clusters: int, budget: int = 0) -> tuple[int, int]:
    """How many clusters enter the pairwise comparison and how many reach its final round robin.

    Args:
        n_clusters: clusters to choose from, largest first.
        max_clusters: the most clusters that may enter.
        budget: model calls at most; 0 sets no bound.

    Returns:
        ``(entrants, finalists)``: the first ``entrants`` clusters are compared; when
        ``finalists`` is less, the first ``finalists - 1`` go straight to the final and the
        others play a ladder for its last place. With fewer than two entrants nothing is compared.
    """
    entrants = min(n_clusters, max(max_clusters, 0))
    if budget <= 0 or entrants * (entrants - 1) <= budget:
        return entrants, entrants
    entrants = min(entrants, budget // 2 + 1)  # a ladder of e entrants costs 2 * (e - 1)
    if entrants < 2:
        return entrants, entrants
    finalists = 2
    while finalists < entrants and tournament_calls_of(entrants, finalists + 1) <= budget:
        finalists += 1
    return entrants, finalists


def tournament_calls_of(entrants: int, finalists: int) -> int:
    """Model calls of a tournament: two per ladder match, two per pair of the final."""
    return 2 * (entrants - finalists) + finalists * (finalists - 1)


def tournament_calls(n_clusters: int, max_clusters: int, budget: int = 0) -> int:
    """Model calls the comparison of ``n_clusters`` clusters makes, whatever the verdicts."""
    return tournament_calls_of(*tournament(n_clusters, max_clusters, budget))


def play(
    sizes: Sequence[int], max_clusters: int, budget: int, compare: Callable[[int, int], int | None],
) -> dict[str, Any]:
    """Play the tournament over clusters of these ``sizes`` (largest first).

    ``compare(first, second)`` asks for one verdict, the pair shown in that order, and returns
    the index of the winning cluster, or None for no usable verdict. Every pair is asked in both
    orders, one right after the other, the larger cluster (lower index) first. A ladder match is
    won by the higher of :func:`pairwise_scores` over its two clusters, a tie going to the larger
    cluster; the final is a round robin scored the same way, and its best finalist wins.

    Returns:
        ``verdicts`` (``{"first", "second", "winner", "stage"}``, stage ``ladder`` or ``final``,
        in the order asked), ``ladder`` (``{"a", "b", "winner"}`` per match), ``finalists``,
        ``entrants``, ``scores`` (the final's scores; clusters not in it keep their own-cluster
        points), ``winner`` and ``tied`` (the finalists sharing the best score).
    """
    entrants, finalists = tournament(len(sizes), max_clusters, budget)
    verdicts: list[dict[str, Any]] = []

    def meet(i: int, j: int, stage: str) -> list[dict[str, Any]]:
        both = [{"first": a, "second": b, "winner": compare(a, b), "stage": stage} for a, b in ((i, j), (j, i))]
        verdicts.extend(both)
        return both

    ladder: list[dict[str, int]] = []
    seats = list(range(finalists))
    if finalists < entrants:
        champion = entrants - 1
        for challenger in range(entrants - 2, finalists - 2, -1):
            scored = pairwise_scores([{"size": s} for s in sizes], meet(challenger, champion, "ladder"))
            # A tie goes to the challenger: the larger cluster (of equal sizes, the one with the
            # earlier candidate), as the final breaks its ties.
            winner = challenger if scored[challenger] >= scored[champion] else champion
            ladder.append({"a": challenger, "b": champion, "winner": winner})
            champion = winner
        seats = [*range(finalists - 1), champion]
    final: list[dict[str, Any]] = []
    for x in range(len(seats)):
        for y in range(x + 1, len(seats)):
            final += meet(seats[x], seats[y], "final")
    scores = pairwise_scores([{"size": s} for s in sizes], final)
    top = max((scores[i] for i in seats), default=0)
    tied = [i for i in sorted(seats) if scores[i] == top]
    return {
        "verdicts": verdicts, "ladder": ladder, "finalists": sorted(seats), "entrants": entrants,
        "scores": scores, "winner": tied[0] if tied else 0, "tied": tied,
    }


def pairwise_scores(
    clusters: Sequence[Mapping[str, Any]], verdicts: Sequence[Mapping[str, Any]]
) -> list[int]:
    """Algorithm 3's score of a member of each cluster (see the module docstring).

    Args:
        clusters: as :func:`cluster` returns them.
        verdicts: ``{"first": i, "second": j, "winner": i | j | None}`` per comparison, with
            cluster indices; a ``None`` winner (no usable answer) scores nothing.

    Returns:
        One score per cluster; clusters left out of every comparison keep their own-cluster
        points only.
    """
    sizes = [int(c["size"]) for c in clusters]
    scores = [s - 1 for s in sizes]
    for v in verdicts:
        winner = v.get("winner")
        if winner is None:
            continue
        loser = v["second"] if winner == v["first"] else v["first"]
        scores[winner] += sizes[loser]
    return scores


def tables_and_columns(sql: str, schema: DatabaseSchema, dialect: str = "sqlite") -> dict[str, list[str]]:
    """The tables and columns ``sql`` (in sqlglot's ``dialect``) uses, as schema links
    (``{table: [columns]}``).

    A qualified column belongs to its table or alias; an unqualified one to every table of the
    query that has a column of that name. Names the schema does not know are dropped later by
    :func:`sqlchorus.tools.schema.views.resolve_links`. SQL that does not parse uses nothing.
    """
    try:
        tree = sql_text.parse_one(sql, dialect=dialect)
    except SqlError:
        return {}
    if tree is None:
        return {}
    aliases: dict[str, str] = {}
    used: dict[str, set[str]] = {}
    for table in tree.find_all(exp.Table):
        aliases.setdefault(table.alias_or_name.lower(), table.name)
        used.setdefault(table.name, set())
    for column in tree.find_all(exp.Column):
        name = column.name
        if not name or name == "*":
            continue
        if column.table:
            owner = aliases.get(column.table.lower())
            if owner is not None:
                used.setdefault(owner, set()).add(name)
            continue
        for table_name in list(used):
            known = schema.table(table_name)
            if known is not None and any(c.name.lower() == name.lower() for c in known.columns):
                used[table_name].add(name)
    return {t: sorted(cols) for t, cols in used.items()}


def schema_union(sql_a: str, sql_b: str, schema: DatabaseSchema, dialect: str = "sqlite") -> dict[str, list[str]]:
    """The union of the tables and columns two queries use, as schema links."""
    union: dict[str, set[str]] = {}
    for sql in (sql_a, sql_b):
        for table, columns in tables_and_columns(sql, schema, dialect).items():
            union.setdefault(table, set()).update(columns)
    return {t: sorted(cols) for t, cols in union.items()}


_ANSWER_LINE = re.compile(
    r"^[\s>*_`#-]*(?:final\s+)?(?:answer|verdict)[\s*_`]*[:=][\s*_`\"'(\[]*(?:candidate\s+)?([AB])\b[\s*_`\"').\]]*$",
    re.IGNORECASE | re.MULTILINE,
)
_BARE_LETTER = re.compile(r"^[\s*_`\"'(\[]*(?:candidate\s+)?([AB])[\s*_`\"').\]:]*$", re.IGNORECASE)


def reasoned_verdict(text: str | None) -> str | None:
    """``"A"`` or ``"B"``: the verdict of an answer that reasons first and ends with a line
    ``Answer: X`` (the ``select_candidate_reasoning`` prompt's format).

    The verdict is the last such line, so a letter the reasoning mentions ("Candidate A counts
    rows twice", even an "Answer: A" it later corrects) never counts. Without one, a last line
    that is the letter alone is taken as the verdict (the model dropped the label); otherwise
    there is no verdict (None): the comparison scores nothing, as for any unusable answer, rather
    than a guess from letters in the reasoning.
    """
    text = (text or "").strip()
    found = _ANSWER_LINE.findall(text)
    if found:
        return found[-1].upper()
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and (m := _BARE_LETTER.match(lines[-1])):
        return m.group(1).upper()
    return None
