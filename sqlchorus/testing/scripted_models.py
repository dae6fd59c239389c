"""Scripted chat models for tests, ours and our users'.

``ScriptedChatModel(responses)`` answers from a list of strings (in turn, cycling) or from a
callable that takes the list of messages and returns a string. It supports ``bind_tools`` (so
``with_structured_output`` and agent frameworks accept it) and reports token usage, so cost
accounting and traces can be tested without a provider. It is the product's replay model
(:class:`sqlchorus.core.replay_model.ReplayChatModel`) with a script that never runs out.

A responder learns which prompt it is answering from :func:`current_call`: sqlchorus tags every
model call with its prompt template's name, role and node (run metadata, see
:mod:`sqlchorus.core.llm`), so a script never depends on a prompt's wording.

:func:`oracle_model` plays every role. Which role a prompt template calls for is known for the
nodes around the generators here, and for each generator from its own description
(``Generator.oracle``), so a generator added in a module of its own, or by a plugin, is answered
without an edit here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from pydantic import Field

from sqlchorus.core.replay_model import ReplayChatModel, count_tokens, current_call
from sqlchorus.graph.generators import GENERATORS
from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.sql.classify import classify_sql
from sqlchorus.tools.steps.decompose import DecomposeError, decompose, describe_step

Responder = Callable[[list[BaseMessage]], str]

__all__ = [
    "ScriptedChatModel", "count_tokens", "current_call", "oracle_model", "prompt_text", "question_of",
    "role_of_call", "sql_of",
]


def _script(responses: Any) -> str:
    """What identifies a script across processes: a responder's module, name and line, or the
    responses themselves."""
    if callable(responses):
        code = getattr(responses, "__code__", None) or getattr(getattr(responses, "__call__", None), "__code__", None)
        where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
        return f"{getattr(responses, '__module__', '')}.{getattr(responses, '__qualname__', type(responses).__name__)}@{where}"
    text = json.dumps([r if isinstance(r, str) else repr(r) for r in responses], ensure_ascii=False)
    return "responses:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class ScriptedChatModel(ReplayChatModel, GenericFakeChatModel):
    """A chat model that answers from a script (a LangChain ``GenericFakeChatModel`` too, which
    streams an answer word by word).

    Args:
        responses: a list of strings, used in turn and cycling after the last, or a callable
            ``(messages) -> str``. A callable may raise to simulate a failing provider. An
            ``AIMessage`` may stand for a string, to script tool calls (structured output).
        name: the model name reported in usage records and traces.
    """

    messages: Any = Field(default=None, exclude=True)
    """``GenericFakeChatModel``'s own script, unused: the responses are the script."""
    model_name: str = "scripted"
    script: str = ""
    """Which script answers (the responder's code location, or a hash of the responses), part of
    the response cache's key: two scripts of one name do not answer for each other."""

    def __init__(self, responses: Sequence[str] | Responder, *, name: str = "scripted", **kw: Any):
        if not callable(responses):
            responses = list(responses)
            if not responses:
                raise ValueError("ScriptedChatModel needs at least one response.")
        super().__init__(responses, name=name, script=_script(responses), **kw)

    @property
    def responses(self) -> Any:
        """The script: the list of responses, or the responder."""
        return self.answers

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _answer(self, messages: list[BaseMessage]) -> str | AIMessage:
        if callable(self.answers):
            text = self.answers(messages)
        else:
            with self._lock:
                text = self.answers[self._index % len(self.answers)]
                self._index += 1
        if not isinstance(text, (str, AIMessage)):
            raise TypeError(f"A scripted response must be a string or AIMessage, got {type(text).__name__}.")
        return text

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self


def prompt_text(messages: list[BaseMessage]) -> str:
    """All message contents joined: what a responder usually inspects."""
    return "\n".join(str(m.content) for m in messages)


# -- a scripted model that plays every role ---------------------------------------------------

PROMPT_ROLES: dict[str, str] = {
    "extract_keywords": "keywords",
    "link_schema": "linking",
    "fix_candidates": "fixing",
    "select_candidate": "selection",
    "select_candidate_reasoning": "selection",
}
"""The oracle's role for the prompt templates of the nodes around the generators; each generator's
description says the roles of its own (``Generator.oracle``)."""


def prompt_roles() -> dict[str, str]:
    """The oracle's role for each prompt template: the fixed nodes' and every generator's."""
    roles = dict(PROMPT_ROLES)
    for generator in GENERATORS.values():
        roles.update(generator.oracle)
    return roles


def role_of_call() -> str | None:
    """The oracle's role of the call being answered, from its prompt template's name."""
    return prompt_roles().get(current_call().get("prompt") or "")


def question_of(prompt: str) -> str:
    """The question a prompt asks about (the last one, after any few-shot examples)."""
    import re

    task = prompt.split("======= Your task =======")[-1]
    found = re.findall(r'Question:\s*\n?\s*"?(.+?)"?\s*\n', task)
    if not found:
        found = re.findall(r'Q:\s*"(.+?)"\s*\n', task)
    return found[-1].strip() if found else ""


def sql_of(prompt: str) -> str:
    """The SQL a fixer prompt shows as the failed query (its task's, not an example's)."""
    marker = "The SQL query executed was:\n"
    if marker not in prompt:
        return ""
    return prompt.rsplit(marker, 1)[1].split("\nThe execution result:", 1)[0].strip()


def _schema_links(sql: str) -> str:
    from sqlglot import exp

    try:
        tree = sql_text.parse_one(sql)
    except Exception:  # the scripted linker degrades to no links on SQL it cannot parse
        return "Schema_links: []"
    aliases = {t.alias_or_name: t.name for t in tree.find_all(exp.Table)}
    tables = sorted({t.name for t in tree.find_all(exp.Table)})
    links = [f"{aliases.get(c.table, tables[0] if len(tables) == 1 else c.table)}.{c.name}"
             for c in tree.find_all(exp.Column) if c.table or len(tables) == 1]
    links = sorted(set(links)) or [f"{t}.*" for t in tables]
    return "So the Schema_links are:\nSchema_links: [" + ",".join(links) + "]"


def _same_sql(a: str | None, b: str | None) -> bool:
    def norm(s: str) -> str:
        return " ".join(s.strip().rstrip(";").split()).lower()

    return bool(a) and bool(b) and norm(a) == norm(b)  # type: ignore[arg-type]


def _pick(prompt: str, gold: str | None) -> str:
    """The scripted selection verdict: the candidate equal to ``gold``, else always "A".

    Always answering "A" when neither (or both) is the gold mimics a position-biased judge: each
    candidate of a pair wins one of the two orders, so scores tie and the tie-break decides.
    """
    import re

    found = re.search(r"Candidate A\n(.*?)\nExecution result.*?Candidate B\n(.*?)\nExecution result", prompt, re.DOTALL)
    if not found:
        return "A"
    a, b = found.group(1), found.group(2)
    if _same_sql(a, gold) and not _same_sql(b, gold):
        return "A"
    if _same_sql(b, gold) and not _same_sql(a, gold):
        return "B"
    return "A"


def _reasoned(letter: str) -> str:
    """A reasoned selection answer for the verdict ``letter``: its reasoning names the other
    candidate first, so that only a parser that reads the final line gets the verdict right."""
    other = "B" if letter == "A" else "A"
    return (f"Candidate {other} and candidate {letter} differ in their results. Answer: {other} would "
            f"not fit the question as asked; candidate {letter} does.\nAnswer: {letter}")


def _synthetic_examples(prompt: str) -> str:
    """Scripted synthetic examples: a row count for each table the target schema shows."""
    import re

    target = prompt.split("###Table creation statements###")[-1]
    tables = re.findall(r"(?:# Table: |CREATE TABLE [`\"]?)([A-Za-z_][A-Za-z0-9_]*)", target)
    lines = [
        f'"input": "How many rows does {t} have?"\n"output": "SELECT COUNT(*) FROM {t}"'
        for t in dict.fromkeys(tables)
    ]
    return "\n".join(lines) or '"input": "How many tables are there?"\n"output": "SELECT 1"'


def _din_nrep_answer(role: str, sql: str | None) -> str:
    """The answer of a DIN-SQL or N-rep prompt for a model that knows the query ``sql``."""
    import json

    from sqlglot import exp


    if sql is None:
        return "I am not sure how to answer this question."
    if role == "din:classification":
        label = classify_sql(sql)
        try:
            tables = sorted({t.name for t in sql_text.parse_one(sql).find_all(exp.Table)})
        except Exception:  # the scripted classifier still labels SQL it cannot parse
            tables = []
        subs = '["the inner query"]' if label == "NESTED" else '[""]'
        return f"needs these tables = [{','.join(tables)}] ... we need the answer to the questions = {subs}.\nLabel: \"{label}\""
    if role == "nrep:linking":
        text = _schema_links(sql).rsplit("[", 1)[-1].rstrip("]")
        links: dict[str, list[str]] = {}
        for item in filter(None, text.split(",")):
            table, _, column = item.partition(".")
            links.setdefault(table, [])
            if column and column != "*":
                links[table].append(column)
        return json.dumps(links)
    if role == "nrep:generation":
        return f"```sql\n{sql}\n```"
    return f"SQL: {sql}"


def _list_answer(role: str, prompt: str, sql: str | None) -> str:
    """LIST's answers for a model that knows ``sql``: the decomposer's steps as the plan, each
    step written as the decomposer's sub-query, and the query itself as the last step."""
    import re


    if sql is None:
        return "I am not sure how to answer this question."
    # LIST's prompts name the engine's SQL ("in MySQL grammar", "one PostgreSQL query"): its steps
    # are read and written in that dialect, as a model asked for it would write them.
    named = re.search(r"\b(?:in|one|step-wise) (SQLite|PostgreSQL|DuckDB|MySQL) (?:grammar|query)\b", prompt)
    dialect = {"PostgreSQL": "postgres", "DuckDB": "duckdb", "MySQL": "mysql"}.get(named.group(1), "sqlite") \
        if named else "sqlite"
    try:
        steps = decompose(sql, dialect=dialect)
    except DecomposeError:
        steps = []
    if role == "list:plan":
        items = [describe_step(s) for s in steps] or ["Write the whole query."]
        return "\n".join(f"[[Step {n}: {text}]]" for n, text in enumerate(items, 1))
    task = prompt.split("======= Your task =======")[-1]
    found = re.search(r"(?:write|repair) step (\d+) of (\d+)", task)
    number, count = (int(found.group(1)), int(found.group(2))) if found else (1, 1)
    answer = sql if number >= count or number > len(steps) else steps[number - 1].sql
    return f"Result:\n```sql\n{answer}\n```"


def oracle_model(
    answer_for: Callable[[str], str | None],
    *,
    first_answer: Callable[[str], str | None] | None = None,
    name: str = "scripted-oracle",
) -> ScriptedChatModel:
    """A scripted model that plays every role, answering generation with ``answer_for(question)``.

    Args:
        answer_for: the SQL to answer a question with (None: answer with prose, no SQL).
        first_answer: the generator's answer instead of ``answer_for`` (for example a broken
            query); the fixer then answers with ``answer_for``. Lets a test drive the fixer.
        name: model name in usage records.
    """

    def respond(messages: list[BaseMessage]) -> str:
        prompt = prompt_text(messages)
        role = role_of_call()
        question = question_of(prompt)
        if role == "keywords":
            words = [w.strip("?,.!'\"") for w in question.split() if len(w.strip("?,.!'\"")) > 3]
            return repr(words)
        if role == "linking":
            sql = answer_for(question)
            return _schema_links(sql) if sql else "Schema_links: []"
        if role == "generation":
            sql = (first_answer or answer_for)(question)
            if sql is None:
                return "I am not sure how to answer this question."
            return f"**1. Divide and Conquer:** ...\n\n**Final Optimized SQL Query:**\n{sql}"
        if role == "fixing":
            sql = answer_for(question)
            return f"Final Answer: {sql}" if sql else "I cannot fix this query."
        if role == "generation:direct":
            sql = (first_answer or answer_for)(question)
            return sql or "I am not sure how to answer this question."
        if role and role.startswith("generation:"):
            sql = (first_answer or answer_for)(question)
            return f"...\n\n**Final Optimized SQL Query:**\n{sql}" if sql else "I am not sure how to answer this question."
        if role and role.startswith("synthesis:"):
            return _synthetic_examples(prompt)
        if role == "selection":
            letter = _pick(prompt, answer_for(question))
            if current_call().get("prompt") == "select_candidate_reasoning":
                return _reasoned(letter)
            return letter
        if role in ("din:classification", "din:generation", "nrep:linking", "nrep:generation"):
            return _din_nrep_answer(role, (first_answer or answer_for)(question))
        if role == "din:correction":
            return _din_nrep_answer(role, answer_for(question))
        if role and role.startswith("list:"):
            return _list_answer(role, prompt, answer_for(question))
        return "I do not understand the request."

    return ScriptedChatModel(respond, name=name)
