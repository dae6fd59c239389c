"""fix_candidates: CHASE-SQL's query fixer, one round.

Every candidate that failed or returned no rows, and has fixer rounds left (beta, from
settings), is shown to the fixing model with its error or empty result, and with every earlier
attempt of that candidate and its error (``history``, oldest first); the corrected query
replaces it and goes back to ``check_candidates``. So no two rounds of one candidate send the
same prompt. The first round samples as the run does; later rounds are retries and sample with
:func:`~sqlchorus.core.diversity.retry_sampling` (LIST's temperature 0.8 and top-p 0.95 by
default), which the response cache never answers.

``fix_attempts`` counts the rounds that produced a new query. A round whose answer is a query
the candidate already tried stops the fixer for that candidate (it would only fail again); one
that fails, or answers without SQL, uses up the round and the candidate keeps its last query
(the next prompt says how many answers had no SQL). ``meta["fix"]`` keeps the rounds spent and
why the fixer stopped (:func:`~sqlchorus.core.candidates.fix_record`). Candidates with the same
prompt in a round make one call between them and share its answer.

As CHASE-SQL's fixer prompt does, the prompt opens with few-shot examples
(``prompts/fix_candidates_examples.json``, replaceable through ``Settings.examples_dir``): a
failed query over the bundled demo database, its error or empty result, and the reasoning and
``Final Answer`` that mend it. Each example's schema is rendered in the run's schema format, and
shows only the tables the example needs: the three examples come to about 1,000 tokens by the
budget's counter (1,027 in m-schema, 1,526 in json).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.core.candidates import can_fix, fix_record, tried, updated
from sqlchorus.core.context import Context
from sqlchorus.core.diversity import retry_sampling
from sqlchorus.core.llm import ModelCallError, call_model, model_error
from sqlchorus.core.state import Candidate, ErrorRecord, SqlchorusState, UsageRecord
from sqlchorus.core.updates import FixUpdate
from sqlchorus.tools.examples import fewshot
from sqlchorus.tools.models.parsing import extract_sql
from sqlchorus.tools.values.shown import values_text
from sqlchorus.tools.schema.views import render_view

NODE = "fix_candidates"


def result_text(candidate: Mapping[str, Any]) -> str:
    """What the prompt says of a broken candidate's execution: its error, or that it was empty."""
    if candidate["status"] == "empty":
        return "The query ran but returned no rows (an empty result)."
    return f"Error: {candidate.get('error') or 'unknown error'}"


def earlier_text(candidate: Mapping[str, Any], no_sql: int = 0) -> str:
    """The candidate's earlier attempts and their results, oldest first, and how many of the
    fixer's answers had no SQL: empty before the first round of a candidate with no history."""
    lines = []
    if candidate["history"]:
        lines.append("Earlier attempts at this query also failed (oldest first); do not write any of them again:")
        for n, attempt in enumerate(candidate["history"], 1):
            lines.append(f"Attempt {n}:\n{attempt.get('sql') or '(no query was produced)'}\nIts result: {result_text(attempt)}")
    if no_sql:
        lines.append(
            f"{no_sql} earlier answer(s) to this task contained no SQL query: end the answer with "
            "Final Answer: and the query on one line."
        )
    return "".join(f"{line}\n" for line in lines)


def examples_text(settings: Any, dialect: str = "sqlite") -> str:
    """The fixer's few-shot examples, laid out as the task is, each followed by its answer; their
    SQL and results those of the database's ``dialect``."""
    blocks = []
    for i, ex in enumerate(fewshot.examples(NODE, settings, dialect), 1):
        schema = render_view(fewshot.schema_of(ex["schema"]), settings.schema_format, sample_values=0)
        values = values_text({key: [{"value": v} for v in shown] for key, shown in (ex.get("values") or {}).items()})
        blocks.append(
            f"Example {i}\n**************************\nTable creation statements\n{schema}\n"
            f"**************************\nValues found in the database that the question may refer to:\n{values}\n"
            f"**************************\nThe original question is:\nQuestion:\n{ex['question']}\n"
            f"Evidence:\n{ex.get('evidence') or '(none)'}\nThe SQL query executed was:\n{ex['sql']}\n"
            f"The execution result:\n{ex['result']}\n**************************\n{ex['answer']}"
        )
    return "\n\n".join(blocks)


def fix_candidates(state: SqlchorusState, runtime: Runtime[Context]) -> FixUpdate:
    context = runtime.context
    beta = context.settings.fix_rounds
    changed: list[Candidate] = []
    usage: list[UsageRecord] = []
    errors: list[ErrorRecord] = []
    answers: dict[tuple[str, bool], str | ModelCallError] = {}  # one call per distinct request in a round
    examples = examples_text(context.settings, context.db.dialect)
    for candidate in state.get("candidates") or []:
        if not can_fix(candidate, beta):
            continue
        record = fix_record(candidate)
        round_ = record["rounds"] + 1
        retry = round_ > 1
        prompt = prompts.render(
            NODE,
            examples=examples,
            schema=state.get("schema_view") or "",
            values=values_text(state.get("values")),
            question=state["question"],
            evidence=state.get("evidence") or "(none)",
            earlier=earlier_text(candidate, record["no_sql"]),
            sql=candidate["sql"] or "(no query was produced)",
            result=result_text(candidate),
        )
        meta = dict(candidate.get("meta") or {})
        fix = {"rounds": round_, "no_sql": record["no_sql"], "stopped": None}
        if (prompt, retry) not in answers:
            try:
                answers[prompt, retry], call = call_model(
                    context, role="fixing", node=NODE, prompt=prompt, **(retry_sampling(context) if retry else {}),
                )
                usage.append(call)
            except ModelCallError as e:
                answers[prompt, retry] = e
                if e.usage:
                    usage.append(e.usage)
        text = answers[prompt, retry]
        if isinstance(text, ModelCallError):
            errors.append(model_error(NODE, text, prefix=f"{candidate['id']}: "))
            changed.append(updated(candidate, meta={**meta, "fix": fix}))
            continue
        sql = extract_sql(text)
        if sql is None:
            errors.append({"node": NODE, "kind": "parse", "message": f"{candidate['id']}: the fixer's answer contained no SQL."})
            changed.append(updated(candidate, meta={**meta, "fix": {**fix, "no_sql": fix["no_sql"] + 1}}))
            continue
        if tried(candidate, sql, context.db.dialect):
            # The model repeated a query that already failed: another round would only repeat it.
            fix["stopped"] = f"round {round_} answered with a query already tried"
            changed.append(updated(candidate, meta={**meta, "fix": fix}))
            continue
        history = [*candidate["history"], {"sql": candidate["sql"], "status": candidate["status"], "error": candidate["error"]}]
        changed.append(
            updated(
                candidate,
                sql=sql,
                status="unchecked",
                error=None,
                error_kind=None,
                fix_attempts=candidate["fix_attempts"] + 1,
                history=history,
                meta={**meta, "fix": fix},
            )
        )
    return {
        "candidates": changed,
        "fix_round": (state.get("fix_round") or 0) + 1,
        "usage": usage,
        "errors": errors,
    }
