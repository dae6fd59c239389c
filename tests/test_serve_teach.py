"""Teaching through `sqlchorus serve`: POST /v1/teach, the feedback form on a run, and the taught
entries listed, read and removed, against a real server on loopback over a Spider database,
with a bearer token; a later run's prompt and trace show what was taught."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from conftest import WAIT_S
from servers import TOKEN, Gate, free_port, running, server_env
from teach_model import UNSURE
from teach_servers import DB, GOLD_QUESTION, LIKE_TAUGHT, TAUGHT_QUESTION, TAUGHT_SQL, kept, sha, teach_folder

AUTH = {"Authorization": f"Bearer {TOKEN}"}
pytestmark = pytest.mark.slow  # each test talks to a server of its own process


def _serve_with(folder: Path, *options: str):
    """A server over a copy of concert_singer made in ``folder``, with ``options``: its base URL,
    and the context in which it runs."""
    env = server_env(folder, SQLCHORUS_TOKEN=TOKEN)
    db = teach_folder(folder)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["serve", "--db", str(db), "--port", str(port), "--model", "python:teach_model:model", "--no-cache",
            "--trace-dir", str(folder / "traces"), "--checkpoints", str(folder / "checkpoints.sqlite"), *options]
    return base, running(args, folder, env, base + "/v1/health")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server over a copy of concert_singer, with a token, its runs and taught examples in one
    SQLite store; its client, carrying the token."""
    folder = tmp_path_factory.mktemp("serve_teach")
    base, server = _serve_with(folder)
    with server, httpx.Client(base_url=base, headers=AUTH, timeout=WAIT_S) as client:
        yield client, folder


def _kept(folder: Path) -> list[dict]:
    """The taught entries in the server's store, read from its file."""
    return kept(folder / "checkpoints.sqlite")


def _error(response: httpx.Response, status: int, kind: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["kind"] == kind, error
    assert error["message"] and "\n" not in error["message"]
    return error["message"]


def _spans(client: httpx.Client, run_id: str) -> list[dict]:
    trace = client.get(f"/v1/runs/{run_id}/trace")
    assert trace.status_code == 200, trace.text
    return [json.loads(line) for line in trace.text.splitlines()]


def test_a_taught_example_is_kept_listed_and_shown_to_later_runs(server):
    client, folder = server
    taught = client.post("/v1/teach", json={"database": DB, "question": TAUGHT_QUESTION, "sql": TAUGHT_SQL,
                                            "hint": "older means Age over 40"})
    assert taught.status_code == 201, taught.text
    entry = taught.json()
    assert entry["kind"] == "example" and entry["database"] == DB and entry["source"] == "rest"
    assert (entry["question"], entry["sql"], entry["hint"]) == (TAUGHT_QUESTION, TAUGHT_SQL, "older means Age over 40")
    assert entry["author"] == "127.0.0.1"  # who the request is: its client's address
    assert taught.headers["location"] == f"/v1/examples/{entry['id']}"
    stored = {row["id"]: row for row in _kept(folder)}
    assert stored[entry["id"]]["sql"] == TAUGHT_SQL and stored[entry["id"]]["source"] == "rest"
    assert str(folder) not in taught.text  # the database is named by its id, never its file
    assert client.get(taught.headers["location"]).json() == entry
    listed = client.get("/v1/examples", params={"database": DB}).json()["examples"]
    assert entry in listed
    assert client.get("/v1/examples", params={"kind": "term"}).json()["examples"] == [
        e for e in listed if e["kind"] == "term"]

    # A later run over the database sees it: the model answers the question from the taught
    # example its prompt shows, and the node's span names it.
    answer = client.post("/v1/ask", json={"question": LIKE_TAUGHT})
    assert answer.status_code == 200, answer.text
    assert answer.json()["sql"] == TAUGHT_SQL
    assert answer.json()["rows"] == [["John Nizinik"], ["Rose White"]]
    spans = _spans(client, answer.json()["run_id"])
    shown = [json.loads(s["attributes"]["sqlchorus.taught_examples"]) for s in spans
             if "sqlchorus.taught_examples" in s.get("attributes", {})]
    assert shown and shown[0][0]["id"] == entry["id"] and shown[0][0]["source"] == "rest"
    prompts = [value for s in spans for key, value in s.get("attributes", {}).items()
               if key.startswith("llm.input_messages.") and key.endswith(".content")]
    assert any("Examples verified by the user on this database" in p and TAUGHT_SQL in p for p in prompts)


def test_a_glossary_term_is_taught_and_joins_the_hint_of_a_question_that_names_it(server):
    client, folder = server
    taught = client.post("/v1/teach", json={"database": DB, "term": "veteran singer",
                                            "meaning": "a singer older than 40", "sql": "Age > 40"})
    assert taught.status_code == 201, taught.text
    entry = taught.json()
    assert entry["kind"] == "term" and (entry["term"], entry["meaning"], entry["sql"]) == (
        "veteran singer", "a singer older than 40", "Age > 40")
    assert "question" not in entry
    assert entry in client.get("/v1/examples", params={"kind": "term"}).json()["examples"]
    answer = client.post("/v1/ask", json={"question": "How many veteran singers are there?"}).json()
    run_span = next(s for s in _spans(client, answer["run_id"]) if s["name"] == "serve")
    assert [g["id"] for g in json.loads(run_span["attributes"]["sqlchorus.glossary"])] == [entry["id"]]
    refused = client.post("/v1/teach", json={"database": DB, "term": "loud singer", "sql": "Volume > 3"})
    assert "no such column" in _error(refused, 422, "taught")


def test_refusals_keep_nothing_and_say_why_in_one_line(server):
    client, folder = server
    before, db_sha = _kept(folder), sha(folder / f"{DB}.sqlite")
    dropped = client.post("/v1/teach", json={"database": DB, "question": "Remove every singer", "sql": "DROP TABLE singer"})
    assert "DROP" in _error(dropped, 422, "taught")
    nothing = client.post("/v1/teach", json={"database": DB, "question": "Which singers are 200?",
                                             "sql": "SELECT Name FROM singer WHERE Age = 200"})
    assert "no rows" in _error(nothing, 422, "taught")
    _error(client.post("/v1/teach", json={"database": DB, "question": "Count\x00 them", "sql": "SELECT 1"}),
           422, "invalid_request")
    _error(client.post("/v1/teach", json={"database": DB, "question": "   ", "sql": "SELECT 1"}), 422, "taught")
    both = client.post("/v1/teach", json={"database": DB, "question": "Who sings?", "sql": "SELECT Name FROM singer",
                                          "term": "x"})
    _error(both, 422, "invalid_request")
    # The database is named, never implied, even where the server has one.
    unnamed = client.post("/v1/teach", json={"question": "Who sings?", "sql": "SELECT Name FROM singer"})
    assert "database" in _error(unnamed, 422, "invalid_request")
    _error(client.post("/v1/teach", json={"database": "nope", "question": "Who sings?", "sql": "SELECT 1"}),
           404, "unknown_database")
    _error(client.post("/v1/teach", json={"database": DB, "question": "Who sings?", "sql": "SELECT Name FROM singer",
                                          "run_id": "20990101T000000-00000000"}), 404, "unknown_run")
    assert _kept(folder) == before and sha(folder / f"{DB}.sqlite") == db_sha


def test_the_same_question_twice_is_a_conflict(server):
    client, folder = server
    question = "What are the names of the stadiums?"
    first = client.post("/v1/teach", json={"database": DB, "question": question, "sql": "SELECT Name FROM stadium"})
    assert first.status_code == 201, first.text
    again = client.post("/v1/teach", json={"database": DB, "question": "  what are the NAMES of the stadiums? ",
                                           "sql": "SELECT DISTINCT Name FROM stadium"})
    assert first.json()["id"] in _error(again, 409, "already_taught")
    assert [row["sql"] for row in _kept(folder) if row["id"] == first.json()["id"]] == ["SELECT Name FROM stadium"]


def test_an_entry_is_removed_and_then_unknown(server):
    client, folder = server
    entry = client.post("/v1/teach", json={"database": DB, "question": "Which stadium holds the most people?",
                                           "sql": "SELECT Name FROM stadium ORDER BY Capacity DESC LIMIT 1"}).json()
    removed = client.delete(f"/v1/examples/{entry['id']}")
    assert removed.status_code == 200 and removed.json() == entry
    assert entry["id"] not in {row["id"] for row in _kept(folder)}
    _error(client.get(f"/v1/examples/{entry['id']}"), 404, "unknown_taught")
    _error(client.delete(f"/v1/examples/{entry['id']}"), 404, "unknown_taught")
    _error(client.get("/v1/examples", params={"database": "nope"}), 404, "unknown_database")
    _error(client.get("/v1/examples", params={"kind": "recipe"}), 422, "invalid_request")
    again = client.post("/v1/teach", json={"database": DB, "question": entry["question"], "sql": entry["sql"]})
    assert again.status_code == 201 and again.json()["id"] == entry["id"]  # taught anew


def test_feedback_on_a_run_teaches_its_question(server):
    client, folder = server
    answer = client.post("/v1/ask", json={"question": GOLD_QUESTION}).json()
    assert answer["sql"] == "SELECT count(*) FROM singer"
    confirmed = client.post(f"/v1/runs/{answer['run_id']}/feedback", json={"correct": True})
    assert confirmed.status_code == 201, confirmed.text
    entry = confirmed.json()
    assert (entry["question"], entry["sql"], entry["run_id"]) == (GOLD_QUESTION, answer["sql"], answer["run_id"])
    assert entry["author"] == "127.0.0.1" and entry["id"] in {row["id"] for row in _kept(folder)}
    _error(client.post(f"/v1/runs/{answer['run_id']}/feedback", json={"correct": True}), 409, "already_taught")

    # A run with no answer cannot be confirmed; the right SQL is taught for its question instead.
    question = UNSURE + "Which singer sings the newest song?"
    unanswered = client.post("/v1/ask", json={"question": question}).json()
    assert unanswered["sql"] is None
    _error(client.post(f"/v1/runs/{unanswered['run_id']}/feedback", json={"correct": True}), 409, "no_answer")
    right = "SELECT Name FROM singer ORDER BY Song_release_year DESC LIMIT 1"
    corrected = client.post(f"/v1/runs/{unanswered['run_id']}/feedback",
                            json={"correct": False, "sql": right, "author": "reviewer"})
    assert corrected.status_code == 201, corrected.text
    assert (corrected.json()["question"], corrected.json()["sql"], corrected.json()["author"]) == (
        question, right, "reviewer")
    _error(client.post(f"/v1/runs/{unanswered['run_id']}/feedback", json={"correct": True, "sql": right}),
           422, "invalid_request")
    _error(client.post(f"/v1/runs/{unanswered['run_id']}/feedback", json={}), 422, "invalid_request")
    _error(client.post("/v1/runs/20990101T000000-00000000/feedback", json={"correct": True}), 404, "unknown_run")


def test_feedback_waits_for_the_run_to_end(server):
    client, folder = server
    with Gate(folder / "gates") as gate:
        run_id = client.post("/v1/runs", json={"question": gate.mark + "What is the total number of singers?"}
                             ).json()["run_id"]
        gate.wait_called()  # the run is in its first model call, held there
        _error(client.post(f"/v1/runs/{run_id}/feedback", json={"correct": True}), 409, "run_finished")


def test_every_teaching_route_needs_the_token(server):
    client, folder = server
    base = str(client.base_url).rstrip("/")
    before = _kept(folder)
    for method, path, body in [("POST", "/v1/teach", {"database": DB, "question": "Who sings?",
                                                      "sql": "SELECT Name FROM singer"}),
                               ("POST", "/v1/runs/20990101T000000-00000000/feedback", {"correct": True}),
                               ("GET", "/v1/examples", None), ("GET", "/v1/examples/e0123456789", None),
                               ("DELETE", "/v1/examples/e0123456789", None)]:
        refused = httpx.request(method, base + path, json=body, timeout=WAIT_S)
        _error(refused, 401, "unauthorized")
    assert _kept(folder) == before


def test_the_openapi_document_describes_the_teaching_routes(server):
    client, _ = server
    paths = client.get("/openapi.json").json()["paths"]
    assert {"post"} <= set(paths["/v1/teach"]) and set(paths["/v1/examples/{example_id}"]) == {"get", "delete"}
    teach = paths["/v1/teach"]["post"]["responses"]
    assert {"201", "404", "409", "422", "503"} <= set(teach)
    assert "`already_taught`" in teach["409"]["description"] and "`taught`" in teach["422"]["description"]
    feedback = paths["/v1/runs/{run_id}/feedback"]["post"]["responses"]
    assert "`no_answer`" in feedback["409"]["description"]


def test_a_store_that_cannot_be_used_is_503_and_none_is_409(tmp_path):
    broken = tmp_path / "examples.sqlite"
    broken.write_text("not a SQLite file, " * 200, encoding="utf-8")
    base, server = _serve_with(tmp_path, "--examples-store", str(broken))
    with server, httpx.Client(base_url=base, headers=AUTH, timeout=WAIT_S) as client:
        for response in (client.post("/v1/teach", json={"database": DB, "question": TAUGHT_QUESTION,
                                                        "sql": TAUGHT_SQL}),
                         client.get("/v1/examples")):
            assert str(tmp_path) not in _error(response, 503, "store_unavailable")  # where it is: the log only
            assert int(response.headers["retry-after"]) >= 1
        # Runs go on without what is taught.
        assert client.post("/v1/ask", json={"question": GOLD_QUESTION}).json()["sql"] == "SELECT count(*) FROM singer"
    off = tmp_path / "off"
    off.mkdir()
    base, server = _serve_with(off, "--no-taught")
    with server, httpx.Client(base_url=base, headers=AUTH, timeout=WAIT_S) as client:
        refused = client.post("/v1/teach", json={"database": DB, "question": TAUGHT_QUESTION, "sql": TAUGHT_SQL})
        _error(refused, 409, "no_examples_store")
        _error(client.get("/v1/examples"), 409, "no_examples_store")
