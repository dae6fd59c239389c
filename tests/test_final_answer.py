"""The query after the final-answer marker is the answer: a fixer that quotes the failing query
first, and generators that write sub-question SQL before their final query, are read right
through the graph and the generator nodes (the answers' own cases are in
``fixtures/parsing/extract_sql.txt``)."""

from __future__ import annotations

import pytest

import sqlchorus
from conftest import Recorder, run_generator
from sqlchorus.config.settings import Settings
from sqlchorus.nodes.generate_divide_conquer import generate_divide_conquer
from sqlchorus.nodes.generate_query_plan import generate_query_plan
from sqlchorus.testing import ScriptedChatModel

QUESTION = "How many suppliers are there?"
GOLD = "SELECT COUNT(*) FROM suppliers"
BROKEN = "SELECT COUNT(*) FROM supplier"

FIXER_ANSWER = f"""The query that was executed:
```sql
{BROKEN}
```
It fails because the database has no table supplier; the suppliers are in the table suppliers.
Final Answer: {GOLD}"""


def test_the_fixer_reads_the_query_after_final_answer_not_the_quoted_one(demo_db):
    recorder = Recorder({QUESTION: GOLD}, override={"fixing": FIXER_ANSWER}, first_answer=lambda q: BROKEN)
    result = sqlchorus.ask(
        QUESTION, db=demo_db, settings=Settings(model=ScriptedChatModel(recorder), trace_dir=None, fix_rounds=2),
    )
    assert result.ok and result.sql == GOLD
    assert len(recorder.of("fixing")) == 1
    for candidate in result.candidates:
        assert candidate["sql"] == GOLD and candidate["fix_attempts"] == 1
        assert [h["sql"] for h in candidate["history"]] == [BROKEN]
        assert candidate["meta"]["fix"]["stopped"] is None


SUB_QUESTIONS_FIRST = """**1. Divide and Conquer:**
* **Sub-question 1:** the suppliers from Japan
```sql
SELECT supplier_id FROM suppliers WHERE country = 'Japan'
```
**2. Assembling SQL:**
```sql
SELECT name FROM suppliers WHERE supplier_id IN (SELECT supplier_id FROM suppliers WHERE country = 'Japan')
```
**3. Simplification and Optimization:**
* The subquery reads the same table: filter it directly.

**Final Optimized SQL Query:**
SELECT name FROM suppliers WHERE country = 'Japan'
"""

PLAN_THEN_FENCED_FINAL = """**Query Plan**:
1. Open suppliers; the step reads `SELECT * FROM suppliers`.
2. Keep the rows whose country is Japan:
```sql
SELECT * FROM suppliers WHERE country = 'Japan'
```
3. Deliver the name.

**Final Optimized SQL Query:**
```sql
SELECT name FROM suppliers WHERE country = 'Japan'
```
For comparison, the first step alone was:
```sql
SELECT * FROM suppliers
```
"""


@pytest.mark.parametrize(
    ("generator", "answer"),
    [(generate_divide_conquer, SUB_QUESTIONS_FIRST), (generate_query_plan, PLAN_THEN_FENCED_FINAL)],
    ids=["divide and conquer", "query plan"],
)
def test_generators_read_the_final_query_not_a_sub_questions(demo_db, generator, answer):
    update, _ = run_generator(generator, demo_db, ScriptedChatModel(lambda messages: answer),
                              question="Which suppliers are from Japan?")
    (candidate,) = update["candidates"]
    assert candidate["sql"] == "SELECT name FROM suppliers WHERE country = 'Japan'"
