"""What the servers add to a question, and how many they answer at once.

With a scripted model that answers instantly (each demo question with its gold SQL), measured in
one run on the bundled demo database, every run with its trace file and SQLite checkpoints:

* ``inprocess``: ``Session.ask``, one question at a time: the baseline.
* ``rest``: ``POST /v1/ask`` to a ``sqlchorus serve`` process on loopback.
* ``mcp``: the ``ask`` tool of ``sqlchorus mcp --transport http``, through the SDK's client.
  The three take turns, question by question, so that the machine's other work falls on all
  three alike.
* ``rest_50``: 50 clients at once against one server: requests per second, latency.
* ``inprocess_50``: the same 50-way load on one in-process session (8 threads, as the server's
  8 workers): the ceiling the server is compared with.
* ``postgres_1`` and ``postgres_2``: 50 clients against one server, then two servers, sharing
  runs and checkpoints in a PostgreSQL server the benchmark starts (skipped without PostgreSQL).
* ``beside_expensive``: an MCP server (``sqlchorus mcp --transport http``) is sent four
  expensive statements at once (``execute_sql``: recursive CTEs of about ``--expensive-s``
  seconds each alone) by another client (from 127.0.0.2), and meanwhile one client asks plain
  questions (``ask``) one after another until the four have ended; over ``--rounds`` rounds it
  gives the asks' p50/p95 and when each expensive statement ended. Once with one statement
  worker per database (``--statement-workers 1``, how the servers ran statements before the
  pool) and once with the default pool, in the same run.

Prints one JSON line: p50/p95 latency of each, the added p50/p95 of REST and MCP over in-process,
and the throughputs.

    python benchmarks/serve.py [--requests 100] [--load 300] [--rounds 5] [--expensive-s 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from statement_parallelism import BUDGET_S, EXPENSIVE, calibrate  # noqa: E402

from servers import PostgresServer, free_port, postgres_bin, running, server_env  # noqa: E402
from sqlchorus import Session  # noqa: E402
from sqlchorus.config.settings import Settings  # noqa: E402
from sqlchorus.runs.demo import demo_db_path, load_demo_questions  # noqa: E402
from sqlchorus.testing import oracle_model  # noqa: E402

CLIENTS = 50


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(latencies: list[float], seconds: float | None = None) -> dict[str, Any]:
    out = {"n": len(latencies), "p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
           "p95_ms": round(percentile(latencies, 0.95) * 1000, 2),
           "mean_ms": round(statistics.mean(latencies) * 1000, 2)}
    if seconds is not None:
        out["requests_per_s"] = round(len(latencies) / seconds, 2)
    return out


def server_args(kind: str, folder: Path, port: int, checkpoints: str) -> list[str]:
    common = ["--port", str(port), "--model", "python:server_factories:mixed", "--no-cache",
              "--trace-dir", str(folder / "traces"), "--checkpoints", checkpoints]
    return ["serve", *common] if kind == "rest" else ["mcp", "--transport", "http", *common]


def load(bases: list[str], questions: list[str], total: int) -> tuple[list[float], float]:
    """``total`` questions from ``CLIENTS`` clients at once, spread over ``bases``."""

    async def main() -> tuple[list[float], float]:
        latencies: list[float] = []
        queue = list(range(total))
        async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=CLIENTS * 2)) as client:
            async def worker(w: int) -> None:
                while queue:
                    i = queue.pop()
                    start = time.perf_counter()
                    response = await client.post(f"{bases[i % len(bases)]}/v1/ask",
                                                 json={"question": questions[i % len(questions)]})
                    if response.status_code != 200 or response.json().get("error"):
                        raise RuntimeError(f"request failed: {response.status_code} {response.text[:300]}")
                    latencies.append(time.perf_counter() - start)

            start = time.perf_counter()
            await asyncio.gather(*[worker(w) for w in range(CLIENTS)])
            return latencies, time.perf_counter() - start

    return asyncio.run(main())


def beside_expensive(root: Path, statement_workers: int, depth: int, rounds: int,
                     questions: list[str]) -> dict[str, Any]:
    """Plain asks from one client while another runs four expensive statements, on one MCP server."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    folder = root / f"beside-{statement_workers}"
    folder.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    args = [*server_args("mcp", folder, port, str(folder / "cp.sqlite")), "--statement-workers", str(statement_workers),
            "--timeout", str(BUDGET_S)]

    async def rounds_of_asks() -> tuple[list[float], list[list[float]]]:
        asks: list[float] = []
        ends: list[list[float]] = []
        # The expensive statements come from another address: a server counts a client's
        # statements by its remote address, and one client holds at most half of the workers.
        other = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(local_address="127.0.0.2"),
                                   timeout=httpx2.Timeout(BUDGET_S))
        async with other, Client(streamable_http_client(url)) as asker, \
                Client(streamable_http_client(url, http_client=other)) as heavy:
            assert not (await asker.call_tool("ask", {"question": questions[0]})).is_error
            for _ in range(rounds):
                start = time.perf_counter()
                ended: list[float] = []

                async def expensive() -> None:
                    called = await heavy.call_tool("execute_sql", {"sql": EXPENSIVE.replace("?", str(depth))})
                    assert not called.is_error, called.content
                    ended.append(time.perf_counter() - start)

                tasks = [asyncio.create_task(expensive()) for _ in range(4)]
                await asyncio.sleep(0.2)  # the four are under way
                i = 0
                while len(ended) < 4 and i < 1000:  # bounded: the four end within their budget
                    question = questions[i % len(questions)]
                    i += 1
                    asked = time.perf_counter()
                    called = await asker.call_tool("ask", {"question": question})
                    assert not called.is_error, called.content
                    # Every ask sent while the four were under way counts (the loop sends none after).
                    asks.append(time.perf_counter() - asked)
                await asyncio.gather(*tasks)
                ends.append(sorted(ended))
        return asks, ends

    with running(args, folder, server_env(folder), url):
        asks, ends = asyncio.run(rounds_of_asks())
    return {"statement_workers": statement_workers, "asks": summary(asks),
            "expensive_end_s": [round(statistics.median(r[k] for r in ends), 2) for k in range(4)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100, help="sequential questions per interface")
    parser.add_argument("--load", type=int, default=300, help="questions in each 50-client load")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of four expensive statements")
    parser.add_argument("--expensive-s", type=float, default=2.0, help="an expensive statement's length alone")
    parser.add_argument("--only", choices=["beside_expensive"], help="run only this part")
    args = parser.parse_args()
    gold = {q["question"]: q["sql"] for q in load_demo_questions()}
    questions = list(gold)
    root = Path(tempfile.mkdtemp(prefix="sqlchorus-bench-serve-"))
    out: dict[str, Any] = {"model": "scripted, zero latency", "database": "demo", "clients": CLIENTS}
    depth, alone = calibrate(demo_db_path(), args.expensive_s)
    out["beside_expensive"] = {"expensive_alone_s": round(alone, 2), "cpus": os.cpu_count(), "rounds": args.rounds,
                               **{f"workers_{n}": beside_expensive(root, n, depth, args.rounds, questions)
                                  for n in (1, 4)}}
    if args.only:
        print(json.dumps(out))
        return

    # One question at a time through each interface, taken in turn (in process, REST, MCP) so
    # that whatever else the machine does falls on all three alike.
    settings = Settings(trace_dir=str(root / "inproc" / "traces"), checkpoints=str(root / "inproc" / "cp.sqlite"),
                        cache=False)
    folders = {name: root / name for name in ("rest", "mcp")}
    for folder in folders.values():
        folder.mkdir()
    ports = {name: free_port() for name in folders}
    base = f"http://127.0.0.1:{ports['rest']}"
    mcp_url = f"http://127.0.0.1:{ports['mcp']}/mcp"
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    with Session(settings, model=oracle_model(gold.get)) as session, \
            running(server_args("rest", folders["rest"], ports["rest"], str(folders["rest"] / "cp.sqlite")),
                    folders["rest"], server_env(folders["rest"]), base + "/v1/health"), \
            running(server_args("mcp", folders["mcp"], ports["mcp"], str(folders["mcp"] / "cp.sqlite")),
                    folders["mcp"], server_env(folders["mcp"]), mcp_url):

        async def in_turn() -> dict[str, list[float]]:
            times: dict[str, list[float]] = {"inprocess": [], "rest": [], "mcp": []}
            async with httpx.AsyncClient(timeout=60) as http, Client(streamable_http_client(mcp_url)) as mcp:
                for i in range(args.requests + 1):  # the first round opens everything: not counted
                    question = questions[i % len(questions)]
                    start = time.perf_counter()
                    result = await asyncio.to_thread(session.ask, question)
                    lap = [time.perf_counter() - start]
                    assert result.ok, result.error
                    start = time.perf_counter()
                    response = await http.post(f"{base}/v1/ask", json={"question": question})
                    lap.append(time.perf_counter() - start)
                    assert response.status_code == 200 and response.json()["error"] is None, response.text
                    start = time.perf_counter()
                    called = await mcp.call_tool("ask", {"question": question})
                    lap.append(time.perf_counter() - start)
                    assert not called.is_error, called.content
                    if i:
                        for name, seconds in zip(times, lap):
                            times[name].append(seconds)
            return times

        for name, seconds in asyncio.run(in_turn()).items():
            out[name] = summary(seconds)

        def one(i: int) -> float:
            start = time.perf_counter()
            assert session.ask(questions[i % len(questions)]).ok
            return time.perf_counter() - start

        start = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            loaded = list(pool.map(one, range(args.load)))
        out["inprocess_50"] = summary(loaded, time.perf_counter() - start)
        loaded, seconds = load([base], questions, args.load)
        out["rest_50"] = summary(loaded, seconds)

    for name in ("rest", "mcp"):
        out[f"{name}_added_p50_ms"] = round(out[name]["p50_ms"] - out["inprocess"]["p50_ms"], 2)
        out[f"{name}_added_p95_ms"] = round(out[name]["p95_ms"] - out["inprocess"]["p95_ms"], 2)

    # One and two servers sharing PostgreSQL.
    if postgres_bin() is None:
        out["postgres"] = "skipped: PostgreSQL's server programs are not installed"
    else:
        pg = PostgresServer().start()
        try:
            for count in (1, 2):
                url = pg.new_database()
                bases, contexts = [], []
                for n in range(count):
                    folder = root / f"pg{count}-{n}"
                    folder.mkdir()
                    port = free_port()
                    bases.append(f"http://127.0.0.1:{port}")
                    contexts.append(running(server_args("rest", folder, port, url), folder, server_env(folder),
                                            bases[-1] + "/v1/health"))
                for context in contexts:
                    context.__enter__()
                try:
                    for b in bases:
                        httpx.post(f"{b}/v1/ask", json={"question": questions[0]}, timeout=60)
                    loaded, seconds = load(bases, questions, args.load)
                    out[f"postgres_{count}"] = summary(loaded, seconds)
                finally:
                    for context in reversed(contexts):
                        context.__exit__(None, None, None)
        finally:
            pg.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
