"""How fast the viewer shows a large run and a large evaluation, and how much it ships.

Run pages: makes a run with the ``full`` preset over the demo database (a scripted model
answering each question with its gold SQL), then grows its trace to each of ``--spans`` spans (its
SQL spans repeated under their node, with new ids), starts ``sqlchorus ui`` and opens that run's
page in headless Chromium (Debian's package) ``--repeat`` times, each in a freshly loaded page: the
time from navigation to the page usable (graph, answer, candidates and the waterfall tree's first
rows drawn); then, in that page, the time to reach the last span (scrolled to the bottom of the
tree, its row drawn), to collapse every node and expand them again, and to filter the spans by
kind and by text. The waterfall draws only the rows in view, so these hold at any number of spans.
Also the time of the JSON the page reads, and the bytes of the shipped assets.

Evaluation page: a real ``sqlchorus eval`` of one Spider dev question (a scripted model) gives
the record and trace of one question as the evaluation writes them; they are repeated for
``--questions`` of Spider dev's questions (their own text, database, hardness and gold SQL; one in
five answered wrongly), each with its own run id and trace file, in the same folder layout
(records.jsonl, run.json, summary.json, report.html, traces/). Then ``#/eval/<name>`` is opened
``--repeat`` times: the time to the first question's row drawn (usable), to the page's first
frame painted with every section (fully drawn; the table draws its first 100 questions, more on
asking), to the table filtered to the wrong answers and by a search, and to all its questions
drawn ("Show all").

Prints one JSON line; the screenshots are written under ``--out`` (a new temporary folder when
not given) and named in it.

    python benchmarks/viewer.py [--spans 1000 10000] [--questions 1034] [--repeat 5] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from servers import free_port, running, server_env  # noqa: E402
from sqlchorus import Session  # noqa: E402
from sqlchorus.config.settings import Settings  # noqa: E402
from sqlchorus.interfaces.viewer import ASSETS  # noqa: E402
from sqlchorus.runs.demo import load_demo_questions  # noqa: E402
from sqlchorus.testing import oracle_model  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def grown(lines: list[str], spans: int, run_id: str) -> list[str]:
    """The trace ``lines`` with its SQL spans repeated until there are ``spans`` spans."""
    parsed = [json.loads(line) for line in lines]
    sql = [s for s in parsed if s["name"] == "sql"]
    out = list(parsed)
    i = 0
    while len(out) < spans and sql:
        copy = json.loads(json.dumps(sql[i % len(sql)]))
        copy["context"]["span_id"] = "0x" + uuid.uuid4().hex[:16]
        copy["resource"]["attributes"]["sqlchorus.run_id"] = run_id
        out.append(copy)
        i += 1
    return [json.dumps(s) for s in out]


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync", "--disable-quic"]

FACTORIES = """
import json, os

from sqlchorus.testing import oracle_model


def answers():
    with open(os.environ["ANSWERS"], encoding="utf-8") as f:
        table = json.load(f)
    return oracle_model(table.get, name="answers")
"""

WRONG_EVERY = 5
"""One question in this many is answered wrongly in the evaluation made for its page."""


def timed(page, action: str, ready: str) -> float:
    """Milliseconds, measured in the page, from ``action`` to ``ready`` being true."""
    return page.evaluate(f"""async () => {{
        const start = performance.now();
        {action}
        while (!({ready})) await new Promise(r => requestAnimationFrame(r));
        return performance.now() - start;
    }}""")


def painted(page, action: str, ready: str) -> tuple[float, float]:
    """Milliseconds from ``action`` to ``ready`` being true, and to the next frame painted after."""
    return tuple(page.evaluate(f"""async () => {{
        const start = performance.now();
        {action}
        while (!({ready})) await new Promise(r => requestAnimationFrame(r));
        const ready = performance.now() - start;
        await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
        return [ready, performance.now() - start];
    }}"""))


def run_pages(args, folder: Path, shots: Path, p) -> list[dict]:
    """The run page's figures at each of ``args.spans`` spans."""
    gold = {q["question"]: q["sql"] for q in load_demo_questions()}
    settings = Settings(preset="full", trace_dir=str(folder / "traces"), checkpoints=str(folder / "cp.sqlite"),
                        cache=False)
    questions = list(gold)
    made = []
    with Session(settings, model=oracle_model(gold.get)) as session:
        for n, spans in enumerate(args.spans):
            result = session.ask(questions[n % len(questions)])
            real = Path(result.trace_path).read_text(encoding="utf-8").splitlines()
            # The same run, so that its checkpoints (candidates, calls) are found.
            trace = folder / "traces" / f"{result.run_id}.jsonl"
            trace.write_text("\n".join(grown(real, spans, result.run_id)) + "\n", encoding="utf-8")
            made.append((spans, result.run_id, trace, len(real)))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = ["ui", "--port", str(port), "--model", "python:server_factories:mixed", "--trace-dir", str(folder / "traces"),
           "--checkpoints", str(folder / "cp.sqlite")]
    found = []
    with running(cmd, folder, server_env(folder), base + "/api/runs"):
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        for spans, big_id, trace, real_spans in made:
            out: dict = {"spans": spans, "real_run_spans": real_spans}
            api_times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                data = httpx.get(f"{base}/api/runs/{big_id}", timeout=60).json()
                api_times.append(time.perf_counter() - start)
            assert len(data["spans"]) == spans, len(data["spans"])
            loads, usable, last_row, toggles, filters = [], [], [], [], []
            last_span = data["spans"][-1]["span_id"]
            for n in range(args.repeat + 1):
                page.goto(base + "/")
                page.wait_for_selector("#runs tbody tr")
                if n == 0:  # the first open reads the trace file afresh (the viewer keeps what it read)
                    os.utime(trace, None)
                    httpx.get(base + "/api/runs", timeout=60)
                start = time.perf_counter()
                page.goto(f"{base}/#/run/{big_id}")
                page.wait_for_selector("#candidates tbody tr")
                page.wait_for_selector("#waterfall .wf-row", state="attached")
                if n == 0:
                    first_read = time.perf_counter() - start
                    continue
                usable.append(time.perf_counter() - start)
                last_row.append(timed(page, "const v = document.getElementById('waterfall'); v.scrollTop = v.scrollHeight;",
                                      f"document.querySelector('#waterfall [data-span=\"{last_span}\"]')"))
                loads.append(time.perf_counter() - start)
                toggles.append(timed(page, "document.getElementById('waterfall-collapse').click()",
                                     "document.getElementById('waterfall-count').textContent.startsWith('1 of')"
                                     " || document.querySelectorAll('#waterfall .wf-row').length < 40"))
                toggles.append(timed(page, "document.getElementById('waterfall-expand').click()",
                                     "document.getElementById('waterfall-count').textContent.startsWith("
                                     f"'{spans:,} of')"))
                filters.append(timed(page, "const s = document.getElementById('waterfall-kind'); s.value = 'LLM';"
                                           " s.dispatchEvent(new Event('change'));",
                                     "[...document.querySelectorAll('#waterfall .wf-row .kind')].every(k => k.textContent === 'LLM')"))
                filters.append(timed(page, "const t = document.getElementById('waterfall-text'); t.value = 'orders';"
                                           " t.dispatchEvent(new Event('input'));",
                                     "document.getElementById('waterfall-count').textContent.includes(' of ')"))
                page.evaluate("""() => { const s = document.getElementById('waterfall-kind'); s.value = '';
                                 s.dispatchEvent(new Event('change')); const t = document.getElementById('waterfall-text');
                                 t.value = ''; t.dispatchEvent(new Event('input')); }""")
            shot = shots / f"run-{spans}-spans.png"
            page.screenshot(path=str(shot))
            out["page_usable_ms_first_read"] = round(first_read * 1000, 1)
            out["page_usable_ms_median"] = round(statistics.median(usable) * 1000, 1)
            out["page_usable_ms_max"] = round(max(usable) * 1000, 1)
            out["last_span_shown_ms_median"] = round(statistics.median(last_row), 1)
            out["page_load_ms_median"] = round(statistics.median(loads) * 1000, 1)
            out["page_load_ms_max"] = round(max(loads) * 1000, 1)
            out["collapse_expand_ms_max"] = round(max(toggles), 1)
            out["filter_ms_max"] = round(max(filters), 1)
            out["api_ms_median"] = round(statistics.median(api_times) * 1000, 1)
            out["screenshot"] = str(shot)
            found.append(out)
        browser.close()
    return found


def make_evaluation(folder: Path, questions: int) -> tuple[Path, str, int]:
    """An evaluation folder of ``questions`` Spider dev questions as ``sqlchorus eval`` writes
    it: one question evaluated for real gives the record and trace every question's are made
    from. Its folder of evaluations, its name, and how many questions are wrong."""
    from sqlchorus.evaluation.datasets import load_dataset

    examples = load_dataset("spider-dev").examples[:questions]
    (folder / "factories.py").write_text(FACTORIES, encoding="utf-8")
    (folder / "gold.json").write_text(json.dumps({e.question: e.gold_sql for e in examples[:1]}), encoding="utf-8")
    evals, name = folder / "evals", "spider-dev-full"
    out = evals / name
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SQLCHORUS_")},
           "SQLCHORUS_DATA": os.environ.get("SQLCHORUS_DATA", ""), "PYTHONPATH": str(folder),
           "ANSWERS": str(folder / "gold.json"), "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-m", "sqlchorus", "eval", "--dataset", "spider-dev", "--limit", "1",
                           "--model", "python:factories:answers", "--no-cache", "--out", str(out)],
                          capture_output=True, text=True, cwd=folder, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    template = json.loads((out / "records.jsonl").read_text(encoding="utf-8").splitlines()[0])
    template_trace = (out / "traces" / f"{template['run_id']}.jsonl").read_text(encoding="utf-8")
    (out / "traces" / f"{template['run_id']}.jsonl").unlink()
    stamp = template["run_id"].split("-")[0]
    records, wrong = [], 0
    for i, e in enumerate(examples):
        run_id = f"{stamp}-{uuid.uuid4().hex[:8]}"
        bad = i % WRONG_EVERY == WRONG_EVERY - 1
        wrong += bad
        prediction = "SELECT 'not the answer'" if bad else e.gold_sql
        verdict = "wrong" if bad else "correct"
        db_path = str(Path(template["db_path"]).parent.parent / e.db_id / f"{e.db_id}.sqlite")
        record = {**template, "index": i, "question_id": i, "db_id": e.db_id, "db_path": db_path,
                  "difficulty": e.difficulty, "question": e.question, "gold_sql": e.gold_sql, "prediction": prediction,
                  "correct": not bad, "verdict": verdict, "run_id": run_id,
                  "candidates": [{**c, "sql": prediction, "correct": not bad, "verdict": verdict}
                                 for c in template.get("candidates") or []]}
        records.append(json.dumps(record))
        (out / "traces" / f"{run_id}.jsonl").write_text(
            template_trace.replace(template["run_id"], run_id).replace(template["question"], e.question), encoding="utf-8")
    (out / "records.jsonl").write_text("\n".join(records) + "\n", encoding="utf-8")
    meta = json.loads((out / "run.json").read_text(encoding="utf-8"))
    meta.update(n_questions=len(examples), limit=None)
    (out / "run.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return evals, name, wrong


def eval_page(args, folder: Path, shots: Path, p) -> dict:
    """The evaluation page's figures at ``args.questions`` questions."""
    evals, name, wrong = make_evaluation(folder, args.questions)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = ["ui", "--port", str(port), "--no-cache", "--trace-dir", str(folder / "ui-traces"),
           "--checkpoints", str(folder / "ui-cp.sqlite"), "--evals-dir", str(evals)]
    out: dict = {"questions": args.questions, "wrong": wrong}
    with running(cmd, folder, server_env(folder), base + "/api/runs"):
        start = time.perf_counter()
        data = httpx.get(f"{base}/api/evals/{name}", timeout=600).json()
        out["api_ms_first_read"] = round((time.perf_counter() - start) * 1000, 1)
        assert len(data["questions"]) == args.questions, len(data["questions"])
        api_times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            httpx.get(f"{base}/api/evals/{name}", timeout=600)
            api_times.append(time.perf_counter() - start)
        out["api_ms_median"] = round(statistics.median(api_times) * 1000, 1)
        out["api_bytes"] = len(httpx.get(f"{base}/api/evals/{name}", timeout=600).content)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        usable, drawn, by_verdict, by_text, every, rows_drawn = [], [], [], [], [], 0
        for n in range(args.repeat):
            page.goto(f"{base}/?{n}#/evals")  # a page loaded afresh: no filter kept from the last repeat
            page.wait_for_selector("#evals tbody tr")
            ready, painted_ms = painted(
                page, f"location.hash = '#/eval/{name}';",
                "document.querySelector('#questions tbody tr[data-question]')"
                " && document.getElementById('chart-hardness')")
            usable.append(ready)
            drawn.append(painted_ms)
            rows_drawn = page.evaluate("document.querySelectorAll('#questions tbody tr[data-question]').length")
            assert page.locator("#eval-count").inner_text().startswith(f"{args.questions:,} of") or \
                page.locator("#eval-count").inner_text().startswith(f"{args.questions} of")
            by_verdict.append(painted(page, "const s = document.getElementById('filter-verdict'); s.value = 'wrong';"
                                            " s.dispatchEvent(new Event('change'));",
                                      f"/^{wrong:,} of|^{wrong} of/.test(document.getElementById('eval-count').textContent)")[1])
            page.evaluate("() => { const s = document.getElementById('filter-verdict'); s.value = '';"
                          " s.dispatchEvent(new Event('change')); }")
            every.append(painted(page, "document.getElementById('questions-all').click();",
                                 "document.querySelectorAll('#questions tbody tr[data-question]').length"
                                 f" === {args.questions}")[1])
            by_text.append(painted(page, "const t = document.getElementById('filter-q'); t.value = 'singer';"
                                         " t.dispatchEvent(new Event('input'));",
                                   f"!/^{args.questions:,} of|^{args.questions} of/"
                                   ".test(document.getElementById('eval-count').textContent)")[1])
        out["searched_shown"] = page.locator("#eval-count").inner_text()
        page.evaluate("() => { const t = document.getElementById('filter-q'); t.value = '';"
                      " t.dispatchEvent(new Event('input')); }")
        shot = shots / f"eval-{args.questions}-questions.png"
        page.screenshot(path=str(shot))
        browser.close()
    out["rows_drawn"] = rows_drawn
    out["page_usable_ms_median"] = round(statistics.median(usable), 1)
    out["page_usable_ms_max"] = round(max(usable), 1)
    out["fully_drawn_ms_median"] = round(statistics.median(drawn), 1)
    out["fully_drawn_ms_max"] = round(max(drawn), 1)
    out["filter_wrong_ms_median"] = round(statistics.median(by_verdict), 1)
    out["filter_search_ms_median"] = round(statistics.median(by_text), 1)
    out["show_all_rows_ms_median"] = round(statistics.median(every), 1)
    out["screenshot"] = str(shot)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--questions", type=int, default=1_034, help="questions of the evaluation (Spider dev has 1,034)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", help="folder for the screenshots (a new temporary one when not given)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp(prefix="sqlchorus-bench-viewer-"))
    shots = Path(args.out) if args.out else folder / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        out: dict = {"run_pages": run_pages(args, folder, shots, p), "eval_page": eval_page(args, folder, shots, p)}
    assets = {f.name: f.stat().st_size for f in sorted(ASSETS.iterdir()) if f.is_file()}
    out["assets_bytes"] = assets
    out["assets_bytes_total"] = sum(assets.values())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
