"""fix_candidates: CHASE-SQL's query fixer, one round.

Every candidate that failed or returned no rows, and has fixer attempts left (beta, from
settings), is shown to the fixing model with its error or empty result; the corrected query
replaces it and goes back to ``check_candidates``. A fixer that fails, or answers without SQL,
uses up the attempt and the candidate keeps its last query. Candidates with the same query and
the same error make one call between them: they get the same prompt, so they share its answer.

As CHASE-SQL's fixer prompt does, the prompt opens with few-shot examples
(``prompts/fix_candidates_examples.json``, replaceable through ``Settings.examples_dir``): a
failed query over the bundled demo database, its error or empty result, and the reasoning and
``Final Answer`` that mend it. Each example's schema is rendered in the run's schema format, and
shows only the tables the example needs, which keeps the examples to a few hundred tokens.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.core.candidates import is_broken, updated
from sqlchorus.core.context import Context
from sqlchorus.core.llm import ModelCallError, call_model
from sqlchorus.core.state import SqlchorusState
from sqlchorus.tools import fewshot
from sqlchorus.tools.parsing import extract_sql
from sqlchorus.tools.values import values_text
from sqlchorus.tools.views import render_view

NODE = "fix_candidates"


def result_text(candidate: dict) -> str:
    """What the prompt says of a broken candidate's execution: its error, or that it was empty."""
    if candidate["status"] == "empty":
        return "The query ran but returned no rows (an empty result)."
    return f"Error: {candidate.get('error') or 'unknown error'}"


def examples_text(settings: Any) -> str:
    """The fixer's few-shot examples, laid out as the task is, each followed by its answer."""
    blocks = []
    for i, ex in enumerate(fewshot.examples(NODE, settings), 1):
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


def fix_candidates(state: SqlchorusState, runtime: Runtime[Context]) -> dict:
    context = runtime.context
    beta = context.settings.fix_rounds
    changed, usage, errors = [], [], []
    answers: dict[str, str | ModelCallError] = {}  # one call per distinct prompt in a round
    examples = examples_text(context.settings)
    for candidate in state.get("candidates") or []:
        if not is_broken(candidate) or candidate["fix_attempts"] >= beta:
            continue
        prompt = prompts.render(
            NODE,
            examples=examples,
            schema=state.get("schema_view") or "",
            values=values_text(state.get("values")),
            question=state["question"],
            evidence=state.get("evidence") or "(none)",
            sql=candidate["sql"] or "(no query was produced)",
            result=result_text(candidate),
        )
        history = [*candidate["history"], {"sql": candidate["sql"], "status": candidate["status"], "error": candidate["error"]}]
        attempts = candidate["fix_attempts"] + 1
        if prompt not in answers:
            try:
                answers[prompt], record = call_model(context, role="fixing", node=NODE, prompt=prompt)
                usage.append(record)
            except ModelCallError as e:
                answers[prompt] = e
                if e.usage:
                    usage.append(e.usage)
        text = answers[prompt]
        if isinstance(text, ModelCallError):
            errors.append({"node": NODE, "kind": "model", "message": f"{candidate['id']}: {text}"})
            changed.append(updated(candidate, fix_attempts=attempts))
            continue
        sql = extract_sql(text)
        if sql is None:
            errors.append({"node": NODE, "kind": "parse", "message": f"{candidate['id']}: the fixer's answer contained no SQL."})
            changed.append(updated(candidate, fix_attempts=attempts))
            continue
        changed.append(
            updated(
                candidate,
                sql=sql,
                status="unchecked",
                error=None,
                error_kind=None,
                fix_attempts=attempts,
                history=history,
            )
        )
    return {
        "candidates": changed,
        "fix_round": (state.get("fix_round") or 0) + 1,
        "usage": usage,
        "errors": errors,
    }
