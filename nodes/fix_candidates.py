"""fix_candidates: CHASE-SQL's query fixer, one round.

Every candidate that failed or returned no rows, and has fixer attempts left (beta, from
settings), is shown to the fixing model with its error or empty result; the corrected query
replaces it and goes back to ``check_candidates``. A fixer that fails, or answers without SQL,
uses up the attempt and the candidate keeps its last query. Candidates with the same query and
the same error make one call between them: they get the same prompt, so they share its answer.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.core.candidates import is_broken, updated
from sqlchorus.core.context import Context
from sqlchorus.core.llm import ModelCallError, call_model
from sqlchorus.core.state import SqlchorusState
from sqlchorus.tools.parsing import extract_sql
from sqlchorus.tools.values import values_text

NODE = "fix_candidates"


def _result_text(candidate: dict) -> str:
    if candidate["status"] == "empty":
        return "The query ran but returned no rows (an empty result)."
    return f"Error: {candidate.get('error') or 'unknown error'}"


def fix_candidates(state: SqlchorusState, runtime: Runtime[Context]) -> dict:
    context = runtime.context
    beta = context.settings.fix_rounds
    changed, usage, errors = [], [], []
    answers: dict[str, str | ModelCallError] = {}  # one call per distinct prompt in a round
    for candidate in state.get("candidates") or []:
        if not is_broken(candidate) or candidate["fix_attempts"] >= beta:
            continue
        prompt = prompts.render(
            NODE,
            schema=state.get("schema_view") or "",
            values=values_text(state.get("values")),
            question=state["question"],
            evidence=state.get("evidence") or "(none)",
            sql=candidate["sql"] or "(no query was produced)",
            result=_result_text(candidate),
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
