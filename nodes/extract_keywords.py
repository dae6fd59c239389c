"""extract_keywords: keywords, keyphrases and named entities of the question and its hint.

The few-shot prompt of CHESS and CHASE-SQL. When the model fails or returns no list, the
question's own words stand in, so value retrieval still has something to look up; with
``Settings.keywords = "question"`` they are used from the start, with no model call.
"""

from __future__ import annotations

import re

from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.core.context import Context
from sqlchorus.core.llm import try_call_model
from sqlchorus.core.state import ErrorRecord, SqlchorusState, UsageRecord
from sqlchorus.core.updates import KeywordsUpdate
from sqlchorus.tools.examples import fewshot
from sqlchorus.tools.models.parsing import extract_list

NODE = "extract_keywords"

_STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have how in is it many much of on or "
    "show list give find the their them there these this those to was were what when where which "
    "who whose why with all each every any number name names me tell return".split()
)


def fallback_keywords(question: str) -> list[str]:
    """Content words and quoted phrases of the question, in order, without repeats."""
    quoted = re.findall(r"['\"]([^'\"]+)['\"]", question)
    words = [w for w in re.findall(r"[\w'-]+", question) if w.lower() not in _STOPWORDS and len(w) > 1]
    seen: set[str] = set()
    out = []
    for item in quoted + words:
        if item.lower() not in seen:
            seen.add(item.lower())
            out.append(item)
    return out


def _examples_text(settings) -> str:
    parts = []
    for i, ex in enumerate(fewshot.examples(NODE, settings), 1):
        parts.append(
            f'Example {i}:\nQuestion: "{ex["question"]}"\nHint: "{ex["evidence"]}"\n\n{ex["keywords"]!r}'
        )
    return "\n\n".join(parts)


def extract_keywords(state: SqlchorusState, runtime: Runtime[Context]) -> KeywordsUpdate:
    question = state["question"]
    if runtime.context.settings.keywords == "question":  # no model call: the question's words
        return {"keywords": fallback_keywords(" ".join(filter(None, (question, state.get("evidence")))))}
    prompt = prompts.render(
        NODE,
        examples=_examples_text(runtime.context.settings),
        question=question,
        evidence=state.get("evidence") or "(none)",
    )
    usage: list[UsageRecord] = []
    errors: list[ErrorRecord] = []
    text = try_call_model(
        runtime.context, usage, errors, node=NODE, suffix="; using the question's words instead.",
        role="keywords", prompt=prompt,
    )
    if text is None:
        return {"keywords": fallback_keywords(question), "usage": usage, "errors": errors}
    keywords = extract_list(text)
    update: KeywordsUpdate = {"usage": usage}
    if keywords is None:
        keywords = fallback_keywords(question)
        update["errors"] = [
            {"node": NODE, "kind": "parse", "message": "The model returned no keyword list; using the question's words instead."}
        ]
    update["keywords"] = keywords
    return update
