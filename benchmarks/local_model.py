"""The offline model (local:smollm2) on this machine: speed, and what its answers are worth.

Prints one JSON line with:

* ``speed``: prompt and generation tokens per second of SmolLM2-135M (Q4_1) through
  llama-cpp-python, for a Spider-sized prompt: the real generation prompt sqlchorus sends for the
  first Spider dev question (captured by running the graph with a recording model), at 1 thread
  and at every core. Prompt speed is one batch evaluation of the whole prompt; generation speed
  is greedy decoding of ``--gen-tokens`` tokens, one at a time, after it.
* ``with_grammar`` / ``without_grammar``: over the first ``--limit`` Spider dev questions, run
  end to end with ``local:smollm2`` (``--fix-rounds`` fixer rounds), the share of final answers
  that execute without error on the database, and execution accuracy (Spider semantics, from
  :mod:`sqlchorus.evaluation.scoring`), plus seconds per question.

Run: ``.venv/bin/python benchmarks/local_model.py [--limit 50] [--fix-rounds 1] [--max-tokens 256]``;
``--only grammar|no-grammar`` and ``--threads 1`` let the two modes run side by side. The speed
figure needs llama-cpp-python; the rest runs on the local extra. No network, no cache.

``--demo-suite`` instead runs the demo's questions (``sqlchorus/data/demo_questions.json``) over
the demo database the way ``sqlchorus demo`` answers them (``local:smollm2`` with the ``tiny``
preset) and prints one JSON line with the share of answers that execute (``executable``), the
share that are correct (``correct``, the gold's rows, in order where the gold orders them) and
``seconds_per_question``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _spider_prompt(example: Any) -> str:
    """The generation prompt the graph sends for ``example``, captured with a recording model."""
    import sqlchorus
    from sqlchorus.config.settings import Settings
    from sqlchorus.testing import ScriptedChatModel, prompt_text, role_of_call

    captured: list[str] = []

    def record(messages):
        text = prompt_text(messages)
        if role_of_call() == "generation":
            captured.append(text)
        return "['x']" if role_of_call() == "keywords" else "SELECT 1"

    sqlchorus.ask(example.question, db=example.db_path, settings=Settings(
        model=ScriptedChatModel(record), fix_rounds=0, trace_dir=None))
    if not captured:
        raise RuntimeError("the graph sent no generation prompt")
    return captured[0]


def measure_speed(prompt: str, gen_tokens: int, threads: int) -> dict[str, Any]:
    from llama_cpp import Llama

    from sqlchorus.core.local_model import find_smollm2

    llm = Llama(model_path=str(find_smollm2()), n_ctx=4096, n_threads=threads, n_batch=512, verbose=False)
    messages = [{"role": "user", "content": prompt}]
    # The chat template the model ships, applied as llama-cpp-python applies it.
    text = _templated(llm, messages)
    tokens = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    llm.reset()
    start = time.perf_counter()
    llm.eval(tokens)
    prompt_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(gen_tokens):
        token = llm.sample(top_k=1, temp=0.0)
        llm.eval([token])
    gen_s = time.perf_counter() - start
    return {
        "threads": threads,
        "prompt_tokens": len(tokens),
        "prompt_tokens_per_s": round(len(tokens) / prompt_s, 1),
        "generated_tokens": gen_tokens,
        "generation_tokens_per_s": round(gen_tokens / gen_s, 1),
    }


def _templated(llm: Any, messages: list[dict[str, str]]) -> str:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = llm.metadata["tokenizer.chat_template"]
    eos = llm._model.token_get_text(llm.token_eos())
    bos = llm._model.token_get_text(llm.token_bos())
    formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
    return formatter(messages=messages).prompt


def run_accuracy(
    examples: list[Any], *, grammar: bool, fix_rounds: int, max_tokens: int, threads: int | None,
    model_timeout_s: float,
) -> dict[str, Any]:
    import sqlchorus
    from sqlchorus.config.settings import Settings
    from sqlchorus.core.models import resolve_model
    from sqlchorus.evaluation.datasets import Dataset
    from sqlchorus.evaluation.scoring import score_predictions
    from sqlchorus.tools.sql.compare import spider_order_matters, spider_result_eq
    from sqlchorus.tools.engines.sqlite import GuardedDatabase, SqlError

    model = resolve_model("local:smollm2", max_tokens=max_tokens)
    if threads:
        model.n_threads = threads
    settings = Settings(
        model=model, fix_rounds=fix_rounds, max_tokens=max_tokens, grammar=grammar,
        cache=False, trace_dir=None, model_timeout_s=model_timeout_s,
    )
    predictions: list[str | None] = []
    executes = 0
    model_errors = 0
    tokens_out = 0
    start = time.perf_counter()
    for number, example in enumerate(examples, 1):
        result = sqlchorus.ask(example.question, db=example.db_path, settings=settings)
        print(f"[{'grammar' if grammar else 'no grammar'}] {number}/{len(examples)} "
              f"{time.perf_counter() - start:.0f} s: {result.sql or result.error}", file=sys.stderr, flush=True)
        model_errors += sum(1 for e in result.errors if e.get("kind") == "model")
        tokens_out += result.cost["output_tokens"]
        sql = result.sql
        if sql is None:
            # No answer: the best-effort candidate, if any, is what a user would see.
            sql = next((c["sql"] for c in result.candidates if c.get("sql")), None)
        predictions.append(sql)
        runs = correct_here = False
        if sql:
            try:
                with GuardedDatabase(example.db_path, timeout_s=30) as db:
                    rows = db.execute(sql).rows
                    gold = db.execute(example.gold_sql).rows
                runs = True
                correct_here = spider_result_eq(gold, rows, spider_order_matters(example.gold_sql))
            except SqlError:
                pass
        executes += runs
        # One line per question, so an interrupted run still leaves measured figures.
        print(json.dumps({"mode": "grammar" if grammar else "no-grammar", "n": number, "executes": runs,
                          "correct": correct_here}), file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    dataset = Dataset(name="spider-dev-head", benchmark="spider", examples=list(examples), source=Path("."))
    report = score_predictions(dataset, predictions)
    correct = sum(1 for v in report.verdicts if v.correct)
    n = len(examples)
    return {
        "questions": n,
        "answers_execute_pct": round(100.0 * executes / n, 1),
        "execution_accuracy_pct": round(100.0 * correct / n, 1),
        "no_sql": sum(1 for p in predictions if not p),
        "model_errors": model_errors,
        "output_tokens": tokens_out,
        "seconds_per_question": round(seconds / n, 2),
    }


def run_demo_suite(threads: int | None, model_timeout_s: float) -> dict[str, Any]:
    import sqlchorus
    from sqlchorus.config.settings import Settings
    from sqlchorus.runs.demo import demo_db_path, load_demo_questions
    from sqlchorus.tools.sql.compare import spider_order_matters, spider_result_eq
    from sqlchorus.tools.engines.sqlite import GuardedDatabase, SqlError

    questions = load_demo_questions()
    settings = Settings(preset="tiny", model="local:smollm2", cache=False, trace_dir=None,
                        model_timeout_s=model_timeout_s)
    executes = correct = 0
    start = time.perf_counter()
    with sqlchorus.Session(settings) as session, GuardedDatabase(demo_db_path(), timeout_s=30) as db:
        if threads:
            for model in session.dependencies.models.values():
                model.n_threads = threads
        for number, q in enumerate(questions, 1):
            result = session.ask(q["question"], db=demo_db_path(), evidence=q.get("evidence") or "")
            sql = result.sql or next((c["sql"] for c in result.candidates if c.get("sql")), None)
            runs = right = False
            if sql:
                try:
                    rows = db.execute(sql).rows
                    runs = True
                    right = spider_result_eq(db.execute(q["sql"]).rows, rows, spider_order_matters(q["sql"]))
                except SqlError:
                    pass
            executes += runs
            correct += right
            print(json.dumps({"n": number, "question": q["question"], "sql": sql, "executes": runs,
                              "correct": right}), file=sys.stderr, flush=True)
    n = len(questions)
    return {
        "benchmark": "local_model", "suite": "demo", "model": "local:smollm2", "preset": "tiny",
        "questions": n, "executable": round(executes / n, 3), "correct": round(correct / n, 3),
        "seconds_per_question": round((time.perf_counter() - start) / n, 2), "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=50, help="Spider dev questions to run (from the first).")
    parser.add_argument("--fix-rounds", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=256, help="output cap per model call")
    parser.add_argument("--gen-tokens", type=int, default=64, help="tokens decoded for the speed figure")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--only", choices=("grammar", "no-grammar"), help="run one accuracy mode only")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads of the model in the accuracy runs (default: every core)")
    parser.add_argument("--model-timeout", type=float, default=600.0,
                        help="time budget per model call; a cold 3,700-token prompt on one slow core takes minutes")
    parser.add_argument("--demo-suite", action="store_true",
                        help="run the demo's questions as sqlchorus demo answers them, and nothing else")
    args = parser.parse_args(argv)
    if args.demo_suite:
        print(json.dumps(run_demo_suite(args.threads, args.model_timeout)))
        return 0

    from sqlchorus.evaluation.datasets import load_dataset

    dataset = load_dataset("spider-dev")
    examples = [e for e in dataset.examples if e.db_path is not None][: args.limit]
    out: dict[str, Any] = {
        "benchmark": "local_model", "model": "local:smollm2 (SmolLM2-135M-Instruct Q4_1)",
        "cpus": os.cpu_count(), "limit": len(examples), "fix_rounds": args.fix_rounds,
        "max_tokens": args.max_tokens, "threads": args.threads or os.cpu_count(),
    }
    if not args.skip_speed:
        prompt = _spider_prompt(examples[0])
        out["speed"] = [measure_speed(prompt, args.gen_tokens, t) for t in sorted({1, os.cpu_count() or 1})]
    if not args.skip_accuracy:
        modes = {"with_grammar": True, "without_grammar": False}
        if args.only:
            modes = {k: v for k, v in modes.items() if v == (args.only == "grammar")}
        for key, grammar in modes.items():
            out[key] = run_accuracy(
                examples, grammar=grammar, fix_rounds=args.fix_rounds, max_tokens=args.max_tokens,
                threads=args.threads, model_timeout_s=args.model_timeout,
            )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
