"""The run report: summary figures from records, and a self-contained, escaped HTML page."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from conftest import FIXTURES
from sqlchorus.evaluation.report import (
    bar_chart,
    build_summary,
    histogram,
    render_html,
    write_report,
)

CASES = json.loads((FIXTURES / "report" / "summary_cases.json").read_text(encoding="utf-8"))
PLOT_TITLES = (
    "Accuracy by difficulty",
    "Accuracy by generator of the chosen candidate",
    "Selection upper bound vs actual",
    "Each generator&#x27;s candidates alone",
    "Cost per question",
    "Tokens per question",
    "Latency per question",
)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_summary_figures(case):
    summary = build_summary(case["records"], case["score_summary"], meta={"dataset": "toy"})
    got = {key: summary[key] for key in case["expected"]}
    assert got == case["expected"]
    assert summary["dataset"] == "toy" and summary["run"] == {"dataset": "toy"}


def svgs(page: str) -> list[str]:
    return re.findall(r"<svg\b.*?</svg>", page, flags=re.S)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_page_has_every_plot_and_well_formed_svg(case, tmp_path):
    summary = build_summary(case["records"], case["score_summary"])
    paths = write_report(tmp_path, case["records"], summary)
    page = paths["report"].read_text(encoding="utf-8")
    assert json.loads(paths["summary"].read_text())["upper_bound"] == summary["upper_bound"]
    for title in PLOT_TITLES:
        assert f"<figcaption>{title}</figcaption>" in page
    found = svgs(page)
    assert len(found) == len(PLOT_TITLES)
    for svg in found:
        ET.fromstring(svg)  # raises on malformed markup
    for record in case["records"]:
        assert f"<td>{record['question']}</td>" in page


def test_text_from_the_run_is_escaped_and_nothing_is_loaded(tmp_path):
    case = CASES[0]
    records = [dict(r) for r in case["records"]]
    records[0].update(question='<script>alert("q")</script>', prediction="SELECT '<b>' || \"&\"",
                      chosen_generator="<img src=x onerror=alert(1)>")
    records[1]["candidates"] = [{"generator": "</svg><script>", "correct": True}]
    summary = build_summary(records, case["score_summary"],
                            meta={"dataset": "<i>toy</i>", "settings": {"model": "<m>"}})
    page = render_html(summary, records)
    assert "<script" not in page and "<img" not in page and "<i>toy" not in page
    assert "&lt;script&gt;alert(&quot;q&quot;)&lt;/script&gt;" in page
    assert "SELECT &#x27;&lt;b&gt;&#x27; || &quot;&amp;&quot;" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page
    for svg in svgs(page):
        ET.fromstring(svg)


@pytest.mark.parametrize("values,counts", [
    ([], []),
    ([0.5, 0.5, 0.5], [3]),
    ([0.0, 1.0, 2.0, 3.0, 10.0], None),
])
def test_histogram_edges(values, counts):
    figure = histogram("Latency per question", values, unit="seconds", bins=5)
    assert "<figcaption>Latency per question</figcaption>" in figure
    if not values:
        assert "no data" in figure
        return
    ET.fromstring(svgs(figure)[0])
    titles = re.findall(r"<rect [^>]*><title>[^<]*: (\d+)</title>", figure)
    assert sum(map(int, titles)) == len(values)
    if counts is not None:
        assert list(map(int, titles)) == counts


def test_bars_are_proportional_and_missing_values_say_so():
    figure = bar_chart("Accuracy by difficulty", [("easy", 50.0, "(n=2)"), ("hard", None, "(n=0)")])
    widths = [float(w) for w in re.findall(r'<rect x="\d+" y="[\d.]+" width="([\d.]+)"', figure)]
    assert widths == [150.0, 0.0]  # half of the 300-pixel bar; nothing for no value
    assert "50%" in figure and "n/a" in figure
