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

function show(...nodes) { main.replaceChildren(...nodes); }
function section(title, ...body) { return el("section", {}, title ? el("h2", {}, title) : null, ...body); }
function fmt(n, digits = 0) { return n === null || n === undefined ? "" : Number(n).toLocaleString(undefined, { maximumFractionDigits: digits }); }
function usd(n) { return n ? "$" + Number(n).toFixed(n < 0.01 ? 5 : 3) : "$0"; }
function when(iso) { return iso ? new Date(iso).toLocaleString() : ""; }
function cell(v) { return v === null || v === undefined ? "NULL" : typeof v === "object" ? JSON.stringify(v) : String(v); }
function statusClass(s) { return s === "ok" || s === "done" ? "status-ok" : s === "cancelled" || s === "empty" ? "status-warn" : "status-bad"; }

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
  const ask = async (debug) => {
    try {
      const body = JSON.stringify({ question: question.value, database: database.value || null });
      if (debug) location.hash = "#/debug/" + (await api("api/debug", { method: "POST", body })).run_id;
      else location.hash = "#/live/" + (await api("api/live", { method: "POST", body })).run_id;
    } catch (error) { failed(error); }
  };
  const search = el("input", { type: "search", placeholder: "Search questions, SQL, databases", value: listState.q, "aria-label": "search" });
  const table = el("table", { id: "runs" });
  const columns = [["started", "When"], ["question", "Question"], ["database", "Database"], ["status", "Status"],
    ["sql", "Chosen SQL"], ["calls", "Calls"], ["tokens", "Tokens"], ["cost_usd", "Cost"], ["seconds", "Seconds"]];
  const draw = () => {
    const q = listState.q.toLowerCase();
    const rows = data.runs.filter(r => !q || [r.question, r.sql, r.database, r.run_id, r.group].join(" ").toLowerCase().includes(q));
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
        body.push(el("tr", { cls: "group" }, el("td", { colspan: columns.length }, "Evaluation " + group + " ",
          info && info.report ? el("a", { href: "evals/" + encodeURIComponent(group) + "/report" }, "(report)") : null,
          el("span", { cls: "muted" }, " — " + inGroup.length + " runs"))));
      }
      for (const r of inGroup) {
        body.push(el("tr", { cls: "clickable", "data-run": r.run_id, onclick: () => { location.hash = "#/run/" + r.run_id; } },
          el("td", { cls: "muted" }, when(r.started)), el("td", {}, r.question), el("td", {}, r.database),
          el("td", { cls: statusClass(r.status) }, r.status + (r.failure ? " (" + r.failure + ")" : "")),
          el("td", { cls: "sql" }, r.sql || ""), el("td", {}, fmt(r.calls)), el("td", {}, fmt(r.tokens)),
          el("td", {}, usd(r.cost_usd)), el("td", {}, fmt(r.seconds, 2))));
      }
    }
    table.replaceChildren(el("thead", {}, head), el("tbody", {}, body.length ? body : el("tr", {}, el("td", { colspan: columns.length, cls: "muted" }, "No runs yet."))));
  };
  search.addEventListener("input", () => { listState.q = search.value; draw(); });
  draw();
  show(el("h1", {}, "Runs"),
    section("Ask", el("div", { cls: "toolbar" }, question, database,
      el("button", { onclick: () => ask(false) }, "Run"), el("button", { cls: "secondary", onclick: () => ask(true) }, "Step through"))),
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

const FIRST_ROWS = 300; // rows drawn at once; the rest follow in the next frames

function waterfallView(spans) {
  const total = Math.max(1, ...spans.map(s => s.start_ms + s.ms));
  const row = (s) => {
    const bar = el("div", { cls: "bar " + s.kind + (s.status === "ERROR" ? " ERROR" : "") });
    // Positions are set through the CSS object model: the page allows no inline styles.
    bar.style.left = (100 * s.start_ms / total).toFixed(3) + "%";
    bar.style.width = Math.max(0.2, 100 * s.ms / total).toFixed(3) + "%";
    return el("tr", { "data-span": s.span_id },
      el("td", { cls: "name", title: s.name }, "\u00a0".repeat(s.depth * 2) + s.name),
      el("td", { cls: "muted" }, s.kind), el("td", {}, fmt(s.ms, 1) + " ms"),
      el("td", { cls: "track" }, el("div", { cls: "lane" }, bar)),
      el("td", { cls: "muted", title: s.detail }, s.detail), el("td", { cls: "muted", title: "trace id " + s.trace_id }, s.trace_id.slice(2, 10) + "…"));
  };
  const body = el("tbody", {}, spans.slice(0, FIRST_ROWS).map(row));
  const more = (from) => {
    if (from >= spans.length || !body.isConnected && from > FIRST_ROWS * 8) return;
    requestAnimationFrame(() => {
      const chunk = document.createDocumentFragment();
      for (const s of spans.slice(from, from + FIRST_ROWS)) chunk.append(row(s));
      body.append(chunk);
      more(from + FIRST_ROWS);
    });
  };
  more(FIRST_ROWS);
  return el("table", { cls: "waterfall" }, el("thead", {}, el("tr", {}, ["Span", "Kind", "Duration", "Timeline", "What", "Trace"].map(h => el("th", {}, h)))), body);
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

async function runPage(runId) {
  const d = await api("api/runs/" + encodeURIComponent(runId));
  const s = d.summary;
  const facts = el("div", { cls: "facts" }, [["Database", s.database], ["Status", s.status + (s.failure ? " (" + s.failure + ")" : "")],
    ["Model calls", fmt(s.calls)], ["Tokens", fmt(s.tokens)], ["Cost", usd(s.cost_usd)], ["Seconds", fmt(s.seconds, 3)],
    ["When", when(s.started)], ["Run id", s.run_id]].map(([k, v]) => el("div", {}, el("span", {}, k), v)));
  const answer = d.answer || {};
  const selection = d.selection || {};
  const clusterOf = {}, votes = {};
  (selection.clusters || []).forEach((c, i) => { for (const m of c.members || []) { clusterOf[m] = i + 1; votes[m] = c.size; } });
  const outcomes = {};
  for (const p of selection.pairwise || []) {
    for (const [me, other] of [[p.a, p.b], [p.b, p.a]]) {
      if (!me) continue;
      const said = p.winner === me ? "beat " + other : p.winner ? "lost to " + other : "no verdict with " + other;
      (outcomes[me] = outcomes[me] || []).push(said + (p.stage ? " (" + p.stage + ")" : ""));
    }
  }
  const candidates = el("table", { id: "candidates" }, el("thead", {}, el("tr", {},
    ["Candidate", "Generator", "SQL", "Status", "Rows", "Error", "Fixes", "Cluster", "Votes", "Pairwise"].map(h => el("th", {}, h)))),
  el("tbody", {}, (d.candidates || []).map(c => el("tr", { cls: c.id === selection.chosen ? "chosen" : null },
    el("td", {}, c.id + (c.id === selection.chosen ? " ★" : "")), el("td", {}, c.generator), el("td", { cls: "sql" }, c.sql),
    el("td", { cls: statusClass(c.status) }, c.status), el("td", {}, fmt(c.row_count)), el("td", { cls: "error" }, c.error || ""),
    el("td", {}, fmt(c.fix_attempts)), el("td", {}, clusterOf[c.id] || ""), el("td", {}, votes[c.id] || ""),
    el("td", {}, (outcomes[c.id] || []).join("; "))))));
  const calls = {};
  for (const c of d.calls || []) (calls[c.node] = calls[c.node] || []).push(c);
  const callSections = Object.entries(calls).map(([node, list]) => el("details", {}, el("summary", {}, `${node} — ${list.length} call(s)`),
    list.map(c => el("div", {}, el("p", { cls: "muted" }, `${c.role} · ${fmt((c.usage || {}).input_tokens)} in / ${fmt((c.usage || {}).output_tokens)} out`),
      el("details", {}, el("summary", {}, "Prompt"), (c.messages || []).map(m => el("pre", {}, `[${m[0]}]\n${m[1]}`))),
      el("p", {}, "Answer:"), el("pre", {}, c.answer)))));
  const costs = Object.entries(d.cost_by_node || {});
  show(
    el("h1", {}, s.question || s.run_id),
    el("div", { cls: "toolbar" }, d.checkpoints ? el("button", { onclick: () => { location.hash = "#/debug/" + s.run_id; } }, "Step through") : null,
      s.replay_of ? el("a", { href: "#/run/" + s.replay_of }, "replay of " + s.replay_of) : null),
    section(null, facts),
    el("div", { cls: "row" },
      section("Path through the graph", graphView(d.graph, d.path)),
      section("Answer", answer.sql ? el("pre", { cls: "sql", id: "answer-sql" }, answer.sql) : el("p", { cls: "error" }, answer.error || s.error || "No answer."),
        resultTable(answer.columns, answer.rows), selection.reason ? el("p", { id: "why" }, "Why this one: " + selection.reason) : null)),
    section("Candidates", candidates),
    section("Cost per node", costs.length ? barChart(costs, v => v.tokens, v => `${fmt(v.tokens)} tokens · ${usd(v.cost_usd)} · ${v.calls} calls`) : el("p", { cls: "muted" }, "No model calls.")),
    section("Spans", waterfallView(d.spans)),
    section("Model calls", callSections.length ? callSections : el("p", { cls: "muted" }, "The call log is kept with checkpoints; none for this run.")),
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

// -- across runs ----------------------------------------------------------------------------------

function plot(values, label) {
  const W = 260, H = 60;
  const max = Math.max(1e-12, ...values);
  const step = values.length > 1 ? W / (values.length - 1) : W;
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(H - 4 - (H - 8) * v / max).toFixed(1)}`).join(" ");
  return el("div", { cls: "plot" }, svg("svg", { width: W, height: H, role: "img", "aria-label": label },
    svg("polyline", { points, fill: "none", stroke: "#2456c9", "stroke-width": 1.6 }), svg("title", {}, label)));
}

async function statsPage() {
  const last = Number(new URLSearchParams(location.hash.split("?")[1] || "").get("last")) || 50;
  const s = await api("api/stats?last=" + last);
  const rows = Object.entries(s.nodes).map(([node, v]) => {
    const sorted = [...v.seconds].sort((a, b) => a - b);
    const p50 = sorted[Math.floor((sorted.length - 1) / 2)] || 0;
    return el("tr", {}, el("td", {}, node), el("td", {}, fmt(v.seconds.length)), el("td", {}, fmt(p50 * 1000, 1) + " ms"),
      el("td", {}, plot(v.seconds, node + " seconds per run")), el("td", {}, usd(v.cost_usd.reduce((a, b) => a + b, 0))),
      el("td", {}, plot(v.cost_usd, node + " cost per run")));
  });
  show(el("h1", {}, `Across the last ${s.runs} runs (${s.ok} answered)`),
    section("Latency and cost per node", el("table", { id: "nodes" }, el("thead", {}, el("tr", {}, ["Node", "Runs", "Median", "Seconds per run", "Cost", "Cost per run"].map(h => el("th", {}, h)))),
      el("tbody", {}, rows))),
    section("Why runs had no answer", Object.keys(s.failures).length
      ? barChart(Object.entries(s.failures), v => v, v => String(v)) : el("p", { cls: "muted" }, "Every run answered.")));
}

route();
