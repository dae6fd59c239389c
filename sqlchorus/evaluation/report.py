"""The report of an evaluation run: ``summary.json`` and a self-contained ``report.html``.

The HTML page has no scripts and no external files: plots are inline SVG drawn here, styles
are inline, and every piece of text that comes from a run (questions, SQL, model and database
names, error messages) is escaped, since benchmark questions and model output are untrusted.
It opens from disk, and from a CI artifact, as it is.

Plots: accuracy by difficulty; BIRD's Soft-F1 and R-VES by difficulty, when the run was scored
with them; accuracy by the generator of the chosen candidate; the
selection upper bound (a question counts when any candidate was correct, as if selection were
perfect) against the actual accuracy, in total and by difficulty; each generator's candidates
alone; cost, tokens and latency per question as histograms. Each plot is as wide as its labels
need, so none is cut.

Words are the ones every command and page uses: a question's verdict reads as
:func:`verdict_text` gives it, a cost as :func:`~sqlchorus.tools.models.pricing.cost_text` does
(``unpriced`` where a model has no price, never ``$0``). Tables of SQL wrap only between tokens,
never inside a name, and the questions table scrolls sideways rather than squeeze its columns.
"""

from __future__ import annotations

import html
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlchorus.tools.models.pricing import cost_text

__all__ = ["build_summary", "render_html", "verdict_text", "write_html", "write_report"]

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
R_VES_MAX = 100 * math.sqrt(1.25)
"""The highest R-VES: every prediction correct and at least twice as fast as its gold."""


# -- figures ---------------------------------------------------------------------------------


def _percent(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 2) if whole else None


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _stats(values: Sequence[float], digits: int = 4) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "median": None, "p95": None, "max": None, "total": 0.0}
    return {
        "mean": round(statistics.fmean(values), digits),
        "median": round(statistics.median(values), digits),
        "p95": round(_percentile(values, 0.95), digits),
        "max": round(max(values), digits),
        "total": round(sum(values), digits),
    }


def _scored(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("status") != "missing_db"]


def _group_accuracy(records: list[dict[str, Any]], key: str) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        # Without a value: a question with no prediction goes under the scorer's name for that;
        # a prediction of unknown origin (a scored prediction file) under "unknown".
        fallback = "unknown" if r.get("prediction") else "missing_prediction"
        groups.setdefault(str(r.get(key) or fallback), []).append(r)
    return {
        name: {
            "n": len(group),
            "n_correct": sum(1 for r in group if r.get("correct")),
            "ex": _percent(sum(1 for r in group if r.get("correct")), len(group)),
        }
        for name, group in sorted(groups.items())
    }


def _right_somewhere(record: dict[str, Any]) -> bool:
    return bool(record.get("correct") or record.get("any_candidate_correct"))


def verdict_text(record: dict[str, Any]) -> str:
    """A question's verdict in the words every command and page uses: ``correct``; ``wrong``, or
    ``wrong (<verdict>)`` where the scorer says more (``pred_error``, ``timeout``, ``gold_error``,
    ``missing_prediction``: a question with no prediction, whether its run had no answer or
    raised); ``missing_db`` for a question not scored."""
    verdict = str(record.get("verdict") or "")
    if record.get("correct"):
        return "correct"
    if verdict == "missing_db" or record.get("status") == "missing_db":
        return "missing_db"
    return "wrong" if verdict in ("", "wrong") else f"wrong ({verdict})"


def _unpriced(record: dict[str, Any]) -> bool:
    """Whether some of a question's model calls had no price."""
    return bool(record.get("unpriced_calls") or record.get("unpriced_models"))


def build_summary(
    records: Sequence[dict[str, Any]], score_summary: dict[str, Any], *, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The figures of a run.

    Args:
        records: one per question (see :mod:`sqlchorus.evaluation.runs`).
        score_summary: the scorer's summary of the prediction file
            (:func:`sqlchorus.evaluation.scoring.summarize`): ``ex``, counts, ``by_difficulty``.
        meta: what was run (dataset, settings, ...), copied under ``run``.

    Returns:
        The scorer's figures (``ex`` in percent, ``n_scored``, ``n_missing_db``,
        ``by_difficulty``, ...) plus ``upper_bound`` (percent of scored questions with a correct
        candidate), ``upper_bound_by_difficulty``, ``by_generator`` (accuracy by the chosen
        candidate's generator), ``candidate_generators`` (each generator's candidates alone),
        ``cost`` and ``latency_s``.
    """
    meta = dict(meta or {})
    scored = _scored(records)
    # Questions the graph ran on: cost and latency are theirs (a score-only run has none).
    ran = [r for r in records if r.get("ran")]
    summary: dict[str, Any] = {
        "dataset": meta.get("dataset", score_summary.get("dataset")),
        "benchmark": meta.get("benchmark", score_summary.get("benchmark")),
        "engine": meta.get("engine", "sqlite"),
    }
    for key, value in score_summary.items():
        if key == "elapsed_s":
            summary["scoring_elapsed_s"] = value
        elif key not in ("dataset", "benchmark"):
            summary[key] = value
    summary["upper_bound"] = _percent(sum(_right_somewhere(r) for r in scored), len(scored))
    by_level: dict[str, list[dict[str, Any]]] = {}
    for r in scored:
        by_level.setdefault(str(r.get("difficulty")), []).append(r)
    order = list(score_summary.get("by_difficulty") or {})
    summary["upper_bound_by_difficulty"] = {
        level: _percent(sum(_right_somewhere(r) for r in by_level[level]), len(by_level[level]))
        for level in order + sorted(set(by_level) - set(order))
        if level in by_level
    }
    summary["by_generator"] = _group_accuracy(scored, "chosen_generator")
    summary["candidate_generators"] = _candidate_generators(scored)
    # A question without a prediction is counted once, under the scorer's name for it
    # (``n_missing_prediction``); ``n_run_errors`` says how many of those runs raised.
    summary["n_answered"] = sum(1 for r in records if r.get("status") == "answered")
    summary["n_run_errors"] = sum(1 for r in records if r.get("status") == "error")
    # A question with unpriced calls has no known cost: the mean is over the priced ones.
    costs = [float(r.get("cost_usd") or 0.0) for r in ran if not _unpriced(r)]
    tokens = [int(r.get("input_tokens") or 0) + int(r.get("output_tokens") or 0) for r in ran]
    summary["cost"] = {
        "model_calls": sum(int(r.get("model_calls") or 0) for r in ran),
        "cached_calls": sum(int(r.get("cached_calls") or 0) for r in ran),
        "input_tokens": sum(int(r.get("input_tokens") or 0) for r in ran),
        "output_tokens": sum(int(r.get("output_tokens") or 0) for r in ran),
        "cached_input_tokens": sum(int(r.get("cached_input_tokens") or 0) for r in ran),
        "cached_output_tokens": sum(int(r.get("cached_output_tokens") or 0) for r in ran),
        "cost_usd": round(sum(float(r.get("cost_usd") or 0.0) for r in ran), 6),
        "unpriced_calls": sum(int(r.get("unpriced_calls") or 0) for r in ran),
        "unpriced_questions": sum(1 for r in ran if _unpriced(r)),
        "cost_usd_per_question": round(statistics.fmean(costs), 6) if costs else None,
        "tokens_per_question": round(statistics.fmean(tokens), 1) if tokens else None,
        "calls_per_question": (
            round(statistics.fmean([int(r.get("model_calls") or 0) for r in ran]), 2) if ran else None
        ),
        "unpriced_models": sorted({m for r in ran for m in r.get("unpriced_models") or []}),
    }
    summary["latency_s"] = _stats([float(r.get("seconds") or 0.0) for r in ran])
    summary["run"] = meta
    return summary


def _candidate_generators(scored: list[dict[str, Any]]) -> dict[str, Any]:
    """Per generator: questions where it produced candidates, and where one of them was right."""
    seen: dict[str, list[bool]] = {}
    counts: dict[str, int] = {}
    for r in scored:
        per_question: dict[str, bool] = {}
        for c in r.get("candidates") or []:
            gen = str(c.get("generator") or "unknown")
            per_question[gen] = per_question.get(gen, False) or bool(c.get("correct"))
            counts[gen] = counts.get(gen, 0) + 1
        for gen, right in per_question.items():
            seen.setdefault(gen, []).append(right)
    return {
        gen: {"n_questions": len(v), "n_candidates": counts[gen], "ex": _percent(sum(v), len(v))}
        for gen, v in sorted(seen.items())
    }


# -- SVG plots -------------------------------------------------------------------------------

_E = html.escape
_BAR = "#4C78A8"
_BAR2 = "#F58518"
_FONT = 'font-family="system-ui, sans-serif" font-size="12"'


def _figure(title: str, svg: str, note: str = "") -> str:
    note_html = f'<p class="note">{_E(note)}</p>' if note else ""
    return f'<figure><figcaption>{_E(title)}</figcaption>{svg}{note_html}</figure>\n'


def _empty_svg(message: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="480" height="40" role="img">'
            f'<text x="8" y="24" {_FONT} fill="#666">{_E(message)}</text></svg>')


def bar_chart(title: str, bars: Sequence[tuple[str, float | None, str]], *, series: Sequence[str] = (),
              values2: Sequence[float | None] | None = None, maximum: float = 100.0,
              unit: str = "%") -> str:
    """Horizontal bars, one row per label, optionally a second series drawn under the first.

    Args:
        title: the figure caption (escaped).
        bars: ``(label, value or None, annotation)`` per row.
        series: names of the two series for the legend, when ``values2`` is given.
        values2: the second series, one value per row.
        maximum: the value of a full-width bar.
        unit: appended to the value labels.
    """
    if not bars:
        return _figure(title, _empty_svg("no data"))
    bar_w, row_h = 300, 22 if values2 is None else 34
    # Room for the longest label on the left and the longest value and note on the right: the
    # page runs no script to measure text, so widths come from a generous width per character.
    label_w = min(_LABEL_MAX, max(60, _text_width(max((_short(b[0], _LABEL_CHARS) for b in bars), key=len)) + 12))
    ends = [f"{v:g}{unit}" if v is not None else "n/a" for v in [*(b[1] for b in bars), *(values2 or [])]]
    right = max(_text_width(max(ends, key=len)) + _text_width(max((" " + b[2] for b in bars), key=len)) + 12, 140)
    legend_h = 20 if values2 is not None and series else 0
    height = legend_h + row_h * len(bars) + 8
    width = label_w + bar_w + right
    if legend_h:
        right = max(right, 150 * (len(series) - 1) + 14 + _text_width(series[-1]) - bar_w + 8)
        width = label_w + bar_w + right
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_E(title)}">']
    if legend_h:
        for k, (name, color) in enumerate(zip(series, (_BAR, _BAR2))):
            x = label_w + k * 150
            parts.append(f'<rect x="{x}" y="4" width="10" height="10" fill="{color}"/>'
                         f'<text x="{x + 14}" y="13" {_FONT}>{_E(name)}</text>')
    for i, (label, value, note) in enumerate(bars):
        y = legend_h + i * row_h + 4
        parts.append(f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end" {_FONT}>'
                     f'{_E(_short(label, _LABEL_CHARS))}<title>{_E(label)}</title></text>')
        rows = [(value, _BAR, 0)]
        if values2 is not None:
            rows.append((values2[i], _BAR2, 14))
        for v, color, dy in rows:
            w = 0 if v is None else max(0.0, min(1.0, v / maximum)) * bar_w if maximum else 0
            text = "n/a" if v is None else f"{v:g}{unit}"
            parts.append(f'<rect x="{label_w}" y="{y + dy}" width="{w:.1f}" height="12" fill="{color}"/>'
                         f'<text x="{label_w + w + 4:.1f}" y="{y + dy + 10}" {_FONT}>{_E(text)}'
                         f'{(" " + _E(note)) if note and dy == 0 else ""}</text>')
    parts.append("</svg>")
    return _figure(title, "".join(parts))


def histogram(title: str, values: Sequence[float], *, unit: str, bins: int = 20, note: str = "") -> str:
    """A histogram of ``values`` with the bin range on the x axis and counts on the bars."""
    if not values:
        return _figure(title, _empty_svg("no data"), note)
    lo, hi = min(values), max(values)
    if math.isclose(lo, hi):
        bins = 1
    width_bin = (hi - lo) / bins if bins > 1 else 1.0
    counts = [0] * bins
    for v in values:
        k = 0 if bins == 1 else min(bins - 1, int((v - lo) / width_bin))
        counts[k] += 1
    plot_w, plot_h, left, top = 440, 140, 40, 10
    width, height = left + plot_w + 20, top + plot_h + 40
    top_count = max(counts)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_E(title)}">',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
             'stroke="#999"/>']
    bw = plot_w / bins
    for k, c in enumerate(counts):
        h = plot_h * c / top_count if top_count else 0
        x = left + k * bw
        start = lo + k * width_bin
        tip = f"{_num(start)}-{_num(start + width_bin)} {unit}: {c}"
        parts.append(f'<rect x="{x + 1:.1f}" y="{top + plot_h - h:.1f}" width="{max(bw - 2, 1):.1f}" '
                     f'height="{h:.1f}" fill="{_BAR}"><title>{_E(tip)}</title></rect>')
        if c:
            parts.append(f'<text x="{x + bw / 2:.1f}" y="{top + plot_h - h - 2:.1f}" text-anchor="middle" '
                         f'font-family="system-ui, sans-serif" font-size="9">{c}</text>')
    parts.append(f'<text x="{left}" y="{top + plot_h + 16}" {_FONT}>{_E(_num(lo))}</text>')
    parts.append(f'<text x="{left + plot_w}" y="{top + plot_h + 16}" text-anchor="end" {_FONT}>'
                 f'{_E(_num(hi))}</text>')
    axis = f"{unit} per question (n={len(values)}, median {_num(statistics.median(values))})"
    parts.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h + 32}" text-anchor="middle" {_FONT}>'
                 f'{_E(axis)}</text>')
    parts.append("</svg>")
    return _figure(title, "".join(parts), note)


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}" if abs(value) >= 0.001 else f"{value:.2e}"


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


_CHAR_W = 7.4
"""Pixels per character of 12-pixel sans-serif text, on the wide side (digits and most lower-case
letters are narrower), so that a width worked out from it holds the text."""
_LABEL_CHARS = 34
_LABEL_MAX = 260


def _text_width(text: str) -> int:
    return math.ceil(len(text) * _CHAR_W)


# -- the page --------------------------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}
figure{display:inline-block;vertical-align:top;margin:0 1.5em 1.5em 0}
figcaption{font-weight:600;margin-bottom:.3em}
.note{color:#666;font-size:.85em;margin:.2em 0;max-width:480px}
table{border-collapse:collapse;font-size:.85em}
td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4}
.wide{overflow-x:auto;max-width:100%}
td.sql{font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:normal;overflow-wrap:normal;
min-width:22ch}
table.questions td:nth-child(4){min-width:18ch}
tr.correct td.v{color:#176d2c}tr.wrong td.v{color:#b00020}tr.missing td.v{color:#777}
.figures td:first-child{font-weight:600}
"""


def _figures_table(summary: dict[str, Any]) -> str:
    cost = summary.get("cost") or {}
    latency = summary.get("latency_s") or {}
    cached = cost.get("cached_calls") or 0
    unpriced = cost.get("unpriced_calls") or cost.get("unpriced_models")
    # Verdicts under the scorer's names, as the questions below, the CLI and the viewer give them.
    timings = summary.get("ves_iterations") or {}
    rows = [
        ("EX", _fmt_pct(summary.get("ex"))),
        # BIRD's other two columns, present when the run was scored with them.
        ("Soft-F1", _fmt_pct(summary.get("soft_f1"))),
        ("R-VES", _fmt_pct(summary.get("r_ves"))),
        ("R-VES timings per correct prediction (mean)", timings.get("mean")),
        ("questions scored", summary.get("n_scored")),
        ("correct", summary.get("n_correct")),
        ("missing_db (not scored)", summary.get("n_missing_db")),
        ("wrong (pred_error)", summary.get("n_pred_errors")),
        ("wrong (timeout)", summary.get("n_timeouts")),
        ("wrong (gold_error)", summary.get("n_gold_errors")),
        ("wrong (missing_prediction)", summary.get("n_missing_prediction")),
        ("of which runs that raised", summary.get("n_run_errors")),
        ("upper bound (perfect selection)", _fmt_pct(summary.get("upper_bound"))),
        ("model calls", f"{cost.get('model_calls', 0)}" + (f" ({cached} from cache)" if cached else "")),
        ("tokens in / out", f"{cost.get('input_tokens', 0)} / {cost.get('output_tokens', 0)}"
         + (f" ({cost.get('cached_input_tokens', 0)} / {cost.get('cached_output_tokens', 0)} from cache)"
            if cached else "")),
        ("cost", cost_text(cost.get("cost_usd"), unpriced) if cost else None),
        ("unpriced models", ", ".join(cost.get("unpriced_models") or []) or "none"),
        ("seconds per question (median / p95)", f"{latency.get('median')} / {latency.get('p95')}"),
    ]
    body = "".join(f"<tr><td>{_E(str(k))}</td><td>{_E(str(v))}</td></tr>" for k, v in rows if v is not None)
    return f'<table class="figures">{body}</table>'


def _fmt_pct(value: float | None) -> str | None:
    return None if value is None else f"{value:g}%"


def _run_link(run_id: Any) -> str:
    """A link to a question's run in ``sqlchorus ui``, relative to where the viewer serves this
    report (``evals/NAME/report``), so it holds under a session folder too."""
    text = str(run_id or "")
    if not text or not all(c.isalnum() or c in "-_T" for c in text):
        return ""
    return f'<a href="../../#/run/{_E(text)}">run</a> <a href="../../#/debug/{_E(text)}">step through</a>'


def _questions_table(records: Sequence[dict[str, Any]]) -> str:
    head = ("#", "db", "difficulty", "question", "gold", "prediction", "verdict", "generator", "candidates right",
            "calls", "cost", "seconds", "run")
    out = ['<div class="wide"><table class="questions"><tr>' + "".join(f"<th>{_E(h)}</th>" for h in head) + "</tr>"]
    for r in records:
        cls = "missing" if r.get("status") == "missing_db" else ("correct" if r.get("correct") else "wrong")
        cands = r.get("candidates") or []
        right = f"{sum(1 for c in cands if c.get('correct'))}/{len(cands)}" if cands else ""
        verdict = verdict_text(r)
        if r.get("error"):
            verdict += f": {r['error']}"
        cost = cost_text(r.get("cost_usd"), _unpriced(r)) if r.get("ran") else ""
        cells = [
            str(r.get("question_id")), str(r.get("db_id")), str(r.get("difficulty")),
            str(r.get("question")), str(r.get("gold_sql") or ""), str(r.get("prediction") or ""), verdict,
            str(r.get("chosen_generator") or ""), right, str(r.get("model_calls") or 0), cost,
            str(r.get("seconds") or 0),
        ]
        classes = {4: ' class="sql"', 5: ' class="sql"', 6: ' class="v"'}
        tds = "".join(f"<td{classes.get(k, '')}>{_E(c)}</td>" for k, c in enumerate(cells))
        tds += f"<td>{_run_link(r.get('run_id'))}</td>"
        out.append(f'<tr class="{cls}">{tds}</tr>')
    out.append("</table></div>")
    return "".join(out)


def _viewer_link(name: str | None) -> str:
    if not name:
        return ""
    return (f'<p>In <code>sqlchorus ui</code>: <a href="../../#/eval/{_E(quote(name, safe=""))}">every question, '
            "filtered and compared, with its run</a> (the links work where the viewer serves this page).</p>\n")


def _bird_chart(summary: dict[str, Any], levels: Sequence[str]) -> list[str]:
    """Soft-F1 and R-VES by difficulty, whichever of them the run was scored with."""
    by_difficulty = summary.get("by_difficulty") or {}
    shown = [(name, key) for name, key in (("Soft-F1", "soft_f1"), ("R-VES", "r_ves")) if key in summary]
    if not shown:
        return []
    series = [[summary.get(key) if lv == "all" else by_difficulty[lv].get(key) for lv in levels] for _, key in shown]
    title = " and ".join(name for name, _ in shown) + " by difficulty"
    bars = [(lv, v, "") for lv, v in zip(levels, series[0])]
    if len(shown) == 1:
        return [bar_chart(title, bars, maximum=R_VES_MAX if shown[0][1] == "r_ves" else 100.0)]
    return [bar_chart(title, bars, values2=series[1], series=[name for name, _ in shown], maximum=R_VES_MAX)]


def render_html(summary: dict[str, Any], records: Sequence[dict[str, Any]], *, name: str | None = None) -> str:
    """The report page as a string (see the module docstring); ``name``: the evaluation's folder
    name, to link to its page in ``sqlchorus ui``."""
    title = "sqlchorus eval" + (f": {summary['dataset']}" if summary.get("dataset") else "")
    by_difficulty = summary.get("by_difficulty") or {}
    upper = summary.get("upper_bound_by_difficulty") or {}
    diff_bars = [(level, v.get("ex"), f"(n={v.get('n')})") for level, v in by_difficulty.items()]
    gen_bars = [(g, v.get("ex"), f"(n={v.get('n')})") for g, v in (summary.get("by_generator") or {}).items()]
    cand_bars = [(g, v.get("ex"), f"(n={v.get('n_questions')})")
                 for g, v in (summary.get("candidate_generators") or {}).items()]
    levels = ["all", *by_difficulty]
    actual = [summary.get("ex"), *(by_difficulty[lv].get("ex") for lv in by_difficulty)]
    bound = [summary.get("upper_bound"), *(upper.get(lv) for lv in by_difficulty)]
    ran = [r for r in records if r.get("ran")]
    # A question with unpriced calls has no known cost: it is left out of the plot, and said so.
    costs = [float(r.get("cost_usd") or 0.0) for r in ran if not _unpriced(r)]
    tokens = [float((r.get("input_tokens") or 0) + (r.get("output_tokens") or 0)) for r in ran]
    seconds = [float(r.get("seconds") or 0.0) for r in ran]
    unpriced = (summary.get("cost") or {}).get("unpriced_models") or []
    left_out = sum(1 for r in ran if _unpriced(r))
    cost_note = (f"No price for {', '.join(unpriced)}: {left_out} question(s) with their calls are unpriced "
                 "and not plotted." if unpriced or left_out else "")
    bird = _bird_chart(summary, levels)
    plots = [
        bar_chart("Accuracy by difficulty", diff_bars),
        *bird,
        bar_chart("Accuracy by generator of the chosen candidate", gen_bars),
        bar_chart("Selection upper bound vs actual", [(lv, a, "") for lv, a in zip(levels, actual)],
                  values2=bound, series=("actual EX", "upper bound (perfect selection)")),
        bar_chart("Each generator's candidates alone", cand_bars),
        histogram("Cost per question", costs, unit="USD", note=cost_note),
        histogram("Tokens per question", tokens, unit="tokens"),
        histogram("Latency per question", seconds, unit="seconds"),
    ]
    run = summary.get("run") or {}
    settings = run.get("settings") or {}
    subtitle = ", ".join(
        f"{k}: {v}" for k, v in (
            ("benchmark", summary.get("benchmark")), ("model", settings.get("model")),
            ("preset", settings.get("preset")), ("generators", settings.get("generators")),
            ("predictions", run.get("predictions")),
        ) if v
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_E(title)}</title><style>{_STYLE}</style></head><body>\n"
        f"<h1>{_E(title)}</h1><p>{_E(subtitle)}</p>\n"
        f"{_viewer_link(name)}"
        f"<h2>Figures</h2>{_figures_table(summary)}\n"
        f"<h2>Plots</h2>\n{''.join(plots)}\n"
        f"<h2>Questions</h2>{_questions_table(records)}\n"
        f"<h2>Summary (JSON)</h2><pre>{_E(json.dumps(summary, indent=2, default=str))}</pre>\n"
        "</body></html>\n"
    )


def write_html(path: str | Path, summary: dict[str, Any], records: Sequence[dict[str, Any]],
               *, name: str | None = None) -> Path:
    """Write :func:`render_html` to ``path``."""
    out = Path(path)
    out.write_text(render_html(summary, records, name=name), encoding="utf-8")
    return out


def write_report(
    folder: str | Path, records: Sequence[dict[str, Any]], summary: dict[str, Any]
) -> dict[str, Path]:
    """Write ``summary.json`` and ``report.html`` into ``folder``; returns their paths."""
    base = Path(folder)
    summary_path = base / SUMMARY_FILE
    summary_path.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    return {"summary": summary_path, "report": write_html(base / REPORT_FILE, summary, records,
                                                          name=base.resolve().name)}
