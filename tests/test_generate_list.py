"""The LIST subgraph: its verifier on fixture queries, and scripted searches that drive each edge.

A search is run through the ``generate_list`` node with a scripted model over the demo database;
its trace is summarised into the list of routing decisions, ``from -> to: reason``, and the test
reads like the search it describes.
"""

from __future__ import annotations

import json
import re

import pytest
import sqlglot
from langgraph.runtime import Runtime
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from sqlglot import exp

import sqlchorus
from build_list_examples import build_examples, render
from conftest import FIXTURES, chat_calls, sampled_model, spider_examples
from sqlchorus import prompts
from sqlchorus.config.settings import Settings
from sqlchorus.core.context import Context
from sqlchorus.core.list_search import recursion_limit
from sqlchorus.graph.list_graph import build_list_graph
from sqlchorus.nodes.generate_list import generate_list
from sqlchorus.nodes.list_plan import WHOLE_QUERY, examples_text
from sqlchorus.testing import ScriptedChatModel, oracle_model, prompt_text, role_of_call
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.steps.decompose import decompose, describe_step
from sqlchorus.tools.models.parsing import parse_plan
from sqlchorus.tools.schema.introspect import introspect
from sqlchorus.tools.steps.verify import verify_sql

CASES = json.loads((FIXTURES / "list_verify" / "cases.json").read_text())

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
FINAL = "SELECT COUNT(*) FROM products AS p JOIN categories AS c ON p.category_id = c.category_id WHERE c.name = 'Kitchen' AND p.unit_price > 20"
GOOD = {1: FROM, 2: JOIN, 3: WHERE, 4: FINAL}


# -- the verifier ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo():
    from sqlchorus.runs.demo import demo_db_path

    with GuardedDatabase(demo_db_path()) as db:
        yield db, introspect(db, sample_values=0)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_verifier(demo, case):
    db, schema = demo
    verdict = verify_sql(
        case["sql"], db, schema=schema, verifier=case.get("verifier", "strong"),
        growth=case.get("growth", 100.0), accepted=set(case.get("accepted", [])),
    )
    expect = case["expect"]
    assert verdict["kind"] == expect["kind"], verdict
    assert verdict["ok"] == (expect["kind"] == "ok")
    if "error" in expect:
        assert expect["error"] in verdict["error"]
    for key in ("failing", "runnable", "sub_queries"):
        if key in expect:
            assert verdict[key] == expect[key], key


@pytest.mark.parametrize(
    "answer,steps",
    [
        ("[[Step 1: Take the rows of singer.]]\n[[Step 2: Return name.]]", ["Take the rows of singer.", "Return name."]),
        ("Steps:\n1. Take the rows of singer.\n2) Return name.", ["Take the rows of singer.", "Return name."]),
        ("[[Take the rows\n of singer.]] then [[ step 2 - Return name. ]]", ["Take the rows of singer.", "Return name."]),
        ("SELECT name FROM singer", []),
        ("", []),
    ],
)
def test_parse_plan(answer, steps):
    assert parse_plan(answer) == steps


def test_shipped_examples_are_what_the_script_builds(demo):
    db, _ = demo
    built = build_examples(db)
    assert built == prompts.examples("list_plan")
    shipped = (FIXTURES.parent.parent / "prompts" / "list_plan_examples.json").read_text(encoding="utf-8")
    assert render(built) == shipped
    # Every example shows each step with the sub-query that writes it; the last is the query.
    for example in built:
        assert example["steps"][-1]["sql"].startswith(("SELECT", "WITH"))
        assert all(s["instruction"] for s in example["steps"])


# SQL as it is written: upper-case keywords, comparisons, function calls, alias.column names.
_SQL_KEYWORD = re.compile(
    r"\b(?:SELECT|FROM|WHERE|JOIN|ON|AS|GROUP BY|ORDER BY|HAVING|LIMIT|OFFSET|DISTINCT|UNION|INTERSECT|"
    r"EXCEPT|IN|NOT|AND|OR|IS|NULL|LIKE|BETWEEN|CASE|WHEN|DESC|ASC|COUNT|SUM|AVG|MIN|MAX)\b"
)
_COMPARISON = re.compile(r"[\w')]\s*(?:=|!=|<>|<=|>=|<|>)\s*[\w'(]")
_CALL = re.compile(r"\b[A-Za-z_]\w*\(")
_QUALIFIED = re.compile(r"\b[A-Za-z_]\w*\.[A-Za-z_*]\w*")
_QUERY_START = re.compile(r"(?i)\b(?:select|with)\b")


def sql_in(text: str) -> list[str]:
    """The pieces of ``text`` that are SQL rather than words (empty when there are none)."""
    found = [m.group(0) for pattern in (_SQL_KEYWORD, _COMPARISON, _CALL, _QUALIFIED) for m in pattern.finditer(text)]
    for start in _QUERY_START.finditer(text):  # an embedded query, in any letter case
        tail = text[start.start():].rstrip(" .")
        try:
            tree = sqlglot.parse_one(tail, read="sqlite")
        except sqlglot.errors.SqlglotError:
            continue
        if isinstance(tree, exp.Query) and tree.find(exp.From):
            found.append(tail)
    return found


def test_plan_examples_shown_to_the_model_have_no_sql():
    """LIST's plan examples are natural-language instructions, as the paper's back-translations
    are and as its plan prompt asks ("Do not generate SQL")."""
    shown = examples_text(Settings(trace_dir=None))
    steps = re.findall(r"\[\[Step \d+: (.*?)\]\]", shown)
    assert len(steps) == sum(len(ex["steps"]) for ex in prompts.examples("list_plan"))
    assert {step: sql_in(step) for step in steps if sql_in(step)} == {}


def test_the_sql_check_finds_the_decomposers_own_descriptions(demo):
    """The decomposer's descriptions of the same sub-queries carry SQL fragments, and the check
    above finds them in every example: it would fail on plan examples written that way."""
    _, schema = demo
    for example in prompts.examples("list_plan"):
        described = [describe_step(s) for s in decompose(example["sql"], schema=schema)]
        assert any(sql_in(text) for text in described), described
    assert sql_in("Keep only the rows where NOT category_id IN (SELECT category_id FROM products WHERE discontinued = 1).")
    assert sql_in("Then select category_id from products.") == ["select category_id from products"]
    assert not sql_in("Keep only the categories whose category_id is not among those the nested query returns.")


# -- scripted searches -------------------------------------------------------------------------


class Script:
    """Answers LIST prompts from lists: ``plan`` for plans, ``("write", n)`` and ``("repair", n)``
    for step ``n``. Each call takes the next answer; the last one repeats. ``prompts`` keeps what
    each call was sent, beside its key in ``calls``."""

    def __init__(self, answers: dict):
        self.answers = {k: list(v) for k, v in answers.items()}
        self.calls: list[tuple] = []
        self.prompts: list[str] = []

    def __call__(self, messages) -> str:
        prompt = prompt_text(messages)
        role = role_of_call()
        if role == "list:plan":
            key: tuple | str = "plan"
        else:
            task = prompt.split("======= Your task =======")[-1]
            found = re.search(r"(write|repair) step (\d+) of \d+", task)
            assert found, prompt[-500:]
            key = (found.group(1), int(found.group(2)))
        self.calls.append(key)
        self.prompts.append(prompt)
        queue = self.answers[key]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        if key == "plan":
            return "\n".join(f"[[Step {n}: {s}]]" for n, s in enumerate(answer, 1))
        return f"Question analysis: ...\nResult:\n```sql\n{answer}\n```"


def run_search(answers: dict, settings: Settings | None = None, question: str = QUESTION):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from sqlchorus.runs.demo import demo_db_path

    script = Script(answers)
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    settings = settings or Settings(trace_dir=None)
    with GuardedDatabase(demo_db_path()) as db:
        context = Context(
            db=db, models={"generation": ScriptedChatModel(script)}, settings=settings,
            schema=introspect(db, sample_values=0), tracer=provider.get_tracer("test"),
        )
        update = generate_list(
            {"question": question, "evidence": "", "schema_view": "(schema)", "values": {},
             "generator": "list", "sample": 0},
            Runtime(context=context),
            search=build_list_graph(),
        )
    return update, routes(spans.get_finished_spans()), script


def routes(finished) -> list[str]:
    """Every route event, in order, as ``from -> to: reason``."""
    nodes = [s for s in sorted(finished, key=lambda s: s.start_time) if s.name.startswith("node:")]
    return [
        f"{e.attributes['from']} -> {e.attributes['to']}: {e.attributes['reason']}"
        for s in nodes for e in s.events if e.name == "route"
    ]


def hops(trace: list[str]) -> list[str]:
    return [line.split(":", 1)[0] for line in trace]


def test_straight_success():
    update, trace, script = run_search({"plan": [PLAN], **{("write", n): [sql] for n, sql in GOOD.items()}})
    assert trace == [
        "list_plan -> list_write_step: plan 1: 4 steps",
        "list_write_step -> list_verify_step: step 1 of 4 written (query 1 of 15)",
        "list_verify_step -> list_write_step: step 1 of 4 verified; writing step 2",
        "list_write_step -> list_verify_step: step 2 of 4 written (query 2 of 15)",
        "list_verify_step -> list_write_step: step 2 of 4 verified; writing step 3",
        "list_write_step -> list_verify_step: step 3 of 4 written (query 3 of 15)",
        "list_verify_step -> list_write_step: step 3 of 4 verified; writing step 4",
        "list_write_step -> list_verify_step: step 4 of 4 written (query 4 of 15)",
        "list_verify_step -> __end__: all 4 steps verified",
    ]
    (candidate,) = update["candidates"]
    assert candidate["id"] == "list-0" and candidate["generator"] == "list"
    assert candidate["sql"] == FINAL and candidate["status"] == "unchecked"
    meta = candidate["meta"]["list"]
    assert meta["complete"] and meta["gave_up"] is None
    assert (meta["steps_verified"], meta["steps_planned"], meta["global_attempts"]) == (4, 4, 4)
    assert [u["node"] for u in update["usage"]] == ["list_plan"] + ["list_write_step"] * 4
    assert "Step 2: Join categories AS c on p.category_id = c.category_id.\n  " + JOIN in candidate["reasoning"]


def test_reprompt_that_succeeds():
    broken = FROM + " JOIN categories AS c ON p.categoryid = c.category_id"
    update, trace, script = run_search({
        "plan": [PLAN], ("write", 1): [FROM], ("write", 2): [broken], ("repair", 2): [JOIN],
        ("write", 3): [WHERE], ("write", 4): [FINAL],
    })
    assert hops(trace) == [
        "list_plan -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> list_reprompt",
        "list_reprompt -> list_verify_step", "list_verify_step -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> __end__",
    ]
    assert trace[4] == (
        "list_verify_step -> list_reprompt: step 2 of 4 failed (execution: no such column: p.categoryid); "
        "reprompt 1 of 3"
    )
    assert trace[5] == "list_reprompt -> list_verify_step: step 2 of 4 repaired, reprompt 1 of 3 (query 3 of 15)"
    assert update["candidates"][0]["sql"] == FINAL
    meta = update["candidates"][0]["meta"]["list"]
    assert [(a["step"], a["kind"], a["verdict"]) for a in meta["attempts"]] == [
        (1, "write", "ok"), (2, "write", "execution"), (2, "reprompt", "ok"), (3, "write", "ok"), (4, "write", "ok"),
    ]


def test_reprompt_shows_the_failing_sub_query():
    broken_where = JOIN + " WHERE c.nam = 'Kitchen' AND p.unit_price > 20"
    seen = []

    def capture(messages):
        seen.append((role_of_call(), prompt_text(messages)))
        return script(messages)

    script = Script({"plan": [PLAN], ("write", 1): [FROM], ("write", 2): [JOIN], ("write", 3): [broken_where],
                     ("repair", 3): [WHERE], ("write", 4): [FINAL]})
    from sqlchorus.runs.demo import demo_db_path

    with GuardedDatabase(demo_db_path()) as db:
        context = Context(db=db, models={"generation": ScriptedChatModel(capture)}, settings=Settings(trace_dir=None),
                          schema=introspect(db, sample_values=0))
        build_list_graph().invoke({"question": QUESTION, "schema_view": "(schema)", "sample": 0},
                            config={"recursion_limit": 50}, context=context)
    repair = next(p for role, p in seen if role == "list:reprompt")
    task = repair.split("======= Your task =======")[1]
    assert f"Generated SQL:\n```sql\n{broken_where}\n```" in task
    assert f"SQLs that run well:\n```sql\n{FROM};\n{JOIN};\n```" in task
    assert f"When it turns to:\n```sql\n{broken_where}\n```\nthis happened: execution: no such column: c.nam" in task
    assert f"-- step 2\n{JOIN};" in task  # the verified path so far


def test_traceback_to_an_earlier_step():
    wrong_join = FROM + " JOIN suppliers AS s ON p.supplier_id = s.supplier_id"
    stuck_where = wrong_join + " WHERE c.name = 'Kitchen' AND p.unit_price > 20"
    update, trace, script = run_search({
        "plan": [PLAN], ("write", 1): [FROM], ("write", 2): [wrong_join, JOIN],
        ("write", 3): [stuck_where, WHERE], ("repair", 3): [stuck_where], ("write", 4): [FINAL],
    })
    assert hops(trace) == [
        "list_plan -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> list_reprompt",
        "list_reprompt -> list_verify_step", "list_verify_step -> list_reprompt",
        "list_reprompt -> list_verify_step", "list_verify_step -> list_reprompt",
        "list_reprompt -> list_verify_step", "list_verify_step -> list_traceback",
        "list_traceback -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> __end__",
    ]
    assert trace[12] == (
        "list_verify_step -> list_traceback: step 3 of 4 failed 4 times, local attempts spent (3 of 3): "
        "execution: no such column: c.name"
    )
    assert trace[13] == "list_traceback -> list_write_step: step 3 of 4 is stuck; back to step 2, the last verified step, to rewrite it"
    assert script.calls.count(("write", 2)) == 2
    (candidate,) = update["candidates"]
    assert candidate["sql"] == FINAL
    meta = candidate["meta"]["list"]
    assert (meta["tracebacks"], meta["global_attempts"], meta["plans"]) == (1, 9, 1)


def verified_code(prompt: str) -> str:
    """The verified queries a write or reprompt prompt shows, as the model reads them."""
    return prompt.split("## Verified code (the query of each step before):\n```sql\n", 1)[1].split("\n```", 1)[0]


def test_the_rewrite_after_a_traceback_builds_on_the_step_before_the_dead_end():
    """Step 3 cannot be built on step 2's verified query: the traceback sets that query aside, so
    the prompt that rewrites step 2 shows only step 1 as verified, and step 2's old query as the
    dead end it led to, never as code to extend."""
    wrong_join = FROM + " JOIN suppliers AS s ON p.supplier_id = s.supplier_id"
    stuck_where = wrong_join + " WHERE c.name = 'Kitchen' AND p.unit_price > 20"
    _, trace, script = run_search({
        "plan": [PLAN], ("write", 1): [FROM], ("write", 2): [wrong_join, JOIN],
        ("write", 3): [stuck_where, WHERE], ("repair", 3): [stuck_where], ("write", 4): [FINAL],
    })
    assert trace[13].startswith("list_traceback -> list_write_step: step 3 of 4 is stuck; back to step 2")
    writes_2 = [p for key, p in zip(script.calls, script.prompts) if key == ("write", 2)]
    assert len(writes_2) == 2
    before, after = (p.split("======= Your task =======")[1] for p in writes_2)
    assert verified_code(before) == verified_code(after) == f"-- step 1\n{FROM};"
    assert (f"this step was verified, but the next step could not be built on it\n```sql\n{wrong_join}\n```\n"
            "The next step failed with: no such column: c.name") in after
    # The reprompts of the stuck step did build on it.
    repairs_3 = [p for key, p in zip(script.calls, script.prompts) if key == ("repair", 3)]
    assert {verified_code(p.split("======= Your task =======")[1]) for p in repairs_3} == {
        f"-- step 1\n{FROM};\n-- step 2\n{wrong_join};"
    }


def test_replan_when_nothing_is_verified():
    bad_plan = ["Take the rows of product.", "Return COUNT(*)."]
    update, trace, script = run_search({
        "plan": [bad_plan, PLAN], ("write", 1): ["SELECT * FROM product", FROM], ("repair", 1): ["SELECT * FROM product"],
        ("write", 2): [JOIN], ("write", 3): [WHERE], ("write", 4): [FINAL],
    })
    assert hops(trace)[:10] == [
        "list_plan -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> list_reprompt",
        "list_reprompt -> list_verify_step", "list_verify_step -> list_reprompt",
        "list_reprompt -> list_verify_step", "list_verify_step -> list_reprompt",
        "list_reprompt -> list_verify_step", "list_verify_step -> list_traceback",
        "list_traceback -> list_plan",
    ]
    assert trace[0] == "list_plan -> list_write_step: plan 1: 2 steps"
    assert trace[9] == "list_traceback -> list_plan: step 1 of 2 is stuck and no step is verified; re-planning (plan 2)"
    assert trace[10] == "list_plan -> list_write_step: plan 2 (re-plan): 4 steps"
    assert trace[-1] == "list_verify_step -> __end__: all 4 steps verified"
    assert update["candidates"][0]["sql"] == FINAL
    meta = update["candidates"][0]["meta"]["list"]
    assert (meta["plans"], meta["plan"], meta["global_attempts"]) == (2, PLAN, 8)


def test_replan_prompt_says_why_the_plan_failed():
    seen = []
    script = Script({"plan": [["Take the rows of product."], PLAN], ("write", 1): ["SELECT * FROM product", FROM],
                     ("repair", 1): ["SELECT * FROM product"], ("write", 2): [JOIN], ("write", 3): [WHERE],
                     ("write", 4): [FINAL]})

    def capture(messages):
        seen.append((role_of_call(), prompt_text(messages)))
        return script(messages)

    from sqlchorus.runs.demo import demo_db_path

    with GuardedDatabase(demo_db_path()) as db:
        context = Context(db=db, models={"generation": ScriptedChatModel(capture)}, settings=Settings(trace_dir=None),
                          schema=introspect(db, sample_values=0))
        build_list_graph().invoke({"question": QUESTION, "schema_view": "(schema)", "sample": 0},
                            config={"recursion_limit": 50}, context=context)
    plans = [p for role, p in seen if role == "list:plan"]
    assert len(plans) == 2
    assert "A previous plan failed" not in plans[0]
    assert "Step 1: Take the rows of product.\nIts first step could not be written: no such table: product" in plans[1]


def test_global_give_up_offers_no_partial_query():
    stuck = JOIN + " WHERE c.nme = 'Kitchen'"
    update, trace, script = run_search({
        "plan": [PLAN], ("write", 1): [FROM], ("write", 2): [JOIN], ("write", 3): [stuck], ("repair", 3): [stuck],
    })
    # 2 verified steps, then step 3 fails 4 times and the search goes back to step 2, twice.
    assert hops(trace).count("list_verify_step -> list_traceback") == 2
    assert hops(trace).count("list_traceback -> list_write_step") == 2
    assert trace[-1] == (
        "list_verify_step -> __end__: step 3 of 4 failed (execution: no such column: c.nme) and global attempts "
        "spent (15 of 15); best verified: 2 of 4 steps (plan 1)"
    )
    assert script.calls.count("plan") == 1
    assert len([c for c in script.calls if c != "plan"]) == 15
    (candidate,) = update["candidates"]
    # Step 2's join (a SELECT * of products and categories) is a partial state, not an answer.
    assert candidate["sql"] == "" and candidate["status"] == "error"
    assert candidate["error"] == (
        "LIST gave up before verifying every step (only 2 of 4 steps were verified): global attempts spent (15 of 15)"
    )
    meta = candidate["meta"]["list"]
    assert meta["deepest_verified"] == {"verified": 2, "steps": 4, "sql": JOIN}
    assert not meta["complete"]
    assert meta["gave_up"] == "global attempts spent (15 of 15)"
    assert (meta["steps_verified"], meta["global_attempts"], meta["tracebacks"]) == (2, 15, 2)
    assert len(meta["attempts"]) == 15
    assert not update["errors"]


def test_global_give_up_with_nothing_verified_and_few_attempts():
    settings = Settings(trace_dir=None, list_max_global_attempts=5, list_max_local_attempts=1)
    update, trace, script = run_search({"plan": [PLAN], ("write", 1): ["SELECT * FROM product"],
                                        ("repair", 1): ["SELECT * FROM product"]}, settings=settings)
    assert hops(trace) == [
        "list_plan -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> list_reprompt",
        "list_reprompt -> list_verify_step", "list_verify_step -> list_traceback",
        "list_traceback -> list_plan",
        "list_plan -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> list_reprompt",
        "list_reprompt -> list_verify_step", "list_verify_step -> list_traceback",
        "list_traceback -> list_plan",
        "list_plan -> list_write_step",
        "list_write_step -> list_verify_step", "list_verify_step -> __end__",
    ]
    assert trace[-1].endswith("global attempts spent (5 of 5); nothing verified")
    (candidate,) = update["candidates"]
    assert candidate["sql"] == "" and candidate["status"] == "error"
    assert candidate["error"] == "LIST gave up before verifying every step (no step was verified): global attempts spent (5 of 5)"


def test_an_empty_result_kept_by_the_model_is_accepted():
    empty_where = JOIN + " WHERE c.name = 'Kitchen' AND p.unit_price > 100000"
    empty_final = "SELECT COUNT(*) FROM products AS p JOIN categories AS c ON p.category_id = c.category_id WHERE c.name = 'Kitchen' AND p.unit_price > 100000"
    update, trace, script = run_search({
        "plan": [PLAN], ("write", 1): [FROM], ("write", 2): [JOIN], ("write", 3): [empty_where],
        ("repair", 3): [empty_where], ("write", 4): [empty_final],
    })
    assert trace[6] == "list_verify_step -> list_reprompt: step 3 of 4 failed (empty: the query returned no rows); reprompt 1 of 3"
    assert trace[8] == (
        "list_verify_step -> list_write_step: step 3 of 4 verified (the query returned no rows (kept by the model)); "
        "writing step 4"
    )
    # The accepted empty sub-query is not reported again when step 4 contains it.
    assert trace[-1] == "list_verify_step -> __end__: all 4 steps verified"
    assert update["candidates"][0]["sql"] == empty_final


def test_a_join_without_a_condition_may_be_kept_but_an_always_true_one_may_not():
    cross = "SELECT COUNT(*) FROM products AS p, categories AS c"
    kept, trace, _ = run_search({"plan": [["Count every pair of a product and a category."]],
                                 ("write", 1): [cross], ("repair", 1): [cross]})
    assert trace[2] == (
        "list_verify_step -> list_reprompt: step 1 of 1 failed (cross_join: the join of categories AS c has no "
        "condition: each of the 47 rows is paired with each of the 8 rows of categories AS c (376 rows)); "
        "reprompt 1 of 3"
    )
    assert trace[-1].startswith("list_verify_step -> __end__: 1 step verified (the join of categories AS c has no condition")
    assert kept["candidates"][0]["sql"] == cross

    always = "SELECT COUNT(*) FROM products AS p JOIN categories AS c ON c.category_id = c.category_id"
    settings = Settings(trace_dir=None, list_max_local_attempts=1, list_max_global_attempts=2)
    refused, trace, _ = run_search({"plan": [["Count every pair of a product and a category."]],
                                    ("write", 1): [always], ("repair", 1): [always]}, settings=settings)
    assert hops(trace) == ["list_plan -> list_write_step", "list_write_step -> list_verify_step",
                           "list_verify_step -> list_reprompt", "list_reprompt -> list_verify_step",
                           "list_verify_step -> __end__"]
    assert "growth: the join of categories AS c pairs every row with every row" in trace[-1]
    assert refused["candidates"][0]["status"] == "error"


def test_weak_verifier_runs_only_the_whole_query():
    always = "SELECT COUNT(*) FROM products AS p JOIN categories AS c ON c.category_id = c.category_id"
    answers = {"plan": [["Count every pair of a product and a category."]], ("write", 1): [always]}
    weak, weak_trace, _ = run_search(answers, settings=Settings(trace_dir=None, list_verifier="weak"))
    assert weak_trace[-1] == "list_verify_step -> __end__: 1 step verified"
    assert weak["candidates"][0]["sql"] == always
    assert weak["candidates"][0]["meta"]["list"]["verifier"] == "weak"


def test_a_plan_without_steps_becomes_one_step():
    update, trace, _ = run_search({"plan": [[]], ("write", 1): [FINAL]})
    assert trace[0] == "list_plan -> list_write_step: plan 1: no steps in the answer; one step: write the whole query"
    assert update["candidates"][0]["meta"]["list"]["plan"] == [WHOLE_QUERY]
    assert update["candidates"][0]["sql"] == FINAL


def test_a_failing_model_ends_the_search():
    update, trace, _ = run_search({"plan": [PLAN], ("write", 1): [FROM], ("write", 2): [RuntimeError("provider down")]})
    assert trace[-1].startswith("list_write_step -> __end__: generation failed: The generation model (scripted) failed: provider down")
    (candidate,) = update["candidates"]
    assert candidate["sql"] == "" and candidate["status"] == "error"  # step 1 of 4 is no answer
    assert candidate["meta"]["list"]["deepest_verified"]["sql"] == FROM
    assert candidate["meta"]["list"]["gave_up"].startswith("generation failed")
    assert [e["node"] for e in update["errors"]] == ["list_write_step"]


def test_the_step_limit_covers_the_worst_case():
    for local, total in [(3, 15), (0, 4), (1, 1), (5, 40)]:
        settings = Settings(list_max_local_attempts=local, list_max_global_attempts=total)
        # Worst case: every query fails, with a traceback and a re-plan after each local budget.
        per = local + 1
        worst = 1 + 2 * total + 2 * ((total - 1) // per)
        assert recursion_limit(settings) > worst


# -- in the whole graph ------------------------------------------------------------------------


def test_oracle_answers_with_gold_sql_through_the_list_generator():
    from sqlchorus.runs.demo import demo_db_path, load_demo_questions

    questions = load_demo_questions()[::3]
    model = oracle_model({q["question"]: q["sql"] for q in questions}.get)
    for q in questions:
        result = sqlchorus.ask(q["question"], db=demo_db_path(), model=model,
                               settings=Settings(generators={"list": 1}, trace_dir=None))
        assert result.ok, result.error
        assert result.sql == q["sql"]
        meta = result.candidates[0]["meta"]["list"]
        assert meta["complete"] and meta["steps_verified"] == meta["steps_planned"]


def test_spider_oracle_with_two_generators(spider):
    examples = spider_examples("concert_singer")[:4]
    model = oracle_model({ex["question"]: ex["query"] for ex in examples}.get)
    settings = Settings(generators={"divide_conquer": 1, "list": 1}, trace_dir=None)
    for ex in examples:
        result = sqlchorus.ask(ex["question"], db=spider("concert_singer"), model=model, settings=settings)
        assert result.ok, result.error
        by_id = {c["id"]: c for c in result.candidates}
        assert set(by_id) == {"divide_conquer-0", "list-0"}
        assert by_id["list-0"]["sql"] == ex["query"].strip().rstrip(";").strip()
        assert by_id["list-0"]["fingerprint"] == by_id["divide_conquer-0"]["fingerprint"]
        assert set(by_id["list-0"]) >= {"meta"} and "check" not in by_id["list-0"]["meta"]["list"]


def test_inner_nodes_trace_under_generate_list(demo_db, spans):
    from sqlchorus.runs.demo import load_demo_questions

    q = load_demo_questions()[5]
    model = oracle_model({q["question"]: q["sql"]}.get)
    result = sqlchorus.ask(q["question"], db=demo_db, model=model,
                           settings=Settings(generators={"list": 1}, trace_dir=None), exporters=[spans])
    assert result.ok
    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    inner = [s for s in finished if s.name.startswith("node:list_")]
    assert {s.name for s in inner} == {"node:list_plan", "node:list_write_step", "node:list_verify_step"}
    assert all(by_id[s.parent.span_id].name == "node:generate_list" for s in inner)
    sql = [s for s in finished if s.name == "sql" and by_id[s.parent.span_id].name == "node:list_verify_step"]
    assert sql, "sub-queries run through the guarded database, as spans of the verifier"
    outer = [(e.attributes["from"], e.attributes["to"]) for s in finished if s.name == "node:generate_list"
             for e in s.events if e.name == "route"]
    assert outer == [("generate_list", "check_candidates")]


def test_runs_inside_a_checkpointed_graph(demo_db):
    from langgraph.checkpoint.memory import InMemorySaver

    from sqlchorus.graph.build import build_graph
    from sqlchorus.runs.demo import load_demo_questions

    q = load_demo_questions()[0]
    settings = Settings(generators={"list": 1}, trace_dir=None, model=oracle_model({q["question"]: q["sql"]}.get))
    graph = build_graph(settings, checkpointer=InMemorySaver())
    from sqlchorus.core.models import resolve_roles

    class NoValues:  # value retrieval is not what this test is about
        def search(self, keywords, **kw):
            return {}

    with GuardedDatabase(demo_db) as db:
        context = Context(db=db, models=resolve_roles(settings), settings=settings, schema=introspect(db),
                          value_index=NoValues())
        config = {"recursion_limit": settings.recursion_limit, "configurable": {"thread_id": "list"}}
        state = graph.invoke({"question": q["question"], "evidence": ""}, config=config, context=context)
    assert state["answer"]["sql"] == q["sql"]
    # Only the candidate comes back: none of the search's working state reaches the parent.
    assert not {"plan", "verified", "check", "trail"} & set(state)


# -- retries that differ -----------------------------------------------------------------------

BROKEN_JOIN = FROM + " JOIN categories AS c ON p.categoryid = c.category_id"


def run_sampled_search(answers: dict, cache_path, settings: Settings | None = None):
    """A search with a named model (the kind the response cache keeps) that records each call's
    sampling; returns the update, every prompt sent in order, the model and ``chat_calls``."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from sqlchorus.runs.demo import demo_db_path
    from sqlchorus.tools.models.cache import ResponseCache

    script = Script(answers)
    sent = []

    def respond(messages):
        sent.append(prompt_text(messages))
        return script(messages)

    model = sampled_model(respond)
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    settings = settings or Settings(trace_dir=None, model="scripted:list")
    cache = ResponseCache(cache_path)
    with GuardedDatabase(demo_db_path()) as db:
        context = Context(db=db, models={"generation": model}, settings=settings, cache=cache,
                          schema=introspect(db, sample_values=0), tracer=provider.get_tracer("test"))
        update = generate_list(
            {"question": QUESTION, "evidence": "", "schema_view": "(schema)", "values": {}, "generator": "list",
             "sample": 0},
            Runtime(context=context), search=build_list_graph(),
        )
    cache.close()
    return update, sent, model, chat_calls(spans)


def test_a_model_that_repeats_itself_gets_a_new_prompt_every_retry(tmp_path):
    """Step 2's query fails, and every repair is the same query again. Each reprompt shows every
    earlier attempt, so no two prompts of the search are the same; every call samples at LIST's
    temperature 0.8 and top-p 0.95, and every retry (the reprompts, and the writes after the
    traceback) is never answered from the response cache; only the two distinct queries count as
    new."""
    answers = {"plan": [PLAN], ("write", 1): [FROM], ("write", 2): [BROKEN_JOIN], ("repair", 2): [BROKEN_JOIN]}
    update, sent, model, calls = run_sampled_search(answers, tmp_path / "responses.sqlite")
    assert len(sent) == 16 and len(set(sent)) == 16  # a plan and the 15 queries of the search
    nodes = [c[0] for c in calls]
    reprompts = [p.split("======= Your task =======")[1] for p, n in zip(sent, nodes) if n == "list_reprompt"]
    assert "Earlier attempts" not in reprompts[0]
    assert "Attempt 1:\n```sql\n" + BROKEN_JOIN + "\n```\nthis happened: execution: no such column: p.categoryid" in reprompts[1]
    assert "Attempt 2: the same query as attempt 1\nthis happened: execution: no such column: p.categoryid" in reprompts[2]
    assert "Attempt 3:" not in reprompts[2]
    # The first pass samples as the paper does too; everything after the first failure is a retry.
    first_pass = nodes.index("list_reprompt")
    assert nodes[:first_pass] == ["list_plan", "list_write_step", "list_write_step"]
    assert {c[1:] for c in calls[:first_pass]} == {(0.8, 0.95, False)}
    assert {c[1:] for c in calls[first_pass:]} == {(0.8, 0.95, False)}
    assert {s[1:] for s in model.sampling[first_pass:]} == {(0.8, 0.95)}
    # After the traceback, step 1 is written again (the same query), and step 2's write is shown
    # the failed attempts at it on that same verified query.
    rewrite_2 = [p for p, n in zip(sent, nodes) if n == "list_write_step" and "write step 2" in p][1]
    assert "Earlier attempts at this step, on the same verified query, that failed" in rewrite_2
    assert "Attempt 4: the same query as attempt 1" in rewrite_2
    meta = update["candidates"][0]["meta"]["list"]
    assert (meta["global_attempts"], meta["new_queries"], meta["tracebacks"]) == (15, 2, 2)

    # The same search again over the same cache: only the first pass, a draw keyed by the
    # sample's number, comes from it.
    again, sent_again, model_again, calls_again = run_sampled_search(answers, tmp_path / "responses.sqlite")
    assert [c[3] for c in calls_again] == [True] * first_pass + [False] * (16 - first_pass)
    assert model_again.calls == 16 - first_pass
    assert sent_again == sent[first_pass:]  # the model saw only the retries, with the same prompts


def test_a_replan_shows_every_plan_that_failed(tmp_path):
    settings = Settings(trace_dir=None, model="scripted:list", list_max_local_attempts=0, list_max_global_attempts=3)
    plans = [["Take the rows of product."], ["Take the rows of produce."], PLAN]
    answers = {"plan": plans, ("write", 1): ["SELECT * FROM product", "SELECT * FROM produce", FROM]}
    _, sent, _, calls = run_sampled_search(answers, tmp_path / "responses.sqlite", settings)
    plan_prompts = [p for p, c in zip(sent, calls) if c[0] == "list_plan"]
    assert len(plan_prompts) == 3 and [c[1] for c in calls if c[0] == "list_plan"] == [0.8, 0.8, 0.8]
    assert "previous plan" not in plan_prompts[0]
    assert "Step 1: Take the rows of product.\nIts first step could not be written: no such table: product" in plan_prompts[1]
    third = plan_prompts[2]
    assert "2 previous plans failed" in third
    assert third.index("no such table: product") < third.index("no such table: produce")
