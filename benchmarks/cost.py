"""Model calls and prompt tokens per question, for each preset.

Runs the first N Spider dev questions (default 100) through ``sqlchorus.ask`` under each preset
with a scripted model that answers instantly with the gold SQL, and counts every model call and
the tokens of the prompt actually sent (system and user messages), with tiktoken's ``o200k_base``
encoding (GPT-4o's). Presets run whatever generators are registered; the JSON says which.

Prints one JSON line per preset: ``preset``, ``generators``, ``calls_median``, ``calls_mean``,
``tokens_median``, ``tokens_mean``, ``calls_max``, ``tokens_max`` and ``by_node`` (calls and
tokens per question, median and mean, per node), with the number of questions, and
``expected_calls``: what ``sqlchorus ask --explain-preset`` says the preset costs (``typical``,
when every candidate runs and agrees, which is what a gold-answering model measures; ``most``,
with every fixer round and every pairwise comparison).

    python benchmarks/cost.py [--preset fast|balanced|full|paper|tiny ...] [--limit 100]

The count is :func:`sqlchorus.tools.models.tokens.tiktoken_counter`'s: without a network, the
``o200k_base`` file shipped in the ``bpe-openai`` package seeds tiktoken's cache.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import sqlchorus
from sqlchorus.config.presets import PRESET_NAMES
from sqlchorus.config.settings import Settings
from sqlchorus.graph.expected_calls import expected_calls
from sqlchorus.testing import ScriptedChatModel, oracle_model
from sqlchorus.tools.models.tokens import tiktoken_counter

ENCODING = "o200k_base"


def data_dir() -> Path:
    default = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    return Path(os.environ.get("SQLCHORUS_DATA", default))


def encoding():
    """tiktoken's o200k_base counter (seeded from bpe-openai's copy when there is no network)."""
    counter = tiktoken_counter("gpt-4o")
    if counter is None:
        raise RuntimeError("Counting tokens needs tiktoken and bpe-openai: pip install 'sqlchorus[bench]'.")
    return counter


class TokenCountingModel(ScriptedChatModel):
    """A scripted model whose usage reports real prompt and answer token counts."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        result = super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        counter = _ENCODER[0]
        prompt = sum(counter.count(str(m.content)) for m in messages)
        message = result.generations[0].message
        answer = counter.count(str(message.content))
        message.usage_metadata = {"input_tokens": prompt, "output_tokens": answer, "total_tokens": prompt + answer}
        return result


_ENCODER: list[Any] = []


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values) if values else 0, "mean": round(statistics.fmean(values), 2) if values else 0}


def measure(preset: str, chosen: list[dict], root: Path, model: ScriptedChatModel) -> dict[str, Any]:
    settings = Settings(model=model, trace_dir=None, preset=preset)
    calls: list[int] = []
    tokens: list[int] = []
    nodes: set[str] = set()
    per_question: list[dict[str, list[int]]] = []
    answered = 0
    session = sqlchorus.Session(settings)
    for ex in chosen:
        db = root / "database" / ex["db_id"] / f"{ex['db_id']}.sqlite"
        result = session.ask(ex["question"], db=db)
        answered += result.ok
        calls.append(len(result.usage))
        tokens.append(sum(u["input_tokens"] for u in result.usage))
        mine: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for u in result.usage:
            mine[u["node"]][0] += 1
            mine[u["node"]][1] += u["input_tokens"]
            nodes.add(u["node"])
        per_question.append(mine)
    session.close()
    by_node = {}
    for node in sorted(nodes):
        node_calls = [q[node][0] if node in q else 0 for q in per_question]
        node_tokens = [q[node][1] if node in q else 0 for q in per_question]
        by_node[node] = {
            "calls_median": summary(node_calls)["median"], "calls_mean": summary(node_calls)["mean"],
            "tokens_median": summary(node_tokens)["median"], "tokens_mean": summary(node_tokens)["mean"],
        }
    return {
        "preset": preset,
        "generators": settings.generators,
        "pairwise": getattr(settings, "pairwise", None),
        "questions": len(chosen),
        "answered": answered,
        "calls_median": summary(calls)["median"],
        "calls_mean": summary(calls)["mean"],
        "calls_max": max(calls, default=0),
        "tokens_median": summary(tokens)["median"],
        "tokens_mean": summary(tokens)["mean"],
        "tokens_max": max(tokens, default=0),
        "tokenizer": f"tiktoken {ENCODING}",
        "by_node": by_node,
        "expected_calls": {k: expected_calls(settings)[k] for k in ("typical", "selection_max", "most")},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", action="append", choices=PRESET_NAMES, help="preset to measure (repeatable; default all)")
    parser.add_argument("--limit", type=int, default=100)
    args = parser.parse_args(argv)

    root = data_dir() / "spider"
    examples = json.loads((root / "dev.json").read_text(encoding="utf-8"))
    runnable = [ex for ex in examples if (root / "database" / ex["db_id"] / f"{ex['db_id']}.sqlite").exists()]
    chosen = runnable[: args.limit]
    gold: dict[str, str] = {}
    for ex in chosen:
        gold.setdefault(ex["question"], ex["query"])
    _ENCODER.append(encoding())
    model = TokenCountingModel(oracle_model(gold.get).responses, name="scripted-zero-latency")
    for preset in args.preset or PRESET_NAMES:
        print(json.dumps(measure(preset, chosen, root, model)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
