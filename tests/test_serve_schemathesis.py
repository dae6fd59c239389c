"""Schemathesis against `sqlchorus serve`'s own OpenAPI document, every check on: the responses,
their statuses, media types, headers and bodies are what the document says, a method it does not
list is 405 with ``Allow``, a run made is there, a cancelled run is not taken for deleted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from servers import free_port, http, running, server_env

SCHEMATHESIS = Path(sys.executable).parent / "st"
EXAMPLES = 40
"""Cases per operation and phase: enough to reach every status the document lists."""
SEED = 40
"""A fixed seed: the same cases on every run, so a failure can be reproduced."""
CONFIG = "".join(f"""
[[operations]]
include-name = "{name}"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422", "5xx"]
""" for name in ("POST /v1/teach", "POST /v1/runs/{run_id}/feedback"))
"""Teaching takes text the schema cannot judge: SQL that fits it may still be refused by the
database's guard (422), a question taught already (409), a run that is not there (404)."""


@pytest.mark.slow
def test_schemathesis_with_every_check_finds_nothing(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["serve", "--port", str(port), "--model", "python:server_factories:mixed", "--no-cache",
            "--trace-dir", str(tmp_path / "traces"), "--checkpoints", str(tmp_path / "checkpoints.sqlite")]
    (tmp_path / "schemathesis.toml").write_text(CONFIG, encoding="utf-8")
    with running(args, tmp_path, server_env(tmp_path), base + "/v1/health"):
        operations = sum(len(methods) for methods in http.get(f"{base}/openapi.json").json()["paths"].values())
        # Its examples' database (cwd) is the test's own: no case carries over between runs.
        found = subprocess.run(
            [str(SCHEMATHESIS), "run", f"{base}/openapi.json", "--checks", "all", "--max-examples", str(EXAMPLES),
             "--seed", str(SEED), "--workers", "1", "--no-color"],
            cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    summary = found.stdout[found.stdout.rfind("SUMMARY"):] if "SUMMARY" in found.stdout else found.stdout[-6000:]
    assert found.returncode == 0, found.stdout[-20000:] + found.stderr[-3000:]
    assert "Failures:" not in summary and "Errors:" not in summary, summary
    assert f"Tested: {operations}" in summary, summary  # every operation of the document
