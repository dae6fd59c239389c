"""How fast the viewer shows a large run, and how much it ships.

Makes a run with the ``full`` preset over the demo database (a scripted model answering each
question with its gold SQL), then grows its trace to ``--spans`` spans (its SQL spans repeated
under their node, with new ids), starts ``sqlchorus ui`` and opens that run's page in
headless Chromium (Debian's package) ``--repeat`` times, each in a freshly loaded page: the time
from navigation to the page usable (graph, answer, candidates and the waterfall tree's first rows
drawn); then, in that page, the time to reach the last span (scrolled to the bottom of the tree,
its row drawn), to collapse every node and expand them again, and to filter the spans by kind and
by text. The waterfall draws only the rows in view, so these hold at any number of spans. Also
the time of the JSON the page reads, and the bytes of the shipped assets.

Prints one JSON line.

    python benchmarks/viewer.py [--spans 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp(prefix="sqlchorus-bench-viewer-"))
    gold = {q["question"]: q["sql"] for q in load_demo_questions()}
    settings = Settings(preset="full", trace_dir=str(folder / "traces"), checkpoints=str(folder / "cp.sqlite"),
                        cache=False)
    with Session(settings, model=oracle_model(gold.get)) as session:
        result = session.ask("How many orders were shipped to New York?")
    real = Path(result.trace_path).read_text(encoding="utf-8").splitlines()
    big_id = result.run_id  # the same run, so that its checkpoints (candidates, calls) are found
    trace = folder / "traces" / f"{big_id}.jsonl"
    trace.write_text("\n".join(grown(real, args.spans, big_id)) + "\n", encoding="utf-8")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = ["ui", "--port", str(port), "--model", "python:server_factories:mixed", "--trace-dir", str(folder / "traces"),
           "--checkpoints", str(folder / "cp.sqlite")]
    out: dict = {"spans": args.spans, "real_run_spans": len(real)}
    with running(cmd, folder, server_env(folder), base + "/api/runs"):
        api_times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            data = httpx.get(f"{base}/api/runs/{big_id}", timeout=60).json()
            api_times.append(time.perf_counter() - start)
        assert len(data["spans"]) == args.spans, len(data["spans"])
        loads, usable, last_row, toggles, filters = [], [], [], [], []
        last_span = data["spans"][-1]["span_id"]

        def timed(page, action: str, ready: str) -> float:
            """Milliseconds, measured in the page, from ``action`` to ``ready`` being true."""
            return page.evaluate(f"""async () => {{
                const start = performance.now();
                {action}
                while (!({ready})) await new Promise(r => requestAnimationFrame(r));
                return performance.now() - start;
            }}""")

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--no-first-run", "--disable-sync", "--disable-quic"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(base + "/")
            page.wait_for_selector("#runs tbody tr")
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
                                     f"'{args.spans:,} of')"))
                filters.append(timed(page, "const s = document.getElementById('waterfall-kind'); s.value = 'LLM';"
                                           " s.dispatchEvent(new Event('change'));",
                                     "[...document.querySelectorAll('#waterfall .wf-row .kind')].every(k => k.textContent === 'LLM')"))
                filters.append(timed(page, "const t = document.getElementById('waterfall-text'); t.value = 'orders';"
                                           " t.dispatchEvent(new Event('input'));",
                                     "document.getElementById('waterfall-count').textContent.includes(' of ')"))
                page.evaluate("""() => { const s = document.getElementById('waterfall-kind'); s.value = '';
                                 s.dispatchEvent(new Event('change')); const t = document.getElementById('waterfall-text');
                                 t.value = ''; t.dispatchEvent(new Event('input')); }""")
            browser.close()
    out["page_usable_ms_first_read"] = round(first_read * 1000, 1)
    out["page_usable_ms_median"] = round(statistics.median(usable) * 1000, 1)
    out["page_usable_ms_max"] = round(max(usable) * 1000, 1)
    out["last_span_shown_ms_median"] = round(statistics.median(last_row), 1)
    out["page_load_ms_median"] = round(statistics.median(loads) * 1000, 1)
    out["page_load_ms_max"] = round(max(loads) * 1000, 1)
    out["collapse_expand_ms_max"] = round(max(toggles), 1)
    out["filter_ms_max"] = round(max(filters), 1)
    out["api_ms_median"] = round(statistics.median(api_times) * 1000, 1)
    assets = {p.name: p.stat().st_size for p in sorted(ASSETS.iterdir()) if p.is_file()}
    out["assets_bytes"] = assets
    out["assets_bytes_total"] = sum(assets.values())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
