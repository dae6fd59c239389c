"""`--ray ADDRESS`: evaluations, batches and selection on a real Ray cluster of two nodes.

The cluster is a Ray head and a second node, each started by the test as its own `ray start --block`
process on loopback (no cluster is assumed), stopped at the end. The same scripted model answers
locally and on the cluster; the records, the summary's figures and the prediction file must agree
question for question. One test kills a worker in the middle of a question and checks that the
question is answered once, by another worker.
"""

from __future__ import annotations

import json
import re
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import sys
import time
from pathlib import Path

import pytest
from test_evaluate import spider_dev

from conftest import data_dir, wait_for
from servers import free_port

ray = pytest.importorskip("ray")

LIMIT = 8
WRONG = {3: "SELECT 'not the answer'", 6: "SELECT name FROM singer"}
VOLATILE = {"run_id", "seconds", "model_seconds", "trace_path", "checkpoint_path"}
"""What differs between two runs of the same question anywhere: its id, its times, and where its
files are (each run folder's own)."""

FACTORIES = '''
import json, os, time
from pathlib import Path

from sqlchorus.testing import oracle_model, question_of, prompt_text

GATES = Path(os.environ["TEST_GATES"])


def answers():
    """Answers each question with the SQL $ANSWERS gives it."""
    with open(os.environ["ANSWERS"], encoding="utf-8") as f:
        table = json.load(f)
    return oracle_model(table.get, name="answers")


def held():
    """As answers(), but a question starting with "[hold]" waits at a gate: its worker's pid is
    written to GATES/held.pids, and the call goes on once GATES/held.open exists (at most 120 s)."""
    with open(os.environ["ANSWERS"], encoding="utf-8") as f:
        table = json.load(f)

    def answer_for(question):
        if question.startswith("[hold] "):
            with open(GATES / "held.pids", "a", encoding="utf-8") as f:
                f.write(f"{os.getpid()}\\n")
            deadline = time.monotonic() + 120
            while not (GATES / "held.open").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            question = question[len("[hold] "):]
        return table.get(question)

    return oracle_model(answer_for, name="answers")


def answers_where():
    """As answers(), and each role that asks for the SQL says on which Ray node it ran, in GATES/where.tsv."""
    import ray
    from sqlchorus.testing import role_of_call

    with open(os.environ["ANSWERS"], encoding="utf-8") as f:
        table = json.load(f)

    def answer_for(question):
        with open(GATES / "where.tsv", "a", encoding="utf-8") as f:
            f.write(f"{role_of_call()}\\t{ray.get_runtime_context().get_node_id()}\\n")
        return table.get(question)

    return oracle_model(answer_for, name="answers")
'''


def _ray_program() -> str:
    return str(Path(sys.executable).parent / "ray")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A working folder with the scripted models and their answers, and the environment both the
    command and the cluster's nodes run with."""
    tmp = tmp_path_factory.mktemp("cluster")
    data = spider_dev()
    answers: dict[str, str] = {}
    for i, example in enumerate(data.examples[:LIMIT]):
        answers.setdefault(example.question, WRONG.get(i, example.gold_sql))
    (tmp / "answers.json").write_text(json.dumps(answers), encoding="utf-8")
    (tmp / "factories.py").write_text(FACTORIES, encoding="utf-8")
    (tmp / "gates").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SQLCHORUS_", "RAY_"))}
    env.update(SQLCHORUS_DATA=str(data_dir()), PYTHONPATH=str(tmp), ANSWERS=str(tmp / "answers.json"),
               TEST_GATES=str(tmp / "gates"), NO_COLOR="1", COLUMNS="200",
               SQLCHORUS_RAY_CACHE=str(tmp / "node-cache"), RAY_USAGE_STATS_ENABLED="0",
               # Ray's token authentication, as a cluster is run for real: every node and every
               # command presents the token of this test's own cluster.
               RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(tmp / "ray-token"))
    (tmp / "ray-token").write_text(secrets.token_hex(32), encoding="utf-8")
    return {"tmp": tmp, "env": env, "data": data}


def _start_node(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([_ray_program(), "start", "--block", "--disable-usage-stats", *args],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _stop_node(process: subprocess.Popen) -> None:
    """Stop a node and every process it started (its raylet, its workers): they share its session."""
    if process.poll() is None:
        with_group = os.getpgid(process.pid)
        os.killpg(with_group, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(with_group, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster(work):
    """A Ray head (1 CPU) and a second node (1 CPU), separate processes on loopback."""
    port = free_port()
    tmp, env = work["tmp"], work["env"]
    # Ray's sockets live under its temporary folder, whose path must stay short (107 bytes).
    short = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    head = _start_node(["--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                        "--include-dashboard=false", f"--temp-dir={short}",
                        f"--ray-client-server-port={free_port()}"], env, tmp / "head.log")
    address = f"127.0.0.1:{port}"
    node = None
    try:
        wait_for(lambda: _alive(head, tmp / "head.log") and _answers(address), timeout_s=120, what="the Ray head")
        node = _start_node([f"--address={address}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                            "--resources={\"model_node\": 1}"], env, tmp / "node.log")
        wait_for(lambda: _alive(node, tmp / "node.log") and _nodes(address, env) >= 2, timeout_s=120,
                 what="the second Ray node")
        yield address
    finally:
        if node is not None:
            _stop_node(node)
        _stop_node(head)
        shutil.rmtree(short, ignore_errors=True)


def _alive(process: subprocess.Popen, log: Path) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"a Ray node stopped: {log.read_text(errors='replace')[-2000:]}")
    return True


def _answers(address: str) -> bool:
    import socket

    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def _nodes(address: str, env: dict[str, str]) -> int:
    code = ("import ray, logging; ray.init(address=%r, logging_level=logging.ERROR, log_to_driver=False); "
            "print(sum(1 for n in ray.nodes() if n['Alive']))" % address)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    try:
        return int(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0


def _node_with(address: str, env: dict[str, str], resource: str) -> str:
    """The id of the node that offers ``resource``."""
    code = ("import ray, logging; ray.init(address=%r, logging_level=logging.ERROR, log_to_driver=False); "
            "print([n['NodeID'] for n in ray.nodes() if n['Alive'] and %r in n['Resources']][0])" % (address, resource))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    return out.stdout.strip().splitlines()[-1]


def _sqlchorus(args: list[str], work: dict, *, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sqlchorus", *args], capture_output=True, text=True,
                          cwd=work["tmp"], env=work["env"], timeout=timeout)


def _records(path: Path) -> dict[int, dict]:
    from sqlchorus.evaluation.runs import read_records

    return {i: {k: v for k, v in r.items() if k not in VOLATILE} for i, r in read_records(path).items()}


def _figures(summary: dict) -> dict:
    """The summary's figures, without those that measure time or the machine."""
    drop = {"latency_s", "scoring_elapsed_s", "executor", "run", "generated", "elapsed_s", "files", "out_dir"}
    figures = {k: v for k, v in summary.items() if k not in drop and "seconds" not in k and not k.endswith("_s")}
    figures["wrong"] = [(w["question"], w["verdict"]) for w in summary.get("wrong", [])]  # not their run's id
    return figures


@pytest.mark.slow
def test_an_evaluation_on_the_cluster_is_the_same_as_here(cluster, work):
    tmp = work["tmp"]
    common = ["eval", "--dataset", "spider-dev", "--limit", str(LIMIT), "--model", "python:factories:answers",
              "--no-cache", "--workers", "2", "--json"]
    here = _sqlchorus([*common, "--out", str(tmp / "here")], work)
    assert here.returncode == 0, here.stderr
    there = _sqlchorus([*common, "--out", str(tmp / "there"), "--ray", cluster], work)
    assert there.returncode == 0, there.stderr

    assert _records(tmp / "there" / "records.jsonl") == _records(tmp / "here" / "records.jsonl")
    local, remote = json.loads(here.stdout), json.loads(there.stdout)
    assert _figures(remote) == _figures(local)
    assert remote["n_wrong"] == len(WRONG)
    assert (tmp / "there" / "pred.txt").read_text() == (tmp / "here" / "pred.txt").read_text()
    assert (tmp / "there" / "gold.sql").read_text() == (tmp / "here" / "gold.sql").read_text()
    assert (tmp / "there" / "report.html").is_file()

    # Every remote run's trace and checkpoints are in the run folder, as a local run's are: the
    # debugger opens a wrong question's run from there.
    from sqlchorus.evaluation.runs import read_records

    for record in read_records(tmp / "there" / "records.jsonl").values():
        assert Path(record["trace_path"]).parent == tmp / "there" / "traces"
        assert Path(record["trace_path"]).is_file()
        assert record["checkpoint_path"] == str(tmp / "there" / "traces" / "checkpoints.sqlite")
    shown = _sqlchorus(["debug", "--eval", str(tmp / "there"), "--question", "3"], work)
    assert shown.returncode == 0, shown.stderr
    assert "scored wrong: SELECT 'not the answer'" in shown.stdout
    assert "answer SELECT 'not the answer'" in shown.stdout

    # Run again: every question is kept, none asked again.
    again = _sqlchorus([*common, "--out", str(tmp / "there"), "--ray", cluster], work)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["run"]["n_run"] == 0


@pytest.mark.slow
def test_a_batch_on_the_cluster_is_the_same_as_here(cluster, work):
    tmp, data = work["tmp"], work["data"]
    lines = []
    for i, example in enumerate(data.examples[:LIMIT]):
        line = {"question": example.question, "db": str(example.db_path), "id": f"q{i}"}
        if i % 2 == 0:
            line["gold_sql"] = example.gold_sql
        lines.append(json.dumps(line))
    lines.insert(2, "{not json")
    (tmp / "batch.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    common = ["batch", "--in", "batch.jsonl", "--model", "python:factories:answers", "--no-cache", "--workers", "2",
              "--json"]
    here = _sqlchorus([*common, "--out", "here.jsonl"], work)
    there = _sqlchorus([*common, "--out", "there.jsonl", "--ray", cluster], work)
    assert here.returncode == there.returncode == 1  # the bad line
    assert json.loads(there.stdout) == {**json.loads(here.stdout), "out": "there.jsonl"}

    def by_line(name: str) -> dict:
        rows = [json.loads(s) for s in (tmp / name).read_text().splitlines()]
        return {r["line"]: {k: v for k, v in r.items() if k not in VOLATILE} for r in rows}

    assert by_line("there.jsonl") == by_line("here.jsonl")
    rows = by_line("there.jsonl")
    assert rows[3] == {"index": None, "line": 3, "status": "bad_input", "error": rows[3]["error"]}
    assert "not JSON" in rows[3]["error"]
    judged = {r["question_id"]: r["verdict"] for r in rows.values() if r.get("index") is not None}
    assert judged["q1"] == "unscored" and judged["q0"] == "correct" and judged["q6"] == "wrong"


@pytest.mark.slow
def test_selection_on_the_cluster_is_the_same_as_here(cluster, work):
    tmp, data = work["tmp"], work["data"]
    with open(tmp / "candidates.jsonl", "w", encoding="utf-8") as f:
        for example in data.examples[:LIMIT]:
            f.write(json.dumps({"db": str(example.db_path), "question": example.question,
                                "candidates": [example.gold_sql, "SELECT 1", example.gold_sql, "SELECT x FROM nowhere"]})
                    + "\n")
        f.write(json.dumps({"db": "missing.sqlite", "question": "?", "candidates": ["SELECT 1"]}) + "\n")
    here = _sqlchorus(["select", "--candidates", "candidates.jsonl"], work)
    there = _sqlchorus(["select", "--candidates", "candidates.jsonl", "--ray", cluster, "--workers", "2"], work)
    assert here.returncode == there.returncode == 1
    assert "ray: 2 node(s) with 2 CPU(s)" in there.stderr
    assert there.stdout == here.stdout
    assert len(there.stdout.splitlines()) == LIMIT + 1


@pytest.mark.slow
def test_a_worker_killed_mid_question_has_its_question_answered_once_by_another(cluster, work):
    tmp, data = work["tmp"], work["data"]
    gates = tmp / "gates"
    held = 2
    with open(tmp / "held.jsonl", "w", encoding="utf-8") as f:
        rows = [{"question": ("[hold] " if i == held else "") + e.question, "db": str(e.db_path),
                 "gold_sql": e.gold_sql} for i, e in enumerate(data.examples[:LIMIT])]
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "sqlchorus", "batch", "--in", "held.jsonl", "--out", "held-out.jsonl", "--model",
         "python:factories:held", "--no-cache", "--workers", "2", "--ray", cluster],
        cwd=tmp, env=work["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = gates / "held.pids"
        wait_for(lambda: pids.is_file() and pids.read_text().strip(), timeout_s=300, what="the held question")
        victim = int(pids.read_text().split()[0])
        os.kill(victim, signal.SIGKILL)
        (gates / "held.open").touch()
        out, err = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "was lost" in err
    rows = [json.loads(s) for s in (tmp / "held-out.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == list(range(LIMIT))  # each question once
    again = next(r for r in rows if r["index"] == held)
    assert again["verdict"] == "correct"
    # Each of the question's model calls wrote its worker's pid: the killed one, then another.
    answered_by = list(dict.fromkeys(int(p) for p in pids.read_text().split()))
    assert answered_by[0] == victim and len(answered_by) == 2
    assert f"{LIMIT} of {LIMIT} question(s) answered" in out


@pytest.mark.slow
def test_too_many_workers_for_the_cluster_is_said_before_any_question(cluster, work):
    out = _sqlchorus(["eval", "--dataset", "spider-dev", "--limit", "2", "--model", "python:factories:answers",
                      "--no-cache", "--workers", "3", "--out", str(work["tmp"] / "three"), "--ray", cluster], work)
    assert out.returncode == 3
    assert "The cluster has 2 CPU(s); --workers 3 needs one each" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (work["tmp"] / "three" / "records.jsonl").exists()


@pytest.mark.slow
def test_a_worker_that_cannot_use_the_model_is_said_before_any_question(cluster, work):
    out = _sqlchorus(["eval", "--dataset", "spider-dev", "--limit", "2", "--model", "python:factories:nothing",
                      "--no-cache", "--out", str(work["tmp"] / "nomodel"), "--ray", cluster], work)
    # The name is checked here first; a model the workers cannot import is said by the worker.
    assert out.returncode in (2, 3), out.stderr
    assert "nothing" in out.stderr and "Traceback" not in out.stderr
    assert not (work["tmp"] / "nomodel" / "records.jsonl").exists()


@pytest.mark.slow
def test_no_cluster_at_the_address_is_one_line(work, tmp_path):
    port = free_port()
    out = _sqlchorus(["eval", "--dataset", "spider-dev", "--limit", "1", "--model", "python:factories:answers",
                      "--out", str(tmp_path / "x"), "--ray", f"127.0.0.1:{port}"], work, timeout=120)
    assert out.returncode == 3
    assert out.stderr.strip() == (f"Error: No Ray cluster answers at 127.0.0.1:{port}: start one with "
                                  "`ray start --head` there, or use --ray local.")


@pytest.mark.parametrize("args, says", [
    (["--ray", "head"], "--ray takes local, auto, HOST:PORT or ray://HOST:PORT, not 'head'."),
    (["--ray-resource", "generation=gpu"], "--ray-resource goes with --ray."),
    (["--ray", "local", "--predictions", "p.txt"], "scoring a prediction file (--predictions) runs here"),
])
@pytest.mark.slow
def test_bad_cluster_options_are_refused_before_anything_runs(work, tmp_path, args, says):
    (work["tmp"] / "p.txt").write_text("SELECT 1\n")
    out = _sqlchorus(["eval", "--dataset", "spider-dev", "--limit", "1", "--model", "python:factories:answers",
                      "--out", str(tmp_path / "x"), *args], work, timeout=120)
    assert out.returncode == 2, out.stderr
    assert says in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_a_roles_model_runs_on_the_node_with_its_resource(cluster, work):
    tmp = work["tmp"]
    common = ["eval", "--dataset", "spider-dev", "--limit", "4", "--no-cache"]
    here = _sqlchorus([*common, "--model", "python:factories:answers", "--out", str(tmp / "res-here"), "--json"], work)
    assert here.returncode == 0, here.stderr
    common += ["--model", "python:factories:answers_where"]
    there = _sqlchorus([*common, "--out", str(tmp / "res-there"), "--ray", cluster, "--ray-resource",
                        "generation=model_node"], work)
    assert there.returncode == 0, there.stderr
    assert "generation calls run where model_node is" in there.stderr
    assert _records(tmp / "res-there" / "records.jsonl") == _records(tmp / "res-here" / "records.jsonl")
    # Every generation call ran on the node started with model_node, every other call elsewhere.
    where = [line.split("\t") for line in (tmp / "gates" / "where.tsv").read_text().splitlines()]
    model_node = _node_with(cluster, work["env"], "model_node")
    generation = {node for role, node in where if role == "generation"}
    others = {node for role, node in where if role != "generation"}
    assert generation == {model_node}
    assert others and model_node not in others
    missing = _sqlchorus([*common, "--out", str(tmp / "res-none"), "--ray", cluster, "--ray-resource",
                          "generation=gpu_nowhere"], work)
    assert missing.returncode == 3
    assert "No node of the Ray cluster offers the resource 'gpu_nowhere'" in missing.stderr


@pytest.mark.slow
def test_a_lost_head_keeps_every_finished_record_and_the_batch_resumes(work):
    """A cluster of its own (its head is killed), one question held until the head is gone."""
    tmp, data = work["tmp"], work["data"]
    gates = tmp / "lost-gates"
    gates.mkdir()
    env = {**work["env"], "TEST_GATES": str(gates)}
    port = free_port()
    short = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    head = _start_node(["--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                        "--include-dashboard=false", f"--temp-dir={short}",
                        f"--ray-client-server-port={free_port()}"], env, tmp / "lost-head.log")
    held = 5
    rows = [{"question": ("[hold] " if i == held else "") + e.question, "db": str(e.db_path), "gold_sql": e.gold_sql}
            for i, e in enumerate(data.examples[:LIMIT])]
    (tmp / "lost.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    args = [sys.executable, "-m", "sqlchorus", "batch", "--in", "lost.jsonl", "--out", "lost-out.jsonl", "--model",
            "python:factories:held", "--no-cache", "--workers", "2"]
    try:
        wait_for(lambda: _alive(head, tmp / "lost-head.log") and _answers(f"127.0.0.1:{port}"), timeout_s=120,
                 what="the Ray head")
        process = subprocess.Popen([*args, "--ray", f"127.0.0.1:{port}"], cwd=tmp, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: (gates / "held.pids").is_file(), timeout_s=300, what="the held question")
            _stop_node(head)
            out, err = process.communicate(timeout=300)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    finally:
        _stop_node(head)
        shutil.rmtree(short, ignore_errors=True)
    assert process.returncode == 3, err
    assert "Lost the Ray cluster's head: the records written so far are kept" in err
    assert "Traceback" not in err
    kept = [json.loads(s) for s in (tmp / "lost-out.jsonl").read_text().splitlines()]
    assert held not in {r["index"] for r in kept}
    assert all(r["status"] == "answered" for r in kept)
    # The same command, here without a cluster, asks only the questions not recorded.
    (gates / "held.open").touch()
    again = subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"({len(kept)} kept from before" in again.stdout
    rows = [json.loads(s) for s in (tmp / "lost-out.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == list(range(LIMIT))
