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
* ``health_under_load`` (``--only health_under_load``): 100 clients ask questions without pause
  for ``--health-s`` seconds, every run taken (``max_pending_runs`` 200), while one more client
  reads ``/v1/health`` every 50 ms: the health reads' p50/p95, with one server over a SQLite
  store and two servers sharing a PostgreSQL store (skipped without PostgreSQL).
* ``store_away`` (``--only store_away``): a server over a PostgreSQL store the benchmark stops
  (immediate mode, as a crash); how long the first request after that takes (``POST /v1/runs``,
  and ``GET`` of an unknown run), and what it is answered, over ``--rounds`` outages.

``--code DIR`` runs the servers from the sqlchorus checkout in DIR (put first on their
``PYTHONPATH``), to measure an earlier version (``git worktree add /tmp/before HEAD``) with the
same benchmark.

Prints one JSON line: p50/p95 latency of each, the added p50/p95 of REST and MCP over in-process,
and the throughputs.

    python benchmarks/serve.py [--requests 100] [--load 300] [--rounds 5] [--expensive-s 2]
    python benchmarks/serve.py --only health_under_load [--health-s 30] [--code DIR]
    python benchmarks/serve.py --only store_away [--rounds 5] [--code DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from statement_parallelism import BUDGET_S, EXPENSIVE, calibrate  # noqa: E402

from servers import (  # noqa: E402
    PostgresServer,
    free_port,
    halt_postgres,
    postgres_bin,
    restart_postgres,
    running,
    server_env,
)
from sqlchorus import Session  # noqa: E402
from sqlchorus.config.settings import Settings  # noqa: E402
from sqlchorus.runs.demo import demo_db_path, load_demo_questions  # noqa: E402
from sqlchorus.testing import oracle_model  # noqa: E402

CLIENTS = 50
HEALTH_CLIENTS = 100
"""Clients asking at once while ``/v1/health`` is read (``health_under_load``)."""
HEALTH_EVERY_S = 0.05
CODE: str | None = None
"""``--code``: the checkout the servers run from, or None for this one."""


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


def env_of(folder: Path, **extra: str) -> dict[str, str]:
    """The servers' environment: the scripted model's, with ``--code`` first on the path."""
    env = server_env(folder, **extra)
    if CODE:
        env["PYTHONPATH"] = os.pathsep.join([CODE, env["PYTHONPATH"]])
    return env


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

    with running(args, folder, env_of(folder), url):
        asks, ends = asyncio.run(rounds_of_asks())
    return {"statement_workers": statement_workers, "asks": summary(asks),
            "expensive_end_s": [round(statistics.median(r[k] for r in ends), 2) for k in range(4)]}


def servers(root: Path, name: str, count: int, checkpoints: str | None, **env: str) -> tuple[list[str], list[Any]]:
    """``count`` REST servers (``checkpoints``: a shared store, or a SQLite file each): their
    base URLs and their running contexts, entered."""
    bases, contexts = [], []
    for n in range(count):
        folder = root / f"{name}-{n}"
        folder.mkdir()
        port = free_port()
        bases.append(f"http://127.0.0.1:{port}")
        store = checkpoints or str(folder / "cp.sqlite")
        contexts.append(running(server_args("rest", folder, port, store), folder, env_of(folder, **env),
                                bases[-1] + "/v1/health"))
    for context in contexts:
        context.__enter__()
    return bases, contexts


def health_under_load(bases: list[str], questions: list[str], seconds: float) -> dict[str, Any]:
    """``HEALTH_CLIENTS`` clients asking over ``bases`` for ``seconds`` while one more reads the
    first server's health every ``HEALTH_EVERY_S``, from a thread of its own (so that its
    timings are not the load's event loop's)."""
    health: list[float] = []
    codes: dict[int, int] = {}
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(timeout=120) as client:
            while not stop.is_set():
                start = time.perf_counter()
                response = client.get(f"{bases[0]}/v1/health")
                health.append(time.perf_counter() - start)
                codes[response.status_code] = codes.get(response.status_code, 0) + 1
                stop.wait(HEALTH_EVERY_S)

    async def asking() -> tuple[list[float], int]:
        asked: list[float] = []
        refused = 0
        deadline = time.monotonic() + seconds
        limits = httpx.Limits(max_connections=HEALTH_CLIENTS * 2)
        async with httpx.AsyncClient(timeout=600, limits=limits) as client:
            async def worker(w: int) -> None:
                nonlocal refused
                i = w
                while time.monotonic() < deadline:
                    start = time.perf_counter()
                    response = await client.post(f"{bases[i % len(bases)]}/v1/ask",
                                                 json={"question": questions[i % len(questions)]})
                    i += 1
                    if response.status_code == 200 and not response.json().get("error"):
                        asked.append(time.perf_counter() - start)
                    elif response.status_code in (429, 503):  # a refusal that passes: wait as told
                        refused += 1
                        await asyncio.sleep(min(float(response.headers.get("retry-after", 1)), 2.0))
                    else:
                        raise RuntimeError(f"request failed: {response.status_code} {response.text[:300]}")

            await asyncio.gather(*[worker(w) for w in range(HEALTH_CLIENTS)])
        return asked, refused

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        asked, refused = asyncio.run(asking())
    finally:
        stop.set()
        prober.join(timeout=180)
    return {"servers": len(bases), "clients": HEALTH_CLIENTS, "seconds": seconds,
            "health": {**summary(health), "max_ms": round(max(health) * 1000, 2),
                       "status_codes": {str(k): v for k, v in sorted(codes.items())}},
            "asks": summary(asked, seconds) if asked else {"n": 0}, "asks_refused": refused}


def health_part(root: Path, questions: list[str], seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    bases, contexts = servers(root, "health-sqlite", 1, None, SQLCHORUS_MAX_PENDING_RUNS="200")
    try:
        for base in bases:  # the first question opens the database and its index: not counted
            httpx.post(f"{base}/v1/ask", json={"question": questions[0]}, timeout=120)
        out["sqlite_1"] = health_under_load(bases, questions, seconds)
    finally:
        for context in reversed(contexts):
            context.__exit__(None, None, None)
    if postgres_bin() is None:
        out["postgres_2"] = "skipped: PostgreSQL's server programs are not installed"
        return out
    pg = PostgresServer().start()
    try:
        bases, contexts = servers(root, "health-pg", 2, pg.new_database(), SQLCHORUS_MAX_PENDING_RUNS="200")
        try:
            for base in bases:
                httpx.post(f"{base}/v1/ask", json={"question": questions[0]}, timeout=120)
            out["postgres_2"] = health_under_load(bases, questions, seconds)
        finally:
            for context in reversed(contexts):
                context.__exit__(None, None, None)
    finally:
        pg.stop()
    return out


def store_away(root: Path, questions: list[str], rounds: int) -> dict[str, Any]:
    """The first requests after the PostgreSQL store stops: their latency and status."""
    if postgres_bin() is None:
        return {"skipped": "PostgreSQL's server programs are not installed"}
    pg = PostgresServer().start()
    first: list[float] = []
    unknown: list[float] = []
    statuses: dict[str, int] = {}
    try:
        bases, contexts = servers(root, "away", 1, pg.new_database(), SQLCHORUS_RUN_HEARTBEAT_S="30")
        base = bases[0]
        try:
            with httpx.Client(timeout=120) as client:
                for _ in range(rounds):
                    assert client.post(f"{base}/v1/ask", json={"question": questions[0]}).status_code == 200
                    halt_postgres(pg)
                    start = time.perf_counter()
                    response = client.post(f"{base}/v1/runs", json={"question": questions[0]})
                    first.append(time.perf_counter() - start)
                    key = f"{response.status_code} {response.json().get('error', {}).get('kind', '')}".strip()
                    statuses[key] = statuses.get(key, 0) + 1
                    start = time.perf_counter()
                    client.get(f"{base}/v1/runs/20990101T000000-00000000")
                    unknown.append(time.perf_counter() - start)
                    restart_postgres(pg)
                    deadline = time.monotonic() + 120
                    while client.get(f"{base}/v1/health").status_code != 200:  # bounded: 120 s
                        if time.monotonic() > deadline:
                            raise RuntimeError("the store was not found back within 120 s")
                        time.sleep(0.2)
        finally:
            for context in reversed(contexts):
                context.__exit__(None, None, None)
    finally:
        pg.stop()
    return {"rounds": rounds, "first_request": {**summary(first), "max_ms": round(max(first) * 1000, 2)},
            "first_request_statuses": statuses,
            "next_request": {**summary(unknown), "max_ms": round(max(unknown) * 1000, 2)}}


def main() -> None:
    global CODE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100, help="sequential questions per interface")
    parser.add_argument("--load", type=int, default=300, help="questions in each 50-client load")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of four expensive statements")
    parser.add_argument("--expensive-s", type=float, default=2.0, help="an expensive statement's length alone")
    parser.add_argument("--health-s", type=float, default=30.0, help="how long health is read under load")
    parser.add_argument("--only", choices=["beside_expensive", "health_under_load", "store_away"],
                        help="run only this part")
    parser.add_argument("--code", help="run the servers from the sqlchorus checkout in this folder")
    args = parser.parse_args()
    CODE = str(Path(args.code).resolve()) if args.code else None
    gold = {q["question"]: q["sql"] for q in load_demo_questions()}
    questions = list(gold)
    root = Path(tempfile.mkdtemp(prefix="sqlchorus-bench-serve-"))
    out: dict[str, Any] = {"model": "scripted, zero latency", "database": "demo", "clients": CLIENTS,
                           "code": CODE or "this checkout", "cpus": os.cpu_count()}
    if args.only == "health_under_load":
        out["health_under_load"] = health_part(root, questions, args.health_s)
        print(json.dumps(out))
        return
    if args.only == "store_away":
        out["store_away"] = store_away(root, questions, args.rounds)
        print(json.dumps(out))
        return
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
                    folders["rest"], env_of(folders["rest"]), base + "/v1/health"), \
            running(server_args("mcp", folders["mcp"], ports["mcp"], str(folders["mcp"] / "cp.sqlite")),
                    folders["mcp"], env_of(folders["mcp"]), mcp_url):

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
                bases, contexts = servers(root, f"pg{count}", count, pg.new_database())
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
