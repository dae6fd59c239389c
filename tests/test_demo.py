"""`sqlchorus demo` as a new user runs it: offline, on the toy model, never a crash."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sqlchorus.core.local_model import LocalModelError, find_smollm2, local_runtime


@pytest.fixture
def offline_model():
    if local_runtime() is None:
        pytest.skip("no local runtime is installed (pip install 'sqlchorus[local]')")
    try:
        find_smollm2()
    except LocalModelError as e:
        pytest.skip(str(e))


@pytest.mark.slow
def test_a_short_model_limit_ends_cleanly_ten_times_in_a_row(offline_model, tmp_path):
    """Every model call runs past a 2-second limit and is stopped: the demo says so and exits 1,
    with no signal and no traceback, every time."""
    for attempt in range(10):
        out = subprocess.run(
            [sys.executable, "-m", "sqlchorus", "demo", "--model-timeout", "2", "--no-cache", "--no-trace"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )
        report = out.stdout + out.stderr
        assert out.returncode == 1, f"attempt {attempt + 1}: exit {out.returncode}\n{report[-2000:]}"
        assert "Traceback" not in report
        assert "no answer within 2 s; the model was stopped" in " ".join(report.split())
