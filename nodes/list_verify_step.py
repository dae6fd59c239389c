"""list_verify_step: LIST's verifier, run on the query the model wrote for the current step.

The verdict comes from :func:`sqlchorus.tools.steps.verify.verify_sql` (strong: every LIST sub-query
runs; weak: the whole query only). An empty result or a join without a condition is a warning:
when the model's repaired query is the same query again, the verdict is accepted, recorded, and
not reported again for that sub-query. On success the query is pushed on the verified path
(with the step's failed attempts before it) and the deepest verified state is kept as the best
one; on failure the attempt joins the step's ``failures``, which the next retry of the step
shows. Every query the search has not written before is kept in ``written``.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from sqlchorus.core.context import Context
from sqlchorus.core.list_search import ListState
from sqlchorus.core.updates import VerifyStepUpdate
from sqlchorus.tools.steps.verify import SOFT_KINDS, same_query, verify_sql

NODE = "list_verify_step"


def list_verify_step(state: ListState, runtime: Runtime[Context]) -> VerifyStepUpdate:
    """Verify the current attempt; on success, push it on the verified path."""
    context = runtime.context
    settings = context.settings
    attempt = state.get("attempt") or {}
    step = attempt.get("step", state.get("step", 0))
    previous = state.get("check") or {}
    accepted = set(state.get("accepted") or [])
    sql = attempt.get("sql")
    written = list(state.get("written") or [])
    update: VerifyStepUpdate = {}
    dialect = context.db.dialect
    if sql and not any(same_query(sql, w, dialect) for w in written):
        update["written"] = [*written, sql]
    check = verify_sql(
        sql,
        context.db,
        schema=context.schema,
        verifier=settings.list_verifier,
        growth=settings.list_join_growth,
        accepted=accepted,
    )
    if (
        check["kind"] in SOFT_KINDS
        and attempt.get("kind") == "reprompt"
        and previous.get("kind") == check["kind"]
        and same_query(previous.get("sql"), check["sql"], dialect)
    ):
        # The model saw the warning and kept its query: accept it as intended.
        accepted.add(check["failing"])
        update["accepted"] = sorted(accepted)
        check = {**check, "ok": True, "kind": "ok", "warning": f"{check['error']} (kept by the model)"}
    check["step"] = step
    plan = state.get("plan") or []
    update["check"] = check
    update["trail"] = [{
        "plan": state.get("plan_round", 1),
        "step": step + 1,
        "kind": attempt.get("kind", "write"),
        "ok": check["ok"],
        "verdict": check["kind"],
        "error": (check.get("error") or check.get("warning") or "")[:200] or None,
    }]
    if not check["ok"]:
        failure = {k: check.get(k) for k in ("sql", "kind", "error", "failing")}
        update["failures"] = [*(state.get("failures") or []), failure]
    else:
        verified = list(state.get("verified") or [])[:step]
        verified.append({"step": step, "sql": check["sql"], "failures": list(state.get("failures") or [])})
        update.update({"verified": verified, "step": step + 1, "local_attempts": 0, "failures": []})
        best = state.get("best")
        if best is None or len(verified) >= best["verified"]:
            update["best"] = {
                "verified": len(verified),
                "steps": len(plan),
                "sql": check["sql"],
                "plan": state.get("plan_round", 1),
            }
    return update
