"""LIST samples at the paper's setting throughout, and a search that gives up offers no partial answer.

Searches run through the ``generate_list`` node with a scripted model over the demo database, as
in ``tests/test_generate_list.py``.
"""

from __future__ import annotations

import re

from langgraph.runtime import Runtime
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conftest import chat_calls, sampled_model
from sqlchorus.config.settings import Settings
from sqlchorus.core.context import Context
from sqlchorus.graph.list_graph import build_list_graph
from sqlchorus.nodes import list_plan, list_reprompt, list_write_step
from sqlchorus.nodes.generate_list import candidate_of, generate_list
from sqlchorus.runs.demo import demo_db_path
from sqlchorus.testing import prompt_text, role_of_call
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.schema.introspect import introspect

QUESTION = "How many products in the Kitchen category cost more than 20?"
PLAN = [
    "Take the rows of products AS p.",
    "Join categories AS c on p.category_id = c.category_id.",
    "Keep only the rows where c.name = 'Kitchen' AND p.unit_price > 20.",
    "Return COUNT(*).",
]
FROM = "SELECT * FROM products AS p"
JOIN = FROM + " JOIN categories AS c ON p.category_id = c.category_id"
WHERE = JOIN + " WHERE c.name = 'Kitchen' AND p.unit_price > 20"
FINAL = ("SELECT COUNT(*) FROM products AS p JOIN categories AS c ON p.category_id = c.category_id "
         "WHERE c.name = 'Kitchen' AND p.unit_price > 20")
GOOD = {1: FROM, 2: JOIN, 3: WHERE, 4: FINAL}
BROKEN_JOIN = FROM + " JOIN categories AS c ON p.categoryid = c.category_id"

PAPER = (0.8, 0.95)  # LIST's temperature and top-p (its Appendix A)


class Script:
    """Answers LIST prompts from lists: ``plan`` for plans, ``("write", n)`` and ``("repair", n)``
    for step ``n``; each call takes the next answer, the last one repeats."""

    def __init__(self, answers: dict):
        self.answers = {k: list(v) for k, v in answers.items()}
        self.calls: list = []

    def __call__(self, messages) -> str:
        if role_of_call() == "list:plan":
            key = "plan"
        else:
            task = prompt_text(messages).split("======= Your task =======")[-1]
            found = re.search(r"(write|repair) step (\d+) of \d+", task)
            assert found, task[-500:]
            key = (found.group(1), int(found.group(2)))
        self.calls.append(key)
        queue = self.answers[key]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        if key == "plan":
            return "\n".join(f"[[Step {n}: {s}]]" for n, s in enumerate(answer, 1))
        return f"Question analysis: ...\nResult:\n```sql\n{answer}\n```"


def search(answers: dict, settings: Settings | None = None, sample: int = 0):
    """One LIST search; returns its update, the model (which keeps each call's sampling) and
    each call's ``(node, temperature, top_p, cache hit)`` from its spans."""
    model = sampled_model(Script(answers))
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    settings = settings or Settings(trace_dir=None, cache=False)
    with GuardedDatabase(demo_db_path()) as db:
        context = Context(db=db, models={"generation": model}, settings=settings,
                          schema=introspect(db, sample_values=0), tracer=provider.get_tracer("test"))
        update = generate_list(
            {"question": QUESTION, "evidence": "", "schema_view": "(schema)", "values": {}, "generator": "list",
             "sample": sample},
            Runtime(context=context), search=build_list_graph(),
        )
    return update, model, chat_calls(spans)


STRAIGHT = {"plan": [PLAN], **{("write", n): [sql] for n, sql in GOOD.items()}}


def test_list_samples_at_the_papers_temperature_throughout():
    # The run's own sampling is greedy, and later samples of other generators are warm; LIST's
    # every call, the first plan and first writes of its first sample too, samples as the paper.
    settings = Settings(trace_dir=None, cache=False, temperature=0.0, sample_temperature=0.3)
    assert (settings.retry_temperature, settings.retry_top_p) == PAPER
    for sample in (0, 1):
        update, model, calls = search(STRAIGHT, settings, sample=sample)
        assert update["candidates"][0]["sql"] == FINAL
        assert [c[0] for c in calls] == ["list_plan"] + ["list_write_step"] * 4
        assert {c[1:3] for c in calls} == {PAPER}, sample
        assert {s[1:] for s in model.sampling} == {PAPER}, sample  # what the model itself was asked
    # The setting is retry_temperature and retry_top_p, whatever they are set to.
    update, model, calls = search(STRAIGHT, settings.replace(retry_temperature=0.6, retry_top_p=0.9))
    assert {c[1:3] for c in calls} == {(0.6, 0.9)}
    assert {s[1:] for s in model.sampling} == {(0.6, 0.9)}


def test_list_calls_sample_at_the_papers_setting(monkeypatch):
    sent: list[tuple] = []

    def spy(module):
        real = module.call_model

        def call_model(context, **call):
            sent.append((call["node"], call.get("sample"), call.get("temperature"), call.get("top_p")))
            return real(context, **call)

        monkeypatch.setattr(module, "call_model", call_model)

    for module in (list_plan, list_write_step, list_reprompt):
        spy(module)
    # Step 2 keeps failing: reprompts, a traceback to step 1, and writes after it, all retries.
    answers = {"plan": [PLAN], ("write", 1): [FROM], ("write", 2): [BROKEN_JOIN], ("repair", 2): [BROKEN_JOIN]}
    settings = Settings(trace_dir=None, cache=False, list_max_global_attempts=8)
    for sample in (0, 3):
        sent.clear()
        update, _, calls = search(answers, settings, sample=sample)
        nodes = [s[0] for s in sent]
        assert nodes == [c[0] for c in calls]
        first_pass = nodes.index("list_reprompt")
        assert nodes[:first_pass] == ["list_plan", "list_write_step", "list_write_step"]
        assert "list_write_step" in nodes[first_pass:]  # a write after the traceback: a retry too
        # A first-pass call is a draw of its own sample (reproducible, cacheable by its number)...
        assert {s[1:] for s in sent[:first_pass]} == {(sample, *PAPER)}, sample
        # ... and a retry is always a fresh draw: no sample number.
        assert {s[1:] for s in sent[first_pass:]} == {(None, *PAPER)}, sample
        assert len(sent) == 9  # a plan and the search's 8 queries
        assert update["candidates"][0]["meta"]["list"]["tracebacks"] >= 1


def test_a_give_up_offers_no_partial_select_star():
    stuck = JOIN + " WHERE c.nme = 'Kitchen'"
    settings = Settings(trace_dir=None, cache=False, list_max_global_attempts=8)
    update, _, _ = search({"plan": [PLAN], ("write", 1): [FROM], ("write", 2): [JOIN], ("write", 3): [stuck],
                           ("repair", 3): [stuck]}, settings)
    (candidate,) = update["candidates"]
    # The deepest verified step is a SELECT * of a join: a partial state, not an answer.
    assert candidate["sql"] == "" and candidate["status"] == "error"
    assert candidate["error"] == (
        "LIST gave up before verifying every step (only 2 of 4 steps were verified): global attempts spent (8 of 8)"
    )
    assert candidate["error_kind"] == "list"
    meta = candidate["meta"]["list"]
    assert meta["deepest_verified"] == {"verified": 2, "steps": 4, "sql": JOIN}
    assert meta["deepest_verified"]["sql"].startswith("SELECT * FROM")
    assert not meta["complete"] and meta["steps_verified"] == 2
    assert meta["gave_up"] == "global attempts spent (8 of 8)"
    # The reasoning shows the plan without claiming any step's query as the answer's.
    assert JOIN not in candidate["reasoning"] and "Step 2: " + PLAN[1] in candidate["reasoning"]
    # A search that verifies every step answers with its last query and has no deepest_verified.
    done, _, _ = search(STRAIGHT, settings)
    (complete,) = done["candidates"]
    assert complete["sql"] == FINAL and complete["status"] == "unchecked"
    assert complete["meta"]["list"]["deepest_verified"] is None


def test_a_give_up_whose_deepest_state_completed_its_plan_still_answers():
    settings = Settings(trace_dir=None, cache=False)
    halt = "generation failed: The generation model (scripted) failed: provider down"
    # A second plan was under way (one of its three steps verified) when its model call failed;
    # the deepest state verified so far is the last step of the first plan, a complete path.
    final = {
        "plan": ["Take the rows of products AS p.", "Join categories.", "Return COUNT(*)."],
        "plan_round": 2,
        "verified": [{"step": 0, "sql": FROM, "failures": []}],
        "best": {"verified": 2, "steps": 2, "sql": FINAL, "plan": 1},
        "halt": halt,
        "global_attempts": 5,
    }
    candidate = candidate_of(final, 0, settings)
    assert candidate["sql"] == FINAL and candidate["status"] == "unchecked"
    assert candidate["error"] is None
    meta = candidate["meta"]["list"]
    assert not meta["complete"] and meta["gave_up"] == halt
    assert meta["deepest_verified"] == {"verified": 2, "steps": 2, "sql": FINAL}
    assert meta["steps_verified"] == 2
    # The same give-up whose deepest state was only part of a longer plan offers nothing.
    partial = candidate_of({**final, "best": {"verified": 2, "steps": 3, "sql": JOIN, "plan": 1}}, 0, settings)
    assert partial["sql"] == "" and partial["status"] == "error"
    assert partial["error"] == f"LIST gave up before verifying every step (only 2 of 3 steps were verified): {halt}"
