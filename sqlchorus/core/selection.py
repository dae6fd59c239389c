"""Selection: clusters, confidence-aware voting, and CHASE-SQL's pairwise selection agent.

Used by the ``select_candidate`` node and by standalone selection (:mod:`sqlchorus.runs.standalone_selection`) alike.

1. **Clusters.** Candidates that ran are grouped by execution result
   (:func:`sqlchorus.tools.candidates.selection.cluster`).
2. **Confidence-aware voting** (N-rep). Every candidate is a vote. The largest cluster is taken
   without any model call when it holds at least ``vote_confident_share`` of the votes, no other
   cluster ties it, and the runner-up holds less than ``vote_contender_share``. The defaults,
   0.4 and 0.4, are N-rep's rules for its five candidates made into shares: N-rep calls the
   model when all five candidates get one vote each, when two get two votes each, and when the
   top has three and another two; otherwise the vote stands. Over the seven ways five votes can
   split, these thresholds reproduce that exactly:

   =============  ===========  ===============  ==========================================
   votes          top share    runner-up share  decision (N-rep and these defaults)
   =============  ===========  ===============  ==========================================
   5              1.0          0.0              vote
   4, 1           0.8          0.2              vote
   3, 2           0.6          0.4              model (a strong contender)
   3, 1, 1        0.6          0.2              vote
   2, 2, 1        0.4          0.4              model (a tie)
   2, 1, 1, 1     0.4          0.2              vote
   1, 1, 1, 1, 1  0.2          0.2              model (no agreement)
   =============  ===========  ===============  ==========================================

   As shares they carry over to other candidate counts: with three candidates, 2-1 stands and
   1-1-1 goes to the model; with 21 (CHASE-SQL's count), the top cluster needs 9 votes and the
   runner-up must have at most 8. ``pairwise="always"`` skips the vote (CHASE-SQL compares
   whenever results disagree); ``pairwise="never"`` never calls the model.
3. **Pairwise selection** (CHASE-SQL's Algorithm 3). The earliest member of each of the
   ``pairwise_max_clusters`` largest clusters stands for its cluster; every pair of them is shown
   to the selection model in both orders, over the union of the tables and columns the two
   queries use, with a preview of each result; scores are summed as the algorithm sums them
   (:func:`sqlchorus.tools.candidates.selection.pairwise_scores`) and the highest wins, ties going to the
   larger cluster, then the earlier candidate. A verdict the model does not give (an error, an
   answer that is neither A nor B) scores nothing and is recorded. With
   ``selection_reasoning`` (the default) the model, used as is rather than fine-tuned as
   CHASE-SQL's selector is, reasons briefly first and ends with ``Answer: A`` or ``Answer: B``,
   the only part read (:func:`sqlchorus.tools.candidates.selection.reasoned_verdict`); without it, the
   paper's prompt asks for the letter alone, as a selector fine-tuned on exported pairs expects. With a call budget
   (``max_pairwise_calls``) that every pair would exceed, the comparison is a tournament
   (:func:`sqlchorus.tools.candidates.selection.play`): the largest clusters meet in a final round robin
   scored as above, and the smaller ones climb a ladder for its last place, so that every
   cluster is compared at least once while the budget allows two calls per cluster; the record
   keeps each verdict's stage and the tournament (``selection["tournament"]``).

Without a selection model (the standalone selector called with none) an unconfident vote falls
back to the largest cluster, with the same tie-break, and the selection says so. Every step is
in the selection record (``state["selection"]`` in the graph) (clusters, votes, the vote's reasoning, each pairwise verdict, scores,
the tournament, confidence, model calls) and on the node's span as ``vote`` and ``pairwise`` events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace

from sqlchorus import prompts
from sqlchorus.core.budget import schema_view
from sqlchorus.core.context import Context
from sqlchorus.core.llm import ModelCallError, call_model
from sqlchorus.core.state import ErrorRecord, Selection, UsageRecord
from sqlchorus.core.updates import SelectUpdate
from sqlchorus.tools.candidates import selection as sel
from sqlchorus.tools.engines.sqlite import SqlError
from sqlchorus.tools.models.parsing import parse_verdict
from sqlchorus.tools.candidates.results import preview

PROMPT = "select_candidate"
"""The selection prompt (the paper's Figure 23), also the graph node's name."""
REASONING_PROMPT = "select_candidate_reasoning"
"""The same comparison, asking for brief reasoning before a final ``Answer: A`` / ``Answer: B``:
untuned models pick the right one of a pair far less often than a tuned selector (the paper's
Table 5), and a terse letter leaves them no room to compare the two."""
PREVIEW_ROWS = 10

def pair_schema(context: Context, sql_a: str, sql_b: str, question: str = "", evidence: str = "") -> str:
    """The schema view of the union of what the two queries use (the full view, narrowed to the
    schema budget for ``question``, if nothing)."""
    links = sel.schema_union(sql_a, sql_b, context.schema, getattr(context.db, "dialect", "sqlite"))
    state = {"question": question, "evidence": evidence, "links": links}
    if not links:
        return schema_view(context, state)
    return schema_view(context, state, level="columns", links=links)


def selection_prompt(schema: str, question: str, evidence: str, a: tuple[str, str], b: tuple[str, str],
                     *, reasoning: bool = False) -> str:
    """The selection agent's prompt (the paper's Figure 23), for candidates ``(sql, result)``;
    ``reasoning`` asks for brief reasoning before the verdict (:data:`REASONING_PROMPT`)."""
    return prompts.render(
        REASONING_PROMPT if reasoning else PROMPT, schema=schema, question=question, evidence=evidence or "(none)",
        sql_a=a[0], result_a=a[1], sql_b=b[0], result_b=b[1],
    )


def _result_text(context: Context, sql: str) -> str:
    try:
        result = context.db.execute(sql, max_rows=PREVIEW_ROWS + 1)
    except SqlError as e:
        return f"Error: {e.message}"
    return preview(result.columns, result.rows, limit=PREVIEW_ROWS)


def _event(name: str, attributes: Mapping[str, Any]) -> None:
    clean = {k: v for k, v in attributes.items() if isinstance(v, (str, bool, int, float))}
    trace.get_current_span().add_event(name, clean)


def choose(
    context: Context,
    *,
    question: str,
    evidence: str,
    candidates: Sequence[Mapping[str, Any]],
    node: str = PROMPT,
) -> SelectUpdate:
    """Run the selection on checked candidates.

    ``context.models`` may lack a ``selection`` model; then an unconfident vote falls back to the
    largest cluster. Candidates need ``id``, ``sql``, ``status`` and ``fingerprint``.

    Returns:
        ``{"selection": {...}, "usage": [...], "errors": [...]}``; ``selection["chosen"]`` is a
        candidate id or None when no candidate ran.
    """
    settings = context.settings
    clusters = sel.cluster(candidates)
    total = len(candidates)
    outcome = sel.vote(
        clusters, total,
        confident_share=settings.vote_confident_share,
        contender_share=settings.vote_contender_share,
    )
    for c in clusters:
        c["share"] = round(c["size"] / max(total, 1), 4)
    _event("vote", {"votes": str(outcome["votes"]), "confident": outcome["confident"], "reason": outcome["reason"]})
    selection: Selection = {
        "clusters": clusters, "votes": outcome["votes"], "vote": outcome, "pairwise": [], "scores": {},
        "model_calls": 0, "chosen": None, "confidence": 0.0,
    }
    usage: list[UsageRecord] = []
    errors: list[ErrorRecord] = []
    if not clusters:
        selection.update({"method": "none", "reason": "no candidate query ran"})
        return {"selection": selection, "usage": usage, "errors": errors}

    by_id = {c["id"]: c for c in candidates}
    winner = 0
    if len(clusters) == 1:
        selection.update({"method": "vote", "reason": outcome["reason"]})
    elif settings.pairwise == "never":
        selection.update({"method": "vote",
                          "reason": f"largest cluster by vote ({outcome['reason']}); pairwise selection is off"})
    elif settings.pairwise == "low-confidence" and outcome["confident"]:
        selection.update({"method": "vote", "reason": f"confident vote: {outcome['reason']}"})
    elif "selection" not in context.models or context.models.get("selection") is None:
        selection.update({
            "method": "fallback",
            "reason": f"vote not confident ({outcome['reason']}) and no selection model is configured: "
                      "took the largest cluster (ties go to the earliest candidate)",
        })
    else:
        winner = _pairwise(context, question, evidence, clusters, by_id, selection, usage, errors, node)
    chosen = clusters[winner]
    selection["chosen"] = chosen["members"][0]
    selection["chosen_cluster"] = winner
    selection["confidence"] = chosen["share"]
    span = trace.get_current_span()
    span.set_attribute("sqlchorus.selection.method", selection["method"])
    span.set_attribute("sqlchorus.selection.confidence", selection["confidence"])
    span.set_attribute("sqlchorus.selection.model_calls", selection["model_calls"])
    return {"selection": selection, "usage": usage, "errors": errors}


def _pairwise(context, question, evidence, clusters, by_id, selection, usage, errors, node) -> int:
    settings = context.settings
    reasoning = settings.selection_reasoning
    reps = [by_id[c["members"][0]] for c in clusters]
    results: dict[int, str] = {}

    records: list[dict[str, Any]] = []  # one per call, in the order play() makes them

    def compare(first: int, second: int) -> int | None:
        a, b = reps[first], reps[second]
        for i in (first, second):
            if i not in results:
                results[i] = _result_text(context, reps[i]["sql"])
        prompt = selection_prompt(
            pair_schema(context, a["sql"], b["sql"], question, evidence), question, evidence,
            (a["sql"], results[first]), (b["sql"], results[second]), reasoning=reasoning,
        )
        verdict: dict[str, Any] = {"a": a["id"], "b": b["id"], "winner": None}
        selection["model_calls"] += 1
        winner = None
        try:
            text, record = call_model(context, role="selection", node=node, prompt=prompt)
        except ModelCallError as e:
            if e.usage:
                usage.append(e.usage)
            verdict["error"] = str(e)
            errors.append({"node": node, "kind": "model", "message": f"{a['id']} vs {b['id']}: {e}"})
        else:
            usage.append(record)
            letter = sel.reasoned_verdict(text) if reasoning else parse_verdict(text)
            # A reasoned answer ends with its verdict: its end is what explains the verdict.
            verdict["answer"] = text.strip()[-400:] if reasoning else text.strip()[:200]
            if letter is None:
                missing = "ended with no 'Answer: A' or 'Answer: B' line" if reasoning else "named neither A nor B"
                verdict["error"] = f"the answer {missing}"
                errors.append({"node": node, "kind": "parse", "message": f"{a['id']} vs {b['id']}: the selection model's answer {missing}."})
            else:
                winner = first if letter == "A" else second
                verdict["winner"] = reps[winner]["id"]
        records.append(verdict)
        _event("pairwise", {"a": a["id"], "b": b["id"], "winner": verdict["winner"] or "none"})
        return winner

    budget = settings.max_pairwise_calls
    played = sel.play([c["size"] for c in clusters], settings.pairwise_max_clusters, budget, compare)
    for record, verdict in zip(records, played["verdicts"]):
        record["stage"] = verdict["stage"]
    winner, tied, scores = played["winner"], played["tied"], played["scores"]
    selection["pairwise"] = records
    selection["scores"] = {reps[i]["id"]: scores[i] for i in range(len(clusters))}
    selection["tournament"] = {
        "budget": budget or None,
        "entrants": played["entrants"],
        "finalists": [reps[i]["id"] for i in played["finalists"]],
        "ladder": [{"a": reps[m["a"]]["id"], "b": reps[m["b"]]["id"], "winner": reps[m["winner"]]["id"]}
                   for m in played["ladder"]],
    }
    left_out = len(clusters) - played["entrants"]
    bound = f"max_pairwise_calls={budget}, " if budget else ""
    note = (f"; {left_out} smaller cluster(s) not compared ({bound}pairwise_max_clusters={settings.pairwise_max_clusters})"
            if left_out else "")
    ladder = ""
    if played["ladder"]:
        ladder = (f"; within {budget} calls, {len(played['ladder']) + 1} cluster(s) played a ladder of "
                  f"{len(played['ladder'])} match(es) for the last of {len(played['finalists'])} final place(s)")
    tie = f"; tie among {', '.join(reps[i]['id'] for i in tied)} broken by cluster size, then candidate order" if len(tied) > 1 else ""
    final = [v for v in played["verdicts"] if v["stage"] == "final"]
    if not any(v["winner"] is not None for v in played["verdicts"]):
        method, why = "fallback", "no pairwise verdict could be used: took the largest cluster"
    else:
        method, why = "pairwise", f"highest pairwise score {scores[winner]} over {len(final)} comparison(s)"
        if played["ladder"]:
            why += f" of the final round ({len(played['verdicts'])} in all)"
    vote_note = selection["vote"]["reason"]
    prefix = f"vote not confident ({vote_note}); " if settings.pairwise == "low-confidence" else ""
    selection.update(method=method, reason=f"{prefix}{why}{ladder}{tie}{note}")
    return winner
