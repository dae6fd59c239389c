"""Mutation testing of the modules that decide safety and answers, and a report of the survivors.

    python benchmarks/mutation/run.py [--group NAME ...] [--survivors] [--label TEXT]

mutmut (the ``mutation`` extra; ``[tool.mutmut]`` in pyproject.toml) copies the package into
``mutants/``, rewrites each function there into its original and its mutants, and runs, for each
mutant, the quick-tier tests that call the function (the tests of ``tests.txt`` beside this
file, as its run of them recorded). The working tree is never written: a mutant lives only in
that copy, which follows the package's links, so no path in it leads back here (this script
checks that before any test runs). One worker, as the machine is shared.

The scope is by function: :data:`SCOPE` names, per group, the functions whose rules are judged
(a selection's vote, the fixer's stopping, LIST's search, the servers' access checks, result
comparison), leaving out the prompt and message builders around them. ``--survivors``
re-runs only the mutants that survived last time, after new tests: a mutant killed stays
killed while no test is taken away. Mutants listed in ``equivalent.json`` (the function, the
line as it was and as the mutant has it, and why no test can tell them apart) are counted apart.

Prints one JSON line of figures, writes ``REPORT.md`` beside this file (the figures, every
recorded run's, and each survivor with its diff) and records the run under ``--label`` in
``runs.json``.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MUTANTS = REPO / "mutants"
EQUIVALENT = HERE / "equivalent.json"
RUNS = HERE / "runs.json"
REPORT = HERE / "REPORT.md"

SCOPE: dict[str, dict[str, list[str]]] = {
    "selection": {
        "sqlchorus.tools.candidates.selection": [
            "voting_pool", "cluster", "vote", "tournament", "tournament_calls_of", "tournament_calls", "play",
            "pairwise_scores", "reasoned_verdict",
        ],
        "sqlchorus.core.selection": ["choose", "_pairwise"],
        "sqlchorus.core.vote_rules": ["decide", "tally", "Ballot.*"],
        "sqlchorus.core.vote_rules.*": ["*"],
    },
    "compare": {
        "sqlchorus.tools.sql.compare": ["*"],
    },
    "fixer": {
        "sqlchorus.core.candidates": ["is_broken", "fix_record", "can_fix", "tried"],
        "sqlchorus.nodes.fix_candidates": ["fix_candidates"],
        "sqlchorus.graph.routing": ["after_check"],
    },
    "list": {
        "sqlchorus.graph.routing": ["after_plan", "after_verify", "after_traceback"],
        "sqlchorus.core.list_search": ["recursion_limit", "sampling"],
        "sqlchorus.nodes.list_verify_step": ["*"],
        "sqlchorus.nodes.list_traceback": ["*"],
        "sqlchorus.nodes.generate_list": ["candidate_of"],
    },
    "access": {
        "sqlchorus.interfaces.http_guard": ["is_loopback", "_hostname", "token_weakness", "server_token", "Guard.*"],
    },
    "guards": {
        "sqlchorus.tools.sql.text": ["check_bounds", "parse"],
        "sqlchorus.tools.engines.base": ["check_single_query", "bounded_text", "refuse_writing", "Database._limits"],
        "sqlchorus.tools.engines.sqlite_guard": ["authorize", "open_guarded", "value_size", "capped_rows", "run", "_rows",
                                                "GuardState.*"],
        "sqlchorus.tools.engines.duckdb_guard": ["settings", "open_guarded", "run", "plain"],
        "sqlchorus.tools.engines.duckdb": ["_function_name", "_refusal_reason", "_refuse_call", "_reads_column",
                                           "_check_value_name", "_check_functions", "_check_tables",
                                           "check_duckdb_query"],
        "sqlchorus.tools.engines.postgres_check": ["*"],
        "sqlchorus.tools.engines.mysql_check": ["*"],
    },
    "scoring": {
        "sqlchorus.evaluation.scoring": [
            "default_metrics", "parse_metrics", "read_spider_predictions", "read_bird_predictions", "_is_int",
            "_bird_sql", "read_predictions", "one_line", "_check_query", "_spider_texts", "_score_spider",
            "_soft_f1", "_same_rows", "_score_bird", "_gold_rows", "_pred_rows", "_score_task", "_ves", "_aligned",
            "summarize", "_bird_figures", "_percent",
        ],
        "sqlchorus.evaluation.soft_f1": ["*"],
        "sqlchorus.evaluation.ves": ["*"],
    },
}
"""Per group, each module's functions under test (``Class.method``, or ``*`` for every one)."""

STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
          37: "caught by type check", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout",
          -11: "segfault", -9: "segfault", None: "not checked"}
"""mutmut's exit codes by what they mean (its ``status_by_exit_code``)."""


def patterns(groups: list[str]) -> list[str]:
    """mutmut's names of the mutants in ``groups`` as shell-style patterns."""
    found = []
    for group in groups:
        for module, functions in SCOPE[group].items():
            for function in functions:
                cls, _, method = function.rpartition(".")
                mangled = "x*" if function == "*" else f"x\u01c1{cls}\u01c1{method}" if cls else f"x_{function}"
                found.append(f"{module}.{mangled}__mutmut_*")
    return found


def in_scope(name: str, groups: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns(groups))


def results() -> dict[str, int | None]:
    """Every mutant's exit code, by name, from mutmut's records in ``mutants/``."""
    codes: dict[str, int | None] = {}
    for meta in MUTANTS.rglob("*.py.meta"):
        codes.update(json.loads(meta.read_text(encoding="utf-8")).get("exit_code_by_key", {}))
    return codes


def source_of(name: str) -> Path:
    module = name.partition("__mutmut_")[0].rpartition(".")[0]
    path = MUTANTS.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


_modules: dict[Path, Any] = {}


def diff_of(name: str) -> str:
    """The mutant's change as a unified diff of its function (each copy parsed once)."""
    import libcst
    from mutmut.mutation.diff_apply import read_mutant_function, read_original_function

    path = source_of(name)
    if path not in _modules:
        _modules[path] = libcst.parse_module(path.read_text(encoding="utf-8"))
    module = _modules[path]
    before, after = (libcst.Module([f]).code.strip().splitlines()
                     for f in (read_original_function(module, name), read_mutant_function(module, name)))
    where = str(path.relative_to(MUTANTS))
    return "\n".join(difflib.unified_diff(before, after, fromfile=where, tofile=where, lineterm=""))


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    lines = diff.splitlines()[2:]  # after the two file headers
    return ([l[1:].strip() for l in lines if l.startswith("-")], [l[1:].strip() for l in lines if l.startswith("+")])


def function_of(name: str) -> str:
    """``sqlchorus.tools.candidates.selection.vote`` or ``...http_guard.Guard._refusal``."""
    module, _, mangled = name.partition("__mutmut_")[0].rpartition(".")
    if mangled.startswith("x_"):
        return f"{module}.{mangled[2:]}"
    _, cls, method = mangled.split("\u01c1")
    return f"{module}.{cls}.{method}"


def equivalent_reason(name: str, diff: str, known: list[dict[str, Any]]) -> str | None:
    removed, added = changed_lines(diff)
    for entry in known:
        if entry["function"] == function_of(name) and entry["from"] == removed and entry["to"] == added:
            return entry["why"]
    return None


def check_copy() -> None:
    """mutmut writes mutants into ``mutants/`` only; a link in it could lead a write back into the
    working tree, so none may be there."""
    links = [p for p in MUTANTS.rglob("*") if p.is_symlink()] if MUTANTS.exists() else []
    if links:
        raise SystemExit(f"mutants/ holds links ({', '.join(map(str, links[:3]))}): remove mutants/ and run again")


def mutmut(args: list[str], env: dict[str, str]) -> int:
    # mutmut's command line, with the guards' worker scripts runnable once mutated (see there).
    return subprocess.run([sys.executable, str(HERE / "mutmut_workers.py"), *args], cwd=REPO, env=env).returncode


def run(groups: list[str], names: list[str] | None, max_children: int) -> dict[str, float]:
    env = {**os.environ}
    # The tests run from inside mutants/, where the default data folder (beside the checkout, see
    # tests/conftest.py) would be looked for one level too deep.
    env.setdefault("SQLCHORUS_DATA", str((REPO.parent / "shared" / "data").resolve()))
    # Each mutant's tests make their temporary folders here, and the next session removes them:
    # in memory where the system has a folder for it, as removing them from disk takes longer.
    shm = Path("/dev/shm")
    base = (shm if shm.is_dir() else Path(tempfile.gettempdir())) / f"sqlchorus-mutation-{os.getuid()}"
    env["PYTEST_ADDOPTS"] = f"{env.get('PYTEST_ADDOPTS', '')} --basetemp={base} -p fastest_first".strip()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
    check_copy()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    code = mutmut(["run", "--max-children", str(max_children), *(names if names is not None else patterns(groups))],
                  env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    check_copy()
    if code != 0:
        raise SystemExit(f"mutmut run ended with status {code}")
    return {"wall_s": round(time.monotonic() - start, 1),
            "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1)}


def figures(groups: list[str], sample: int = 0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    known = json.loads(EQUIVALENT.read_text(encoding="utf-8")) if EQUIVALENT.exists() else []
    codes = {k: v for k, v in results().items() if in_scope(k, groups)
             and (sample <= 1 or int(k.rpartition("_")[2]) % sample == 0)}
    counts: Counter[str] = Counter()
    by_group: dict[str, Counter[str]] = {g: Counter() for g in groups}
    survivors = []
    for name, code in sorted(codes.items()):
        status = STATUS.get(code, "suspicious")
        if status == "survived":
            diff = diff_of(name)
            why = equivalent_reason(name, diff, known)
            if why:
                status = "equivalent"
            survivors.append({"name": name, "function": function_of(name), "diff": diff, "equivalent": why})
        counts[status] += 1
        for g in groups:
            if in_scope(name, [g]):
                by_group[g][status] += 1
    return {"counts": dict(counts), "by_group": {g: dict(c) for g, c in by_group.items()}}, survivors


def rate(counts: dict[str, int]) -> float | None:
    """Survivors among the mutants a test could tell apart (killed, timed out or survived)."""
    judged = counts.get("killed", 0) + counts.get("timeout", 0) + counts.get("survived", 0)
    return round(100.0 * counts.get("survived", 0) / judged, 1) if judged else None


def write_report(groups: list[str], summary: dict[str, Any], survivors: list[dict[str, Any]],
                 runs: dict[str, Any]) -> None:
    counts = summary["counts"]
    lines = [
        "# Mutation testing: the survivors",
        "",
        "Written by `benchmarks/mutation/run.py` (`make mutation`); see docs/mutation.md for how to run it and",
        "what the figures mean. A survivor is a mutant no test told from the code as written; an",
        "equivalent one (listed in `benchmarks/mutation/equivalent.json`, with why) is a change that no",
        "test can tell apart, such as a bound no input reaches.",
        "",
        f"Groups: {', '.join(groups)}.",
        "",
        "| group | mutants | killed | survived | equivalent | no tests | timeout | survival rate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for group, c in [*summary["by_group"].items(), ("all", counts)]:
        total = sum(c.values())
        lines.append(f"| {group} | {total} | {c.get('killed', 0)} | {c.get('survived', 0)} | {c.get('equivalent', 0)} | "
                     f"{c.get('no tests', 0)} | {c.get('timeout', 0)} | {rate(c)}% |")
    lines += ["", "The survival rate is survivors over the mutants killed, timed out or survived (equivalent",
              "mutants and those no test reaches are left out of it; a mutant no test reaches is a gap of its own).",
              "", "## Recorded runs", "",
              "| run | date | groups | mutants | killed | survived | equivalent | no tests | survival rate | CPU | wall |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, r in runs.items():
        c = r["counts"]
        sampled = f" (one mutant in {r['sample']})" if r.get("sample") else ""
        lines.append(f"| {label} | {r['date']} | {', '.join(r['groups'])}{sampled} | {sum(c.values())} | {c.get('killed', 0)} | "
                     f"{c.get('survived', 0)} | {c.get('equivalent', 0)} | {c.get('no tests', 0)} | {rate(c)}% | "
                     f"{r['time']['cpu_s'] / 60:.1f} min | {r['time']['wall_s'] / 60:.1f} min |")
    alive = [s for s in survivors if not s["equivalent"]]
    lines += ["", f"## Survivors ({len(alive)})", ""]
    for s in alive:
        lines += [f"### `{s['name']}`", "", "```diff", s["diff"], "```", ""]
    equivalent = [s for s in survivors if s["equivalent"]]
    lines += [f"## Equivalent mutants ({len(equivalent)})", ""]
    for s in equivalent:
        removed, added = changed_lines(s["diff"])
        lines += [f"- `{s['name']}`: `{' '.join(removed)}` → `{' '.join(added)}`: {s['equivalent']}"]
    REPORT.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", action="append", choices=sorted(SCOPE), help="a group of modules (all by default)")
    parser.add_argument("--survivors", action="store_true", help="re-run only the mutants that survived last time")
    parser.add_argument("--unkilled", action="store_true",
                        help="run every mutant no test has killed or timed out yet (after new tests: a killed "
                             "one stays killed)")
    parser.add_argument("--sample", type=int, default=0, metavar="N",
                        help="run one mutant in N of each function (by mutmut's numbers), to estimate cheaply; "
                             "like --survivors and --unkilled, it reads the mutants of an earlier run")
    parser.add_argument("--only", action="append", metavar="PATTERN",
                        help="run only the mutants of the groups whose names match (mutmut's names, * for any text)")
    parser.add_argument("--report-only", action="store_true", help="write the report from the last results")
    parser.add_argument("--label", default=None, help="record this run's figures under this name in runs.json")
    parser.add_argument("--max-children", type=int, default=1, help="mutants tested at once (1 by default)")
    args = parser.parse_args(argv)
    groups = args.group or list(SCOPE)
    time_taken = {"wall_s": 0.0, "cpu_s": 0.0}
    if not args.report_only:
        names = None
        if args.survivors:
            names = sorted(k for k, v in results().items() if v == 0 and in_scope(k, groups))
            if not names:
                print("no survivors to run again", file=sys.stderr)
        if args.unkilled:
            names = sorted(k for k, v in results().items()
                           if STATUS.get(v) not in ("killed", "timeout") and in_scope(k, groups))
        if args.sample > 1:
            pool = names if names is not None else [k for k in results() if in_scope(k, groups)]
            names = sorted(n for n in pool if int(n.rpartition("_")[2]) % args.sample == 0)
        if args.only:
            names = [p for p in args.only] if names is None else \
                [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in args.only)]
        if names != []:
            time_taken = run(groups, names, args.max_children)
    summary, survivors = figures(groups, sample=args.sample)
    runs = json.loads(RUNS.read_text(encoding="utf-8")) if RUNS.exists() else {}
    if args.label:
        runs[args.label] = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "groups": groups,
                            "sample": args.sample if args.sample > 1 else None,
                            "counts": summary["counts"], "by_group": summary["by_group"], "time": time_taken}
        RUNS.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
    write_report(groups, summary, survivors, runs)
    print(json.dumps({**summary, "survival_rate": rate(summary["counts"]), "time": time_taken}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
