// The sqlchorus viewer. Every value from a run is put into the page as text (textContent),
// never as markup, so a question or a database value shows exactly as it is.
"use strict";

const main = document.getElementById("main");
const SVG = "http://www.w3.org/2000/svg";
let live = null; // the EventSource of a live run, closed when the page changes

// -- building the page ----------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "cls") node.className = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "cls") node.setAttribute("class", v); else node.setAttribute(k, String(v));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function show(...nodes) { main.replaceChildren(...nodes.flat().filter(n => n !== null && n !== undefined && n !== false)); }
function section(title, ...body) { return el("section", {}, title ? el("h2", {}, title) : null, ...body); }
function fmt(n, digits = 0) { return n === null || n === undefined ? "" : Number(n).toLocaleString(undefined, { maximumFractionDigits: digits }); }
function usd(n) { return n ? "$" + Number(n).toFixed(n < 0.01 ? 5 : 3) : "$0"; }
// A cost as the command line and the report say it: "unpriced" where calls had no price, never $0.
function money(n, unpriced) { return unpriced ? (n ? usd(n) + " + unpriced" : "unpriced") : usd(n); }
function when(iso) { return iso ? new Date(iso).toLocaleString() : ""; }
function cell(v) { return v === null || v === undefined ? "NULL" : typeof v === "object" ? JSON.stringify(v) : String(v); }
function verdictText(r) {
  if (r.correct === true) return "correct";
  if (r.correct === false) return "wrong" + (r.verdict && r.verdict !== "wrong" ? " (" + r.verdict + ")" : "");
  return r.status + (r.failure ? " (" + r.failure + ")" : "");
}
function statusClass(s) { return s === "ok" || s === "done" ? "status-ok" : s === "cancelled" || s === "empty" ? "status-warn" : "status-bad"; }
// The debugging branches of an evaluation's run, each scored against the gold when it ended
// ("now correct", "still wrong", ...), shown beside the verdict the evaluation scored, which stays.
function branchList(branches, withSql) {
  if (!branches || !branches.length) return null;
  return el("ul", { cls: "branches" }, branches.map(b => el("li", { "data-checkpoint": b.checkpoint },
    el("span", { cls: "muted" }, "branch " + String(b.checkpoint).slice(-8) + ": "),
    el("span", { cls: "branch-verdict " + (b.correct ? "status-ok" : "status-bad") },
      b.label + (b.verdict && b.verdict !== "correct" && b.verdict !== "wrong" ? " (" + b.verdict + ")" : "")),
    withSql && b.sql ? [" ", el("span", { cls: "sql" }, b.sql)] : null)));
}
// A run of an evaluation is judged by its verdict, not by having run.
function verdictClass(r) { return r.correct === false ? "status-bad" : statusClass(r.status); }

// Paths are relative to the page, so that it works at / and inside a session folder (/s/…/);
// a request that changes something carries the page's CSRF token.
const CSRF = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";

async function api(path, options) {
  const headers = { "content-type": "application/json" };
  if (options && options.method && options.method !== "GET") headers["x-csrf-token"] = CSRF;
  const response = await fetch(path, { ...options, headers });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error((data.error && data.error.message) || response.statusText);
  return data;
}

function failed(error) { show(section("Something went wrong", el("p", { cls: "error" }, error.message))); }

// -- routes -----------------------------------------------------------------------------------

async function route() {
  if (live) { live.close(); live = null; }
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  try {
    if (parts[0] === "run" && parts[1]) await runPage(parts[1]);
    else if (parts[0] === "debug" && parts[1]) await debugPage(parts[1], parts[2]);
    else if (parts[0] === "live" && parts[1]) await livePage(parts[1]);
    else if (parts[0] === "stats") await statsPage();
    else if (parts[0] === "evals") await evalsPage();
    else if (parts[0] === "eval" && parts[1]) await evalPage(parts[1]);
    else if (parts[0] === "compare" && parts[1] && parts[2]) await compareRunsPage(parts[1], parts[2]);
    else if (parts[0] === "compare-evals" && parts[1] && parts[2]) await compareEvalsPage(parts[1], parts[2]);
    else await runsPage();
  } catch (error) { failed(error); }
}
window.addEventListener("hashchange", route);

// -- the runs list ------------------------------------------------------------------------------

const listState = { q: "", sort: "started", desc: true };

async function runsPage() {
  const [data, dbs] = await Promise.all([api("api/runs"), api("api/databases").catch(() => ({ databases: [] }))]);
  const question = el("input", { type: "text", cls: "wide", placeholder: "Ask a question…", "aria-label": "question" });
  const database = el("select", { "aria-label": "database" }, dbs.databases.map(d => el("option", { value: d.id }, d.id)));
  // A refused question is said beside the box, which keeps what was typed.
  const refused = el("p", { cls: "error ask-error", id: "ask-error", role: "alert", hidden: true });
  const ask = async (debug) => {
    refused.hidden = true;
    try {
      const body = JSON.stringify({ question: question.value, database: database.value || null });
      if (debug) location.hash = "#/debug/" + (await api("api/debug", { method: "POST", body })).run_id;
      else location.hash = "#/live/" + (await api("api/live", { method: "POST", body })).run_id;
    } catch (error) {
      refused.textContent = error.message;
      refused.hidden = false;
      question.focus();
    }
  };
  const search = el("input", { type: "search", placeholder: "Search questions, SQL, databases", value: listState.q, "aria-label": "search" });
  const table = el("table", { id: "runs" });
  const columns = [["started", "When"], ["question", "Question"], ["database", "Database"], ["status", "Status"],
    ["sql", "Chosen SQL"], ["calls", "Calls"], ["tokens", "Tokens"], ["cost_usd", "Cost"], ["seconds", "Seconds"]];
  // Debugging sessions and replays sit under the run they came from, when it is listed.
  const ids = new Set(data.runs.map(r => r.run_id));
  const sessionsOf = {};
  for (const r of data.runs) if (r.replay_of && ids.has(r.replay_of)) (sessionsOf[r.replay_of] = sessionsOf[r.replay_of] || []).push(r);
  const runRow = (r, nested) => el("tr", { cls: "clickable" + (nested ? " nested" : ""), "data-run": r.run_id, "data-session-of": nested ? r.replay_of : null,
    onclick: () => { location.hash = "#/run/" + r.run_id; } },
  el("td", { cls: "muted" }, (nested ? "↳ " : "") + when(r.started)),
  el("td", {}, nested ? el("span", { cls: "muted" }, "step-through / replay session") : r.question), el("td", {}, r.database),
  el("td", { cls: verdictClass(r) }, verdictText(r)),
  el("td", { cls: "sql" }, r.sql || ""), el("td", {}, fmt(r.calls)), el("td", {}, fmt(r.tokens)),
  el("td", {}, money(r.cost_usd, r.unpriced_calls)), el("td", {}, fmt(r.seconds, 2)));
  const draw = () => {
    const q = listState.q.toLowerCase();
    const rows = data.runs.filter(r => !(r.replay_of && ids.has(r.replay_of)))
      .filter(r => !q || [r.question, r.sql, r.database, r.run_id, r.group, r.gold_sql].join(" ").toLowerCase().includes(q));
    rows.sort((a, b) => {
      const x = a[listState.sort] ?? "", y = b[listState.sort] ?? "";
      return (x < y ? -1 : x > y ? 1 : 0) * (listState.desc ? -1 : 1);
    });
    const head = el("tr", {}, columns.map(([key, label]) => el("th", {
      cls: "sortable", onclick: () => { listState.desc = listState.sort === key ? !listState.desc : true; listState.sort = key; draw(); },
    }, label + (listState.sort === key ? (listState.desc ? " ▼" : " ▲") : ""))));
    const body = [];
    const groups = [""].concat(data.groups.map(g => g.name));
    for (const group of groups) {
      const inGroup = rows.filter(r => r.group === group);
      if (!inGroup.length) continue;
      if (group) {
        const info = data.groups.find(g => g.name === group);
        const judged = inGroup.filter(r => r.correct !== null && r.correct !== undefined);
        const right = judged.filter(r => r.correct).length;
        body.push(el("tr", { cls: "group" }, el("td", { colspan: columns.length }, "Evaluation " + group + " ",
          el("a", { href: "#/eval/" + encodeURIComponent(group), "data-eval": group }, "(questions)"), " ",
          info && info.report ? el("a", { href: "evals/" + encodeURIComponent(group) + "/report" }, "(report)") : null,
          el("span", { cls: "muted" }, " — " + inGroup.length + " runs" + (judged.length ? `, ${right} of ${judged.length} correct` : "")))));
      }
      for (const r of inGroup) {
        body.push(runRow(r, false));
        for (const child of sessionsOf[r.run_id] || []) body.push(runRow(child, true));
      }
    }
    table.replaceChildren(el("thead", {}, head), el("tbody", {}, body.length ? body : el("tr", {}, el("td", { colspan: columns.length, cls: "muted" }, "No runs yet."))));
  };
  search.addEventListener("input", () => { listState.q = search.value; draw(); });
  draw();
  show(el("h1", {}, "Runs"),
    section("Ask", el("div", { cls: "toolbar" }, question, database,
      el("button", { onclick: () => ask(false) }, "Run"), el("button", { cls: "secondary", onclick: () => ask(true) }, "Step through")), refused),
    section(null, el("div", { cls: "toolbar" }, search, el("span", { cls: "muted" }, data.runs.length + " runs")), table));
}

// -- the graph --------------------------------------------------------------------------------

function graphView(graph, path, states) {
  const W = 196, H = 34, GX = 22, GY = 46;
  const maxWidth = Math.max(...graph.nodes.map(n => n.width));
  const width = Math.max(maxWidth * (W + GX) + GX, 400);
  const layers = Math.max(...graph.nodes.map(n => n.layer)) + 1;
  const height = layers * (H + GY) + 10;
  const pos = {};
  for (const n of graph.nodes) {
    const rowWidth = n.width * (W + GX) - GX;
    pos[n.id] = { x: (width - rowWidth) / 2 + n.index * (W + GX), y: 10 + n.layer * (H + GY) };
  }
  const visits = (path && path.visits) || {};
  const taken = {};
  for (const e of (path && path.edges) || []) taken[e.from + "→" + e.to] = e;
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "graph" });
  root.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
    svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#8a94a6" }))));
  for (const e of graph.edges) {
    const a = pos[e.from], b = pos[e.to];
    if (!a || !b) continue;
    const info = taken[e.from + "→" + e.to];
    let d;
    if (e.back) {
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x + W, y2 = b.y + H / 2;
      d = `M ${x1} ${y1} C ${x1 + 60} ${y1}, ${x2 + 60} ${y2}, ${x2} ${y2}`;
    } else {
      d = `M ${a.x + W / 2} ${a.y + H} C ${a.x + W / 2} ${a.y + H + GY / 2}, ${b.x + W / 2} ${b.y - GY / 2}, ${b.x + W / 2} ${b.y}`;
    }
    const g = svg("g", { cls: "edge" }, svg("path", { d, cls: "graph-edge" + (info ? " taken" : ""), "marker-end": "url(#arrow)" }));
    if (info) {
      g.append(svg("title", {}, `${e.from} → ${e.to}: ${info.count}×\n` + info.reasons.join("\n")));
      const mx = e.back ? Math.max(a.x, b.x) + W + 38 : (a.x + b.x + W) / 2 + 6;
      const my = e.back ? (a.y + b.y + H) / 2 : (a.y + H + b.y) / 2 + 4;
      g.append(svg("text", { x: mx, y: my, cls: "count" }, info.count + "×"));
    }
    root.append(g);
  }
  for (const n of graph.nodes) {
    const p = pos[n.id];
    const count = visits[n.id];
    const state = (states && states[n.id]) || (count ? "visited" : "");
    const g = svg("g", { cls: "graph-node " + state, "data-node": n.id, transform: `translate(${p.x},${p.y})` },
      svg("rect", { width: W, height: H }), svg("text", { x: 8, y: 21 }, n.id.replace(/^__|__$/g, "")));
    if (count) g.append(svg("text", { x: W - 8, y: 21, "text-anchor": "end", cls: "count" }, count + "×"));
    g.append(svg("title", {}, count ? `${n.id}: ran ${count}×` : n.id));
    root.append(g);
  }
  return el("div", { cls: "graph", style: null }, root);
}

// -- a run ------------------------------------------------------------------------------------

function resultTable(columns, rows) {
  return el("table", { cls: "result" }, el("thead", {}, el("tr", {}, (columns || []).map(c => el("th", {}, c)))),
    el("tbody", {}, (rows || []).slice(0, 200).map(r => el("tr", {}, r.map(v => el("td", {}, cell(v)))))));
}

const ROW_H = 24; // px per waterfall row: rows are drawn only where the view is (thousands of spans stay quick)
const KINDS = ["CHAIN", "LLM", "TOOL", "RETRIEVER", "AGENT"];

function waterfallView(spans, calls, runId) {
  const total = Math.max(1, ...spans.map(s => s.start_ms + s.ms));
  const collapsed = new Set();
  const state = { kind: "", text: "", selected: null };
  let visible = [];
  const viewport = el("div", { cls: "wf-viewport", id: "waterfall", role: "tree", "aria-label": "spans" });
  const spacer = el("div", { cls: "wf-spacer" });
  const rows = el("div", { cls: "wf-rows" });
  spacer.append(rows);
  viewport.append(spacer);
  const details = el("div", { cls: "span-details", id: "span-details" }, el("p", { cls: "muted" }, "Choose a span to see its details."));
  const counter = el("span", { cls: "muted", id: "waterfall-count" });
  const compute = () => {
    visible = [];
    const text = state.text.toLowerCase();
    if (state.kind || text) {
      for (let i = 0; i < spans.length; i++) {
        const s = spans[i];
        if (state.kind === "ERROR" ? s.status !== "ERROR" : state.kind && s.kind !== state.kind) continue;
        if (text && !(s.name + " " + (s.detail || "") + " " + (s.node || "")).toLowerCase().includes(text)) continue;
        visible.push(i);
      }
    } else {
      for (let i = 0; i < spans.length;) { visible.push(i); i = collapsed.has(i) ? Math.max(spans[i].end, i + 1) : i + 1; }
    }
    spacer.style.height = (visible.length * ROW_H) + "px";
    counter.textContent = `${fmt(visible.length)} of ${fmt(spans.length)} spans shown`;
  };
  const toggle = (i) => { if (collapsed.has(i)) collapsed.delete(i); else collapsed.add(i); compute(); draw(); };
  const row = (i) => {
    const s = spans[i];
    const parent = s.end > i + 1;
    const bar = el("div", { cls: "bar " + s.kind + (s.status === "ERROR" ? " ERROR" : "") });
    // Positions are set through the CSS object model: the page allows no inline styles.
    bar.style.left = (100 * s.start_ms / total).toFixed(3) + "%";
    bar.style.width = Math.max(0.2, 100 * s.ms / total).toFixed(3) + "%";
    const filtered = state.kind || state.text;
    const twisty = parent && !filtered
      ? el("button", { cls: "twisty", "aria-label": (collapsed.has(i) ? "expand " : "collapse ") + s.name, "aria-expanded": String(!collapsed.has(i)),
        onclick: (e) => { e.stopPropagation(); toggle(i); } }, collapsed.has(i) ? "▸" : "▾")
      : el("span", { cls: "twisty-space" });
    const name = el("div", { cls: "name", title: s.name }, twisty, s.name + (parent && collapsed.has(i) && !filtered ? ` (${s.end - i - 1})` : ""));
    name.style.paddingLeft = (filtered ? 0 : s.depth * 14) + "px";
    const line = el("div", { cls: "wf-row" + (state.selected === i ? " selected" : "") + (s.status === "ERROR" ? " failed" : ""), role: "treeitem",
      "data-span": s.span_id, "data-depth": s.depth, onclick: () => select(i) },
    name, el("div", { cls: "kind muted" }, s.kind), el("div", { cls: "dur" }, fmt(s.ms, 1) + " ms"),
    el("div", { cls: "lane" }, bar), el("div", { cls: "what muted", title: s.detail }, s.detail));
    return line;
  };
  const draw = () => {
    const height = viewport.clientHeight || 480;
    const first = Math.max(0, Math.floor(viewport.scrollTop / ROW_H) - 10);
    const last = Math.min(visible.length, first + Math.ceil(height / ROW_H) + 20);
    rows.style.transform = `translateY(${first * ROW_H}px)`;
    const fragment = document.createDocumentFragment();
    for (let k = first; k < last; k++) fragment.append(row(visible[k]));
    rows.replaceChildren(fragment);
  };
  let pending = false;
  viewport.addEventListener("scroll", () => { if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; draw(); }); } });
  const select = async (i) => {
    state.selected = i;
    draw();
    const s = spans[i];
    const call = s.call !== undefined && s.call !== null ? (calls || [])[s.call] : null;
    details.replaceChildren(el("h3", {}, s.name), el("p", { cls: "muted" }, `${s.kind || "span"} · ${fmt(s.ms, 1)} ms · starts at ${fmt(s.start_ms, 1)} ms · ${s.status}`));
    // A model call's prompt and answer, as the call log kept them (the span names its entry).
    const showCall = (c) => details.append(el("div", { cls: "call", id: "span-call" }, el("h4", {}, `Model call: ${c.role} in ${c.node}`),
      (c.messages || []).map(m => el("pre", { cls: "prompt" }, `[${m[0]}]\n${m[1]}`)),
      el("h4", {}, "Answer"), el("pre", { cls: "answer" }, c.answer)));
    if (call) showCall(call);
    try {
      const info = await api("api/runs/" + encodeURIComponent(runId) + "/spans/" + encodeURIComponent(s.span_id));
      if (state.selected !== i) return;
      if (!call && info.call) showCall(info.call);
      const a = info.attributes || {};
      if (a["db.query.text"]) {
        details.append(el("h4", {}, "SQL"), el("pre", { cls: "sql", id: "span-sql" }, a["db.query.text"]),
          el("p", {}, a["sql.error"] ? el("span", { cls: "error" }, a["sql.error"]) : `${a["sql.rows"] ?? a["db.response.returned_rows"] ?? "?"} rows`));
        let out = null;
        try { out = typeof a["output.value"] === "string" ? JSON.parse(a["output.value"]) : null; } catch (error) { out = null; }
        if (out && Array.isArray(out.columns) && Array.isArray(out.rows)) details.append(el("div", { id: "span-rows" }, resultTable(out.columns, out.rows)));
      }
      if ((info.taught || []).length) {
        details.append(el("h4", {}, "Taught examples in its prompts"), el("ul", { id: "span-taught" }, info.taught.map(x =>
          el("li", { "data-taught": x.id }, el("code", {}, x.id), " ", taughtFrom(x), el("span", { cls: "muted" }, " · score " + fmt(x.score, 3)),
            x.question ? el("div", { cls: "muted" }, x.question) : null))));
      }
      details.append(el("h4", {}, "Attributes"), el("table", { cls: "attrs", id: "span-attributes" }, el("tbody", {},
        Object.keys(a).sort().map(k => el("tr", {}, el("td", {}, el("code", {}, k)), el("td", {}, el("pre", {}, cell(a[k]))))))));
      if ((info.events || []).length) {
        details.append(el("h4", {}, "Events"), (info.events || []).map(e => el("pre", {}, e.name + " " + JSON.stringify(e.attributes || {}))));
      }
    } catch (error) { details.append(el("p", { cls: "error" }, error.message)); }
  };
  const kind = el("select", { id: "waterfall-kind", "aria-label": "span kind" }, el("option", { value: "" }, "all kinds"),
    KINDS.concat(["ERROR"]).map(k => el("option", { value: k }, k === "ERROR" ? "failed spans" : k)));
  kind.addEventListener("change", () => { state.kind = kind.value; viewport.scrollTop = 0; compute(); draw(); });
  const text = el("input", { type: "search", id: "waterfall-text", placeholder: "Filter spans by name or text", "aria-label": "filter spans" });
  text.addEventListener("input", () => { state.text = text.value; viewport.scrollTop = 0; compute(); draw(); });
  const collapseAll = el("button", { cls: "secondary", id: "waterfall-collapse", onclick: () => {
    collapsed.clear();
    spans.forEach((s, i) => { if (s.end > i + 1 && s.depth >= 1) collapsed.add(i); });
    compute(); draw();
  } }, "Collapse nodes");
  const expandAll = el("button", { cls: "secondary", id: "waterfall-expand", onclick: () => { collapsed.clear(); compute(); draw(); } }, "Expand all");
  compute();
  const head = el("div", { cls: "wf-row wf-head" }, ["Span", "Kind", "Duration", "Timeline", "What"].map(h => el("div", {}, h)));
  const view = el("div", { cls: "waterfall-box" }, el("div", { cls: "toolbar" }, kind, text, collapseAll, expandAll, counter),
    el("div", { cls: "wf-split" }, el("div", { cls: "wf-main" }, head, viewport), details));
  requestAnimationFrame(draw);
  draw();
  return view;
}

function barChart(entries, value, label) {
  const max = Math.max(1e-12, ...entries.map(([, v]) => value(v)));
  const chart = el("div", { cls: "chart" }, entries.map(([name, v]) => {
    const fill = el("div", { cls: "fill" });
    fill.style.width = (300 * value(v) / max).toFixed(1) + "px";
    return el("div", { cls: "barline" }, el("span", { cls: "label", title: name }, name), fill, el("span", { cls: "muted" }, label(v)));
  }));
  return chart;
}

// -- teaching --------------------------------------------------------------------------------------

// One line that says how a teach went: kept (with its id), or why not, as the server said it;
// "some" when part of it was kept and part refused.
function sayTaught(line, ok, text) {
  line.className = "teach-result " + (ok === null ? "muted" : ok === "some" ? "status-warn" : ok ? "status-ok" : "error");
  line.textContent = text;
  line.hidden = false;
}

// "This answer is right" and "The right SQL is …": each keeps the run's question and hint with
// that SQL as a taught example of the run's database. The server takes the question, hint and
// database from the run itself; the page sends at most the SQL.
function teachSection(runId, asked) {
  const result = el("p", { id: "teach-result", cls: "teach-result", role: "status", hidden: true });
  const sql = el("textarea", { id: "teach-sql", "aria-label": "the right SQL", placeholder: "SELECT …" });
  sql.value = asked.sql || "";
  const buttons = [];
  const teach = async (body) => {
    buttons.forEach(b => { b.disabled = true; });
    sayTaught(result, null, "Teaching…");
    try {
      const kept = (await api("api/runs/" + encodeURIComponent(runId) + "/teach", { method: "POST", body: JSON.stringify(body) })).kept;
      sayTaught(result, true, `Kept as taught example ${kept.id} on ${kept.database}: later runs on it see it in their prompts.`);
    } catch (error) {
      sayTaught(result, false, error.message);
    } finally {
      buttons.forEach(b => { b.disabled = b.dataset.never === "1"; });
    }
  };
  const right = el("button", { id: "teach-right", onclick: () => teach({}) }, "This answer is right");
  if (!asked.sql) { right.disabled = true; right.dataset.never = "1"; right.title = "This run chose no SQL."; }
  const given = el("button", { id: "teach-given", cls: "secondary", onclick: () => teach({ sql: sql.value }) }, "Teach this SQL");
  buttons.push(right, given);
  return el("section", { id: "teach" }, el("h2", {}, "Teach"),
    el("p", { cls: "muted" }, "Keep this question" + (asked.hint ? " and its hint" : "") + " with SQL you have checked, as a taught example of "
      + (asked.database || "the run's database") + ": later runs on that database see it in their prompts."),
    asked.hint ? el("p", { id: "teach-hint" }, el("span", { cls: "muted" }, "Hint: "), asked.hint) : null,
    el("div", { cls: "toolbar" }, right, el("span", { cls: "muted" }, asked.sql ? "teaches the answer above" : "the run chose no SQL: give the right one below")),
    el("label", { for: "teach-sql" }, "The right SQL is …"), sql,
    el("div", { cls: "toolbar" }, given), result);
}

// The run a taught example was taught from: a link when this viewer has that run.
function taughtFrom(x) {
  if (!x.run_id) return el("span", { cls: "muted" }, "taught without a run" + (x.source ? " (" + x.source + ")" : ""));
  if (x.known) return el("span", {}, "from run ", el("a", { href: "#/run/" + encodeURIComponent(x.run_id), cls: "taught-run" }, x.run_id));
  return el("span", {}, "from run " + x.run_id, el("span", { cls: "muted" }, " (not on this viewer)"));
}

// The taught examples the run's nodes showed in their prompts, and the glossary terms its
// question named (their meaning joined its hint); nothing when it used neither.
function taughtSection(taught) {
  const examples = (taught && taught.examples) || [], glossary = (taught && taught.glossary) || [];
  if (!examples.length && !glossary.length) return null;
  return el("section", { id: "taught" }, el("h2", {}, "Taught examples and glossary this run used"),
    examples.length ? el("table", { id: "taught-examples" }, el("thead", {}, el("tr", {},
      ["Node", "Example", "Question", "SQL", "From", "Score"].map(h => el("th", {}, h)))),
    el("tbody", {}, examples.map(x => el("tr", { "data-taught": x.id, "data-node": x.node },
      el("td", {}, x.node), el("td", {}, el("code", {}, x.id)),
      el("td", {}, x.kept ? x.question : el("span", { cls: "muted" }, "no longer kept")), el("td", { cls: "sql" }, x.sql || ""),
      el("td", {}, taughtFrom(x), x.source ? el("span", { cls: "muted" }, " via " + x.source) : null),
      el("td", {}, fmt(x.score, 3)))))) : null,
    glossary.length ? [el("h3", {}, "Glossary terms its question named"), el("table", { id: "glossary" }, el("thead", {}, el("tr", {},
      ["Term", "Meaning", "SQL", "Entry"].map(h => el("th", {}, h)))),
    el("tbody", {}, glossary.map(g => el("tr", { "data-term": g.id }, el("td", {}, g.term), el("td", {}, g.hint || ""),
      el("td", { cls: "sql" }, g.sql || ""), el("td", {}, el("code", {}, g.id))))))] : null);
}

// "Teach the gold SQL of the N wrong questions": each one's gold kept as a taught example of its
// database; the line says how many were kept and the list each refused one, with why.
function teachGold(name, wrong) {
  if (!wrong) return el("p", { cls: "muted", id: "teach-gold-none" }, "No wrong question to teach.");
  const result = el("p", { id: "teach-gold-result", cls: "teach-result", role: "status", hidden: true });
  const refused = el("ul", { id: "teach-gold-refused" });
  const button = el("button", { id: "teach-gold", onclick: async () => {
    button.disabled = true;
    refused.replaceChildren();
    sayTaught(result, null, "Teaching…");
    try {
      const r = await api("api/evals/" + encodeURIComponent(name) + "/teach", { method: "POST", body: "{}" });
      sayTaught(result, r.n_refused === 0 ? true : r.n_kept ? "some" : false, `Kept ${r.n_kept} of ${r.wrong} as taught examples` + (r.n_kept ? " (" + r.kept.map(k => k.id).join(", ") + ")" : "")
        + (r.n_refused ? `; ${r.n_refused} refused:` : "."));
      refused.replaceChildren(...r.refused.map(x => el("li", { "data-question": x.question_id },
        el("span", { cls: "muted" }, "question " + x.question_id + ": "), x.error)));
    } catch (error) {
      sayTaught(result, false, error.message);
    } finally { button.disabled = false; }
  } }, `Teach the gold SQL of the ${wrong} wrong question${wrong === 1 ? "" : "s"}`);
  return el("div", { id: "teach-gold-box" }, el("div", { cls: "toolbar" }, button,
    el("span", { cls: "muted" }, "each kept as a taught example of its database, with its hint")), result, refused);
}

async function runPage(runId) {
  const d = await api("api/runs/" + encodeURIComponent(runId));
  const s = d.summary;
  const facts = el("div", { cls: "facts" }, [["Database", s.database], ["Status", verdictText(s)],
    ["Model calls", fmt(s.calls)], ["Tokens", fmt(s.tokens)], ["Cost", money(s.cost_usd, s.unpriced_calls)], ["Seconds", fmt(s.seconds, 3)],
    ["When", when(s.started)], ["Run id", s.run_id]].map(([k, v]) => el("div", {}, el("span", {}, k), v)));
  const answer = d.answer || {};
  const selection = d.selection || {};
  const clusterOf = {}, clusterVotes = {};
  (selection.clusters || []).forEach((c, i) => { for (const m of c.members || []) { clusterOf[m] = i + 1; clusterVotes[m] = c.size; } });
  const weights = selection.weights || (selection.vote && selection.vote.weights) || {};
  const outcomes = {};
  for (const p of selection.pairwise || []) {
    for (const [me, other] of [[p.a, p.b], [p.b, p.a]]) {
      if (!me) continue;
      const said = p.winner === me ? "beat " + other : p.winner ? "lost to " + other : "no verdict with " + other;
      (outcomes[me] = outcomes[me] || []).push(said + (p.stage ? " (" + p.stage + ")" : ""));
    }
  }
  // A candidate's SQL as it came, each fix round's error, and the SQL it ended with.
  const sqlCell = (c) => {
    const history = c.history || [];
    if (!history.length) return el("td", { cls: "sql" }, c.sql);
    return el("td", {}, el("ol", { cls: "history" }, history.map((h, k) => el("li", { cls: "fix-round", "data-round": k },
      el("span", { cls: "muted" }, k === 0 ? "original: " : `fix round ${k}: `), el("span", { cls: "sql" }, h.sql || ""),
      h.error ? el("div", { cls: "error" }, h.error) : null)),
    el("li", { cls: "fixed" }, el("span", { cls: "muted" }, `fixed (round ${history.length}): `), el("span", { cls: "sql fixed-sql" }, c.sql))));
  };
  const ownVote = (c) => clusterOf[c.id] ? String(weights[c.id] ?? 1) : "0";
  const candidates = el("table", { id: "candidates" }, el("thead", {}, el("tr", {},
    ["Candidate", "Generator", "SQL", "Status", "Rows", "Error", "Fixes", "Cluster", "Votes", "Pairwise"].map(h => el("th", {}, h)))),
  el("tbody", {}, (d.candidates || []).map(c => el("tr", { cls: c.id === selection.chosen ? "chosen" : null, "data-candidate": c.id },
    el("td", {}, c.id + (c.id === selection.chosen ? " ★" : "")), el("td", {}, c.generator), sqlCell(c),
    el("td", { cls: statusClass(c.status) }, c.status), el("td", {}, fmt(c.row_count)), el("td", { cls: "error" }, c.error || ""),
    el("td", { cls: "fixes" }, fmt(c.fixer_rounds ?? c.fix_attempts)),
    el("td", {}, clusterOf[c.id] ? `#${clusterOf[c.id]} (${clusterVotes[c.id]} of ${(d.candidates || []).length} votes)` : ""),
    el("td", { cls: "votes" }, ownVote(c)),
    el("td", {}, (outcomes[c.id] || []).join("; "))))));
  const calls = {};
  for (const c of d.calls || []) (calls[c.node] = calls[c.node] || []).push(c);
  const callSections = Object.entries(calls).map(([node, list]) => el("details", {}, el("summary", {}, `${node} — ${list.length} call(s)`),
    list.map(c => el("div", {}, el("p", { cls: "muted" }, `${c.role} · ${c.model || (c.usage || {}).model || ""} · ${fmt((c.usage || {}).input_tokens)} in / ${fmt((c.usage || {}).output_tokens)} out${(c.usage || {}).cached ? " (cached)" : ""}`),
      el("details", {}, el("summary", {}, "Prompt"), (c.messages || []).map(m => el("pre", {}, `[${m[0]}]\n${m[1]}`))),
      el("p", {}, "Answer:"), el("pre", {}, c.answer)))));
  const costs = Object.entries(d.cost_by_node || {});
  const ev = d.eval;
  const judged = ev ? section("Evaluation " + s.group + ", question " + ev.question_id,
    el("p", { id: "verdict", cls: ev.correct ? "status-ok" : "status-bad" }, ev.verdict_text || (ev.correct ? "correct" : "wrong" + (ev.verdict && ev.verdict !== "wrong" ? " (" + ev.verdict + ")" : ""))),
    (ev.branches || []).length ? el("div", { id: "branches" }, el("p", { cls: "muted" }, "Debugging branches, scored against the gold (the verdict above is what the evaluation scored):"),
      branchList(ev.branches, true)) : null,
    el("div", { cls: "facts" }, el("div", {}, el("span", {}, "Hardness"), ev.hardness), el("div", {}, el("span", {}, "Database"), ev.db_id),
      el("div", {}, el("span", {}, "Chosen generator"), ev.generator)),
    el("p", {}, "Gold SQL:"), el("pre", { cls: "sql", id: "gold-sql" }, ev.gold_sql),
    el("a", { href: "#/eval/" + encodeURIComponent(s.group) }, "all questions of " + s.group)) : null;
  const others = el("input", { type: "text", id: "compare-with", placeholder: "another run's id", "aria-label": "compare with run" });
  const sessions = (d.sessions || []).length ? section("Step-through and replay sessions from this run",
    el("ul", { id: "sessions" }, d.sessions.map(x => el("li", {}, el("a", { href: "#/run/" + x.run_id }, x.run_id), " ",
      el("span", { cls: "muted" }, when(x.started) + " · " + verdictText(x)))))) : null;
  show(
    el("h1", {}, s.question || s.run_id),
    el("div", { cls: "toolbar" }, d.checkpoints ? el("button", { id: "step-through", onclick: () => { location.hash = "#/debug/" + s.run_id; } }, "Step through") : null,
      s.replay_of ? el("a", { href: "#/run/" + s.replay_of }, "replay of " + s.replay_of) : null,
      others, el("button", { cls: "secondary", onclick: () => { if (others.value.trim()) location.hash = "#/compare/" + s.run_id + "/" + encodeURIComponent(others.value.trim()); } }, "Compare")),
    judged,
    section(null, facts),
    el("div", { cls: "row" },
      section("Path through the graph", graphView(d.graph, d.path)),
      section("Answer", answer.sql ? el("pre", { cls: "sql", id: "answer-sql" }, answer.sql) : el("p", { cls: "error" }, answer.error || s.error || "No answer."),
        resultTable(answer.columns, answer.rows), selection.reason ? el("p", { id: "why" }, "Why this one: " + selection.reason) : null)),
    teachSection(s.run_id, d.asked || {}),
    taughtSection(d.taught),
    section("Candidates", candidates),
    section("Cost per node", costs.length ? barChart(costs, v => v.tokens, v => `${fmt(v.tokens)} tokens · ${money(v.cost_usd, v.unpriced_calls)} · ${v.calls} calls`) : el("p", { cls: "muted" }, "No model calls.")),
    section("Spans", waterfallView(d.spans, d.calls, s.run_id)),
    section("Model calls", callSections.length ? callSections : el("p", { cls: "muted" }, "The call log is kept with checkpoints; none for this run.")),
    sessions,
  );
}

// -- a live run ----------------------------------------------------------------------------------

async function livePage(runId) {
  const drawing = (await api("api/graph")).graph;
  const states = {};
  const holder = el("div", {});
  const log = el("div", { cls: "events", id: "events" });
  const status = el("p", { id: "live-status" }, "Running…");
  const redraw = () => holder.replaceChildren(graphView(drawing, null, states));
  show(el("h1", {}, "Live run " + runId), status, el("div", { cls: "row" }, section("Graph", holder), section("Events", log)));
  redraw();
  live = new EventSource("api/live/" + encodeURIComponent(runId) + "/events");
  const add = (text) => { log.append(el("div", {}, text)); log.scrollTop = log.scrollHeight; };
  live.addEventListener("node", (e) => {
    const ev = JSON.parse(e.data);
    if (ev.node === "prepare") return;
    states[ev.node] = ev.state === "started" ? "running" : "done";
    add(`${ev.node} ${ev.state}${ev.state === "finished" ? " in " + fmt(ev.seconds * 1000, 1) + " ms" : ""}`);
    redraw();
  });
  live.addEventListener("candidate", (e) => { const c = JSON.parse(e.data).candidate; add(`candidate ${c.id}: ${c.status} ${c.sql || ""}`); });
  live.addEventListener("answer", (e) => { const a = JSON.parse(e.data).answer; status.textContent = "Answered: " + (a.sql || a.error); });
  live.addEventListener("error", (e) => { if (e.data) { const x = JSON.parse(e.data); status.textContent = "No answer: " + x.message; } });
  live.addEventListener("done", () => {
    live.close(); live = null;
    add("done");
    status.replaceChildren(status.textContent + " ", el("a", { href: "#/run/" + runId, id: "open-run" }, "Open the run"));
  });
}

// -- step-through ---------------------------------------------------------------------------------

async function debugPage(runId, checkpoint) {
  let pos = await api("api/debug/" + encodeURIComponent(runId) + (checkpoint ? "?checkpoint=" + encodeURIComponent(checkpoint) : ""));
  const act = async (path, body, method = "POST") => {
    try {
      pos = await api("api/debug/" + encodeURIComponent(runId) + path, { method, body: body ? JSON.stringify(body) : undefined });
      render();
    } catch (error) { message.textContent = error.message; }
  };
  const message = el("p", { cls: "error", id: "debug-message" });
  const render = () => {
    const byParent = {};
    for (const h of pos.history) (byParent[h.parent] = byParent[h.parent] || []).push(h);
    const tree = (parent, depth) => (byParent[parent] || []).map(h => [
      el("li", { cls: h.id === pos.checkpoint ? "current" : null },
        "\u00a0".repeat(depth * 3),
        el("span", { cls: "cp", "data-checkpoint": h.id, onclick: () => { location.hash = "#/debug/" + runId + "/" + h.id; } },
          `step ${h.step} · ${h.node} · ${h.source}`),
        " ", el("span", { cls: "muted" }, h.id.slice(-8)), " ",
        el("button", { cls: "secondary", onclick: () => act("/fork/" + h.id) }, "fork here")),
      ...tree(h.id, (byParent[h.id] || []).length > 1 || depth > 0 ? depth + 1 : depth)]).flat();
    const keys = Object.keys(pos.state).sort();
    const stateRows = keys.map(k => el("tr", { cls: k in pos.diff ? "diff-changed" : null, "data-key": k },
      el("td", {}, el("code", {}, k)), el("td", {}, el("pre", {}, JSON.stringify(pos.state[k], null, 1).slice(0, 4000)))));
    const key = el("select", { id: "edit-key", "aria-label": "state key" }, keys.map(k => el("option", { value: k }, k)));
    const value = el("textarea", { id: "edit-value", "aria-label": "new value (JSON)" });
    const fill = () => { value.value = JSON.stringify(pos.state[key.value], null, 1) || ""; };
    key.addEventListener("change", fill);
    fill();
    const node = el("input", { type: "text", placeholder: "node", "aria-label": "breakpoint node" });
    const condition = el("input", { type: "text", placeholder: "condition (optional)", "aria-label": "breakpoint condition" });
    show(
      el("h1", {}, "Step through " + runId),
      (pos.notes || []).map(n => el("div", { cls: "banner" }, n)),
      el("div", { cls: "toolbar" },
        el("span", { id: "debug-where" }, pos.finished ? "The run has ended." : "Paused before: " + pos.next.join(", ")),
        el("button", { id: "step", disabled: pos.finished, onclick: () => act("/step") }, "Step"),
        el("button", { id: "continue", disabled: pos.finished, onclick: () => act("/continue") }, "Continue"),
        el("a", { href: "#/run/" + runId }, "the run's page")),
      message,
      // A branch of an evaluation's run that this step ended, scored against the question's gold;
      // the evaluation's own verdict stays what it was.
      pos.branch ? el("div", { id: "branch-ended", cls: "banner" }, "This branch ended: ",
        branchList([pos.branch], true), el("span", { cls: "muted" }, "The evaluation's record keeps the verdict it scored.")) : null,
      el("div", { cls: "row" },
        section("Checkpoints", el("ul", { cls: "timeline", id: "timeline" }, tree(null, 0))),
        section("Breakpoints", el("div", {}, Object.entries(pos.breakpoints).map(([n, c]) => el("span", { cls: "pill" }, n + (c ? " if " + c : ""), " ",
          el("button", { cls: "secondary", onclick: () => act("/breakpoints/" + encodeURIComponent(n), null, "DELETE") }, "×")))),
        el("div", { cls: "toolbar" }, node, condition, el("button", { onclick: () => act("/breakpoints", { node: node.value, condition: condition.value || null }) }, "Add")))),
      section("Edit a value (at the current checkpoint)", el("div", { cls: "toolbar" }, key), value,
        el("div", { cls: "toolbar" }, el("button", { id: "set", onclick: () => {
          let parsed;
          try { parsed = JSON.parse(value.value); } catch (error) { message.textContent = "Not JSON: " + error.message; return; }
          act("/set", { key: key.value, value: parsed });
        } }, "Set"))),
      section(`State at ${pos.shown.slice(-8)}` + (Object.keys(pos.diff).length ? ` — changed: ${Object.keys(pos.diff).join(", ")}` : ""),
        el("table", { id: "state" }, el("tbody", {}, stateRows))),
    );
  };
  render();
}

// -- charts with axes (SVG, drawn here: the page loads nothing else) ------------------------------

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  return [1, 2, 2.5, 5, 10].map(m => m * p).find(m => m >= v) || v;
}

// Text widths, to lay a chart out around its labels before it is in the page (where an SVG has
// no boxes to measure yet); the sizes are the ones app.css gives chart text.
const measurer = document.createElement("canvas").getContext("2d");
function textWidth(text, size = 11) {
  measurer.font = `${size}px system-ui, sans-serif`;
  return Math.ceil(measurer.measureText(String(text)).width) + 2;
}

// Bars with a y axis (0 to the top value, ticks and unit) and a label under each bar. The axis is
// as wide as its longest tick and each bar's slot as wide as its label, so no label is cut.
function columnChart(bars, { unit = "", max = null, label = "", id = null, format = (v) => fmt(v, 1) } = {}) {
  const top = max ?? niceMax(Math.max(0, ...bars.map(b => b.value || 0)));
  const ticks = [0, 1, 2, 3, 4].map(k => top * k / 4);
  const names = bars.map(b => String(b.label).length > 32 ? String(b.label).slice(0, 31) + "…" : String(b.label));
  const L = 10 + Math.max(...ticks.map(v => textWidth(format(v) + unit))), H = 220, B = 46, T = 20;
  const slot = Math.max(64, ...names.map(n => textWidth(n) + 10), ...bars.map(b => textWidth(b.note || "") + 10),
    ...bars.map(b => textWidth(format(b.value || 0) + unit, 12) + 6));
  const W = Math.max(320, L + 16 + bars.length * slot);
  const root = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label, cls: "column-chart" });
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const axis = svg("g", { cls: "axis" });
  for (const v of ticks) {
    root.append(svg("line", { x1: L, x2: W - 8, y1: y(v), y2: y(v), cls: "gridline" }));
    axis.append(svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, format(v) + unit));
  }
  axis.append(svg("line", { x1: L, x2: L, y1: T, y2: H - B }), svg("line", { x1: L, x2: W - 8, y1: H - B, y2: H - B }));
  const step = (W - L - 16) / Math.max(1, bars.length);
  bars.forEach((b, i) => {
    const w = Math.min(44, step - 12), x = L + 8 + i * step + (step - 12 - w) / 2, v = b.value || 0;
    const rect = svg("rect", { x, y: y(v), width: w, height: Math.max(0, H - B - y(v)), cls: "barrect" + (b.bad ? " bad" : ""), "data-label": b.label });
    rect.append(svg("title", {}, `${b.label}: ${format(v)}${unit}${b.note ? " " + b.note : ""}`));
    root.append(rect, svg("text", { x: x + w / 2, y: y(v) - 4, "text-anchor": "middle", cls: "value" }, format(v) + unit));
    axis.append(svg("text", { x: x + w / 2, y: H - B + 15, "text-anchor": "middle" }, names[i]),
      svg("text", { x: x + w / 2, y: H - B + 29, "text-anchor": "middle" }, b.note || ""));
  });
  root.append(axis);
  return el("figure", { cls: "plot" }, el("figcaption", {}, label), root);
}

// A value per run over time: dates on the x axis, the unit on the y axis; one run is a dot.
// The y axis is as wide as its longest tick, and the chart as wide as its two dates need.
function timeChart(points, { unit = "", label = "", format = (v) => fmt(v, 3) } = {}) {
  const top = niceMax(Math.max(0, ...points.map(p => p.y)));
  const times = points.map(p => p.t ? new Date(p.t).getTime() : NaN);
  const known = times.every(t => !isNaN(t));
  const lo = known ? Math.min(...times) : 0, hi = known ? Math.max(...times) : Math.max(1, points.length - 1);
  const close = known && hi - lo < 3600e3; // within an hour: the seconds tell runs apart
  const day = (t) => new Date(t).toLocaleString(undefined, close ? { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" }
    : { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  const first = known ? day(lo) : "run 1", last = known ? day(hi) : "run " + points.length;
  const H = 150, B = 34, T = 10, R = 12;
  const L = 9 + Math.max(...[0, top / 2, top].map(v => textWidth(format(v) + " " + unit)));
  const W = Math.max(300, L + R + textWidth(first) + (points.length > 1 ? textWidth(last) + 16 : 0));
  const xOf = (i) => points.length === 1 ? L + (W - L - R) / 2 : L + (W - L - R) * ((known ? times[i] : i) - lo) / Math.max(1, hi - lo);
  const yOf = (v) => T + (H - T - B) * (1 - v / top);
  const root = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label, cls: "time-chart" });
  const axis = svg("g", { cls: "axis" });
  for (const v of [0, top / 2, top]) {
    root.append(svg("line", { x1: L, x2: W - R, y1: yOf(v), y2: yOf(v), cls: "gridline" }));
    axis.append(svg("text", { x: L - 5, y: yOf(v) + 4, "text-anchor": "end" }, format(v) + " " + unit));
  }
  axis.append(svg("line", { x1: L, x2: L, y1: T, y2: H - B }), svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B }));
  if (points.length) {
    axis.append(svg("text", { x: L, y: H - B + 16, "text-anchor": "start", cls: "date" }, first));
    if (points.length > 1) axis.append(svg("text", { x: W - R, y: H - B + 16, "text-anchor": "end", cls: "date" }, last));
  }
  if (points.length > 1) {
    root.append(svg("polyline", { points: points.map((p, i) => `${xOf(i).toFixed(1)},${yOf(p.y).toFixed(1)}`).join(" "), fill: "none", stroke: "#2456c9", "stroke-width": 1.4 }));
  }
  points.forEach((p, i) => {
    const dot = svg("circle", { cx: xOf(i), cy: yOf(p.y), r: points.length === 1 ? 4 : 2.2, cls: "dot" });
    dot.append(svg("title", {}, `${p.t ? when(p.t) : ""} ${p.run || ""}: ${format(p.y)} ${unit}`));
    root.append(dot);
  });
  root.append(axis);
  return el("div", { cls: "plot" }, root);
}

function percentile(values, q) {
  if (!values.length) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

// -- across runs ----------------------------------------------------------------------------------

async function statsPage() {
  const last = Number(new URLSearchParams(location.hash.split("?")[1] || "").get("last")) || 50;
  const s = await api("api/stats?last=" + last);
  const rows = Object.entries(s.nodes).map(([node, v]) => {
    const ms = v.seconds.map(x => x * 1000);
    const points = (key, scale = 1) => v[key].map((y, i) => ({ y: y * scale, t: (v.started || [])[i], run: (v.runs || [])[i] }));
    const tokens = v.tokens || [];
    return el("tr", { "data-node": node }, el("td", {}, node), el("td", {}, fmt(ms.length)),
      el("td", { cls: "p50" }, fmt(percentile(ms, 0.5), 1) + " ms"), el("td", { cls: "p95" }, fmt(percentile(ms, 0.95), 1) + " ms"),
      el("td", {}, timeChart(points("seconds", 1000), { unit: "ms", label: node + " milliseconds per run", format: (x) => fmt(x, 0) })),
      el("td", {}, fmt(tokens.reduce((a, b) => a + b, 0)) + " tokens", el("br"), el("span", { cls: "muted" }, "p50 " + fmt(percentile(tokens, 0.5)) + " per run")),
      el("td", {}, tokens.some(t => t > 0) ? timeChart(points("tokens"), { unit: "tok", label: node + " tokens per run", format: (x) => fmt(x, 0) })
        : el("span", { cls: "muted" }, "no model calls")),
      el("td", { cls: "cost" }, money(v.cost_usd.reduce((a, b) => a + b, 0), (v.unpriced_calls || []).reduce((a, b) => a + b, 0))));
  });
  show(el("h1", {}, `Across the last ${s.runs} runs (${s.ok} answered)`),
    section("Latency, tokens and cost per node", el("div", { cls: "scroll-x" }, el("table", { id: "nodes" }, el("thead", {}, el("tr", {},
      ["Node", "Runs", "p50", "p95", "Time per run (ms, by date)", "Tokens", "Tokens per run", "Cost"].map(h => el("th", {}, h)))),
    el("tbody", {}, rows)))),
    section("Why runs had no answer", Object.keys(s.failures).length
      ? barChart(Object.entries(s.failures), v => v, v => String(v)) : el("p", { cls: "muted" }, "Every run answered.")));
}

// -- evaluations -----------------------------------------------------------------------------------

function pct(part, whole) { return whole ? 100 * part / whole : 0; }

// A question without a value goes under "(none)"; one without a generator had no prediction, or
// came from a scored file, and goes under the report's name for that.
function accuracyBy(questions, key) {
  const groups = {};
  for (const q of questions) {
    if (!q.scored) continue;
    const name = q[key] || (key === "generator" ? (q.prediction ? "unknown" : "missing_prediction") : "(none)");
    const g = groups[name] = groups[name] || { n: 0, right: 0 };
    g.n += 1; if (q.correct) g.right += 1;
  }
  return Object.entries(groups).map(([label, g]) => ({ label, value: pct(g.right, g.n), note: `n=${g.n}` }));
}

async function evalsPage() {
  const data = await api("api/evals");
  const a = el("select", { id: "compare-a", "aria-label": "first evaluation" }, data.evals.map(e => el("option", { value: e.name }, e.name)));
  const b = el("select", { id: "compare-b", "aria-label": "second evaluation" }, data.evals.map(e => el("option", { value: e.name }, e.name)));
  if (data.evals.length > 1) b.value = data.evals[1].name;
  show(el("h1", {}, "Evaluations"),
    section(null, el("table", { id: "evals" }, el("thead", {}, el("tr", {}, ["Evaluation", "Dataset", "Started", "Questions", "Accuracy", "Generators"].map(h => el("th", {}, h)))),
      el("tbody", {}, data.evals.map(e => el("tr", { cls: "clickable", "data-eval": e.name, onclick: () => { location.hash = "#/eval/" + encodeURIComponent(e.name); } },
        el("td", {}, e.name), el("td", {}, e.dataset || ""), el("td", { cls: "muted" }, when(e.started)), el("td", {}, fmt(e.questions)),
        el("td", {}, `${fmt(pct(e.correct, e.scored), 1)}% (${e.correct}/${e.scored})`),
        el("td", {}, Object.entries((e.settings || {}).generators || {}).map(([g, n]) => g + "×" + n).join(", "))))))),
    data.evals.length > 1 ? section("Compare two evaluations", el("div", { cls: "toolbar" }, a, b,
      el("button", { id: "compare-evals", onclick: () => { location.hash = "#/compare-evals/" + encodeURIComponent(a.value) + "/" + encodeURIComponent(b.value); } }, "Compare"))) : null);
}

const PAGE_ROWS = 100; // questions drawn at first in an evaluation's table; more on asking
const evalFilters = { verdict: "", hardness: "", db: "", generator: "", error: "", q: "" };

function sideBySide(holder, name, q) {
  holder.replaceChildren(el("p", { cls: "muted" }, "Running both queries…"));
  api("api/evals/" + encodeURIComponent(name) + "/rows/" + q.index).then(r => {
    const side = (title, x) => el("div", { cls: "side", "data-side": title }, el("h4", {}, title),
      x.error ? el("p", { cls: "error" }, x.error) : resultTable(x.columns, x.rows), x.truncated ? el("p", { cls: "muted" }, "(first rows only)") : null);
    holder.replaceChildren(el("div", { cls: "side-by-side" }, side("gold", r.gold), side("predicted", r.predicted)));
  }).catch(error => holder.replaceChildren(el("p", { cls: "error" }, error.message)));
}

async function evalPage(name) {
  const data = await api("api/evals/" + encodeURIComponent(name));
  const qs = data.questions;
  const scored = qs.filter(q => q.scored);
  const right = scored.filter(q => q.correct).length;
  const options = (key) => [...new Set(qs.map(q => q[key]).filter(v => v !== null && v !== undefined && v !== ""))].sort();
  const select = (key, label, values) => {
    const node = el("select", { id: "filter-" + key, "aria-label": label }, el("option", { value: "" }, "any " + label),
      values.map(v => el("option", { value: v }, v)));
    node.value = evalFilters[key];
    node.addEventListener("change", () => { evalFilters[key] = node.value; limit = PAGE_ROWS; draw(); });
    return node;
  };
  const search = el("input", { type: "search", id: "filter-q", placeholder: "Search questions and SQL", "aria-label": "search questions", value: evalFilters.q });
  search.addEventListener("input", () => { evalFilters.q = search.value; limit = PAGE_ROWS; draw(); });
  // The table draws its first PAGE_ROWS matching questions, and more on asking: a full
  // evaluation (Spider dev's 1,034 questions) opens and filters at once.
  let limit = PAGE_ROWS;
  const more = el("div", { cls: "toolbar", id: "questions-more" });
  const count = el("span", { cls: "muted", id: "eval-count" });
  const table = el("table", { id: "questions" });
  const cols = ["#", "Hardness", "Database", "Question", "Gold SQL", "Predicted SQL", "Result", "Generator", "Cost", "Seconds", "Run"];
  const draw = () => {
    const f = evalFilters, text = f.q.toLowerCase();
    const shown = qs.filter(q => (!f.verdict || (f.verdict === "correct" ? q.correct : f.verdict === "wrong" ? !q.correct && q.scored : !q.scored))
      && (!f.hardness || q.hardness === f.hardness) && (!f.db || q.db_id === f.db) && (!f.generator || q.generator === f.generator)
      && (!f.error || q.error_kind === f.error)
      && (!text || [q.question, q.gold_sql, q.prediction, q.db_id, String(q.question_id)].join(" ").toLowerCase().includes(text)));
    count.textContent = `${shown.length} of ${qs.length} questions`;
    const body = [];
    for (const q of shown.slice(0, limit)) {
      const more = el("tr", { cls: "rows", hidden: true }, el("td", { colspan: cols.length }));
      const open = () => { more.hidden = !more.hidden; if (!more.hidden && !more.dataset.loaded) { more.dataset.loaded = "1"; sideBySide(more.firstChild, name, q); } };
      body.push(el("tr", { cls: q.correct ? "q-correct" : "q-wrong", "data-question": q.question_id, "data-index": q.index },
        el("td", {}, String(q.question_id)), el("td", {}, q.hardness), el("td", {}, q.db_id), el("td", {}, q.question),
        el("td", { cls: "sql gold" }, q.gold_sql), el("td", { cls: "sql predicted" }, q.prediction),
        el("td", { cls: "verdict " + (q.correct ? "status-ok" : "status-bad") }, el("span", { cls: "scored" }, q.verdict_text), branchList(q.branches, false)),
        el("td", {}, q.generator), el("td", {}, money(q.cost_usd, q.unpriced)), el("td", {}, fmt(q.seconds, 2)),
        el("td", {}, q.run_id && q.has_run ? [el("a", { href: "#/run/" + q.run_id, cls: "open-run" }, "run"), " · ",
          el("a", { href: "#/debug/" + q.run_id, cls: "open-debug" }, "step through")] : el("span", { cls: "muted" }, "no run kept"),
        " · ", el("button", { cls: "secondary rows-button", onclick: open }, q.correct ? "rows" : "rows side by side"))));
      body.push(more);
      if (!q.correct && q.scored && q.prediction && shown.length <= 25) { more.hidden = false; more.dataset.loaded = "1"; sideBySide(more.firstChild, name, q); }
    }
    table.replaceChildren(el("thead", {}, el("tr", {}, cols.map(c => el("th", {}, c)))), el("tbody", {}, body));
    const left = shown.length - Math.min(limit, shown.length);
    more.replaceChildren(...(left > 0 ? [el("span", { cls: "muted" }, `the first ${fmt(limit)} shown`),
      el("button", { cls: "secondary", id: "questions-next", onclick: () => { limit += PAGE_ROWS; draw(); } }, `Show ${fmt(Math.min(PAGE_ROWS, left))} more`),
      el("button", { cls: "secondary", id: "questions-all", onclick: () => { limit = shown.length; draw(); } }, `Show all ${fmt(shown.length)}`)] : []));
  };
  draw();
  const cost = qs.reduce((a, q) => a + q.cost_usd, 0), seconds = qs.reduce((a, q) => a + q.seconds, 0);
  const settings = (data.run || {}).settings || {};
  show(el("h1", {}, "Evaluation " + name),
    el("div", { cls: "toolbar" }, data.report ? el("a", { href: "evals/" + encodeURIComponent(name) + "/report" }, "static report") : null,
      el("a", { href: "#/evals" }, "all evaluations")),
    section(null, el("div", { cls: "facts" }, [["Dataset", (data.run || {}).dataset], ["Accuracy", `${fmt(pct(right, scored.length), 1)}% (${right}/${scored.length})`],
      // BIRD's Soft-F1 and R-VES, as the evaluation's summary has them (R-VES is timed, so not recomputed here).
      ...[["Soft-F1", "soft_f1"], ["R-VES", "r_ves"]].filter(([, key]) => key in (data.metrics || {}))
        .map(([label, key]) => [label, data.metrics[key] === null ? "n/a" : `${fmt(data.metrics[key], 2)}%`]),
      ["Questions", fmt(qs.length)], ["Generators", Object.entries(settings.generators || {}).map(([g, n]) => g + "×" + n).join(", ")],
      ["Cost", money(cost, qs.some(q => q.unpriced))], ["Seconds", fmt(seconds, 2)], ["Started", when((data.run || {}).started)]].map(([k, v]) => el("div", {}, el("span", {}, k), v ?? "")))),
    section("Teach", teachGold(name, qs.filter(q => q.scored && !q.correct).length)),
    section("Accuracy", el("div", { cls: "charts" },
      el("div", { id: "chart-hardness" }, columnChart(accuracyBy(qs, "hardness"), { unit: "%", max: 100, label: "Accuracy by hardness", format: (v) => fmt(v, 0) })),
      el("div", { id: "chart-generator" }, columnChart(accuracyBy(qs, "generator"), { unit: "%", max: 100, label: "Accuracy by generator chosen", format: (v) => fmt(v, 0) })))),
    section("Questions", el("div", { cls: "toolbar" },
      select("verdict", "result", ["correct", "wrong", "not scored"]), select("hardness", "hardness", options("hardness")),
      select("db", "database", options("db_id")), select("generator", "generator", options("generator")),
      select("error", "error kind", options("error_kind")), search, count), el("div", { cls: "scroll-x" }, table), more));
}

// -- compare ---------------------------------------------------------------------------------------

async function compareRunsPage(a, b) {
  const [x, y] = await Promise.all([api("api/runs/" + encodeURIComponent(a)), api("api/runs/" + encodeURIComponent(b))]);
  const column = (d, side) => {
    const s = d.summary, answer = d.answer || {};
    return section(null, el("h2", {}, el("a", { href: "#/run/" + s.run_id }, s.run_id)),
      el("p", {}, s.question), el("p", { cls: verdictClass(s) }, verdictText(s)),
      el("div", { cls: "facts" }, [["Calls", fmt(s.calls)], ["Tokens", fmt(s.tokens)], ["Cost", money(s.cost_usd, s.unpriced_calls)], ["Seconds", fmt(s.seconds, 3)]]
        .map(([k, v]) => el("div", {}, el("span", {}, k), v))),
      el("h3", {}, "Answer"), answer.sql ? el("pre", { cls: "sql", id: "compare-sql-" + side }, answer.sql) : el("p", { cls: "error" }, answer.error || s.error || "No answer."),
      resultTable(answer.columns, answer.rows),
      el("h3", {}, "Candidates"), el("ul", {}, (d.candidates || []).map(c => el("li", {}, c.id + " (" + c.status + "): ", el("span", { cls: "sql" }, c.sql || "")))),
      el("h3", {}, "Model calls"), el("ol", { cls: "compare-calls" }, (d.calls || []).map(c => el("li", {},
        [c.node || "", c.role || "", c.model || (c.usage || {}).model || ""].join(" · ") + ((c.usage || {}).cached ? " (cached)" : "")))),
      el("h3", {}, "Path"), graphView(d.graph, d.path));
  };
  const same = (x.answer || {}).sql === (y.answer || {}).sql;
  show(el("h1", {}, "Two runs side by side"), el("p", { id: "compare-verdict" }, same ? "Both chose the same SQL." : "They chose different SQL."),
    section("What changed at each node", nodeComparison(x, y)),
    el("div", { cls: "row", id: "compare" }, column(x, "a"), column(y, "b")));
}

// Each node of either run: its visits, model calls, tokens, cost and time in each, and whether
// any of them differ (a changed row is marked).
function nodeComparison(x, y) {
  const visits = d => (d.path && d.path.visits) || {};
  const costs = d => d.cost_by_node || {};
  const calls = d => (d.calls || []).reduce((m, c) => { m[c.node] = (m[c.node] || 0) + 1; return m; }, {});
  const names = [...new Set([...Object.keys(visits(x)), ...Object.keys(visits(y)), ...Object.keys(costs(x)), ...Object.keys(costs(y))])];
  const order = n => { const i = ((x.graph || {}).nodes || []).findIndex(g => g.id === n); return i < 0 ? 999 : i; };
  names.sort((a, b) => order(a) - order(b) || a.localeCompare(b));
  const cells = (d, n) => {
    const c = costs(d)[n] || {};
    return [visits(d)[n] || 0, calls(d)[n] || c.calls || 0, c.tokens || 0, c.cost_usd || 0, c.ms || 0, c.unpriced_calls || 0];
  };
  const rows = names.map(n => {
    const a = cells(x, n), b = cells(y, n);
    const changed = a.some((v, i) => v !== b[i]);
    const shown = (list) => list.slice(0, 5).map((v, i) => el("td", { cls: "num" }, i === 3 ? money(v, list[5]) : fmt(v, i === 4 ? 1 : 0)));
    return el("tr", { "data-node": n, cls: changed ? "diff-changed" : "" }, el("td", {}, n),
      ...shown(a), ...shown(b),
      el("td", {}, changed ? "changed" : "same"));
  });
  const heads = ["visits", "calls", "tokens", "cost", "ms"];
  return el("table", { id: "compare-nodes" },
    el("thead", {}, el("tr", {}, el("th", {}, "node"), ...heads.map(h => el("th", {}, h + " (a)")), ...heads.map(h => el("th", {}, h + " (b)")), el("th", {}, ""))),
    el("tbody", {}, rows));
}

async function compareEvalsPage(a, b) {
  const [x, y] = await Promise.all([api("api/evals/" + encodeURIComponent(a)), api("api/evals/" + encodeURIComponent(b))]);
  const key = (q) => q.db_id + "\u0000" + q.question_id + "\u0000" + q.question;
  const byKey = {};
  for (const q of y.questions) byKey[key(q)] = q;
  const pairs = x.questions.filter(q => byKey[key(q)]).map(q => [q, byKey[key(q)]]);
  const acc = (list) => { const s = list.filter(q => q.scored); return pct(s.filter(q => q.correct).length, s.length); };
  const accA = acc(pairs.map(p => p[0])), accB = acc(pairs.map(p => p[1]));
  const flipped = pairs.filter(([p, q]) => p.correct !== q.correct);
  const link = (q, label) => q.run_id ? el("a", { href: "#/run/" + q.run_id }, label) : el("span", { cls: "muted" }, "no run");
  show(el("h1", {}, `${a} and ${b}`),
    section(null, el("div", { cls: "facts" }, [["Questions in both", fmt(pairs.length)], [a, fmt(accA, 1) + "%"], [b, fmt(accB, 1) + "%"],
      ["Difference", el("strong", { id: "accuracy-difference" }, (accB - accA >= 0 ? "+" : "") + fmt(accB - accA, 1) + " points")],
      ["Flipped", fmt(flipped.length)]].map(([k, v]) => el("div", {}, el("span", {}, k), v)))),
    section("Questions whose result flipped", flipped.length ? el("table", { id: "flipped" }, el("thead", {}, el("tr", {}, ["#", "Question", a, b, "Runs"].map(h => el("th", {}, h)))),
      el("tbody", {}, flipped.map(([p, q]) => el("tr", { "data-question": p.question_id },
        el("td", {}, String(p.question_id)), el("td", {}, p.question),
        el("td", { cls: p.correct ? "status-ok" : "status-bad" }, p.correct ? "correct" : "wrong"),
        el("td", { cls: (q.correct ? "status-ok flip-up" : "status-bad flip-down") }, q.correct ? "correct" : "wrong"),
        el("td", {}, link(p, a), " · ", link(q, b), " · ",
          p.run_id && q.run_id ? el("a", { href: "#/compare/" + p.run_id + "/" + q.run_id, cls: "compare-pair" }, "side by side") : null)))))
      : el("p", { cls: "muted" }, "No question changed result.")));
}

route();
