// gantry web view. Everything that comes from the server is set as text
// (textContent, setAttribute), never parsed as HTML.
"use strict";

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = String(v);
    else if (k === "on") for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    else e.setAttribute(k, String(v));
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function clock(t) {
  if (!t) return "–";
  const d = new Date(t);
  if (isNaN(d)) return "–";
  const today = new Date();
  const time = d.toLocaleTimeString([], { hour12: false });
  if (d.toDateString() === today.toDateString()) return time;
  return d.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + time;
}

function duration(a, b) {
  if (!a) return "";
  const ms = (b ? new Date(b) : new Date()) - new Date(a);
  if (!(ms >= 0)) return "";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  const m = Math.floor(ms / 60000), s = Math.round((ms % 60000) / 1000);
  if (m < 60) return m + " m " + s + " s";
  return Math.floor(m / 60) + " h " + (m % 60) + " m";
}

function setConn(state, text) {
  const c = $("conn");
  c.dataset.conn = state;
  c.textContent = text;
}

// ---------- the list of workflows ----------

// The list is live: a snapshot of state.list, then a row per workflow
// that appears or changes, over server-sent events. EventSource
// reconnects by itself when the stream drops (the server gets a new
// snapshot); when the server refused it (503, 502), openList tries again.
// The page keeps the newest LIST_READ rows and shows the newest LIST_SHOWN
// of those that match the filter.
const LIST_READ = 500, LIST_SHOWN = 100;
const L = { rows: new Map(), es: null, timer: null, filter: { q: "", state: "", composition: "", submitter: "" } };

function openList() {
  setConn("connecting", "connecting…");
  const es = new EventSource("/api/workflows/events?limit=" + LIST_READ);
  L.es = es;
  const on = (name, fn) => es.addEventListener(name, (ev) => {
    let d;
    try { d = JSON.parse(ev.data); } catch (_) { return; }
    fn(d);
  });
  on("snapshot", (rows) => {
    L.rows = new Map(rows.map((r) => [r.workflow_id, r]));
    renderList();
    setConn("live", "live");
  });
  on("row", (r) => {
    L.rows.set(r.workflow_id, r);
    renderList();
  });
  on("problem", (d) => setConn("down", d.message));
  es.onerror = () => {
    if (es.readyState !== EventSource.CLOSED) {
      setConn("connecting", "reconnecting…");
      return;
    }
    setConn("down", "cannot read workflows; trying again…");
    clearTimeout(L.timer);
    L.timer = setTimeout(openList, 5000);
  };
}

// The filter lives in the address (?state=&composition=&submitter=&q=),
// so a filtered list can be shared as a link.
const FILTER_KEYS = [["q", "q", "f-q"], ["state", "state", "f-state"], ["composition", "composition", "f-comp"], ["submitter", "submitter", "f-by"]];

function initFilters() {
  const qs = new URLSearchParams(location.search);
  for (const [k, param, id] of FILTER_KEYS) {
    L.filter[k] = qs.get(param) || "";
    const input = $(id);
    if (id === "f-comp" && L.filter[k]) input.append(el("option", { value: L.filter[k], text: L.filter[k] }));
    input.value = L.filter[k];
    input.addEventListener("input", () => setFilter(k, input.value));
  }
  $("f-clear").addEventListener("click", () => {
    for (const [k, , id] of FILTER_KEYS) { L.filter[k] = ""; $(id).value = ""; }
    setFilter("q", "");
  });
}

function setFilter(k, v) {
  L.filter[k] = v;
  const qs = new URLSearchParams();
  for (const [key, param] of FILTER_KEYS) if (L.filter[key]) qs.set(param, L.filter[key]);
  const q = qs.toString();
  history.replaceState(null, "", location.pathname + (q ? "?" + q : ""));
  renderList();
}

// hasChanges: a check run that found something that would change.
function hasChanges(r) { return r.operation === "check" && r.status === "succeeded" && r.changes > 0; }

function submitterText(p) {
  if (!p) return "";
  return [who(p), p.name, p.user, p.account].filter(Boolean).join(" ").toLowerCase();
}

function matches(r, f) {
  if (f.state === "changes" && !hasChanges(r)) return false;
  if (f.state && f.state !== "changes" && (r.status !== f.state || (f.state === "succeeded" && hasChanges(r)))) return false;
  if (f.composition && r.workflow !== f.composition) return false;
  const by = submitterText(r.submitted_by);
  if (f.submitter && !by.includes(f.submitter.trim().toLowerCase())) return false;
  if (f.q) {
    const hay = [r.workflow, r.workflow_id, r.operation, r.status, hasChanges(r) ? "changes found" : "", by].join(" ").toLowerCase();
    for (const w of f.q.toLowerCase().split(/\s+/)) if (w && !hay.includes(w)) return false;
  }
  return true;
}

// fillChoices offers the compositions and submitters the list has.
function fillChoices(rows) {
  const comp = $("f-comp");
  const names = [...new Set(rows.map((r) => r.workflow).filter(Boolean))].sort();
  if (L.filter.composition && !names.includes(L.filter.composition)) names.unshift(L.filter.composition);
  const want = ["", ...names].join("\n");
  if (comp.dataset.choices !== want) {
    comp.dataset.choices = want;
    comp.replaceChildren(el("option", { value: "", text: "any" }), ...names.map((n) => el("option", { value: n, text: n })));
    comp.value = L.filter.composition;
  }
  const by = [...new Set(rows.map((r) => (r.submitted_by && r.submitted_by.name) || "").filter(Boolean))].sort();
  const list = $("f-by-list");
  if (list.dataset.choices !== by.join("\n")) {
    list.dataset.choices = by.join("\n");
    list.replaceChildren(...by.map((n) => el("option", { value: n })));
  }
}

function stateBadge(r) {
  if (hasChanges(r)) {
    return el("span", { class: "badge", "data-state": r.status, "data-verdict": "changes", title: "check: " + r.changes + " node" + (r.changes === 1 ? "" : "s") + " would change", text: "changes found" });
  }
  const text = r.operation === "check" && r.status === "succeeded" && r.changes === 0 ? "no changes" : r.status;
  return el("span", { class: "badge", "data-state": r.status, text });
}

function renderList() {
  const all = [...L.rows.values()].sort((a, b) =>
    (Date.parse(b.created_at) || 0) - (Date.parse(a.created_at) || 0) || (b.workflow_id < a.workflow_id ? -1 : 1));
  for (const r of all.splice(LIST_READ)) L.rows.delete(r.workflow_id); // the newest, as the server keeps
  fillChoices(all);
  const hits = all.filter((r) => matches(r, L.filter));
  const rows = hits.slice(0, LIST_SHOWN);
  const filtered = FILTER_KEYS.some(([k]) => L.filter[k]);
  $("f-count").textContent = filtered ? hits.length + " of " + all.length + " workflows match" + (hits.length > rows.length ? " (the newest " + rows.length + " shown)" : "")
    : all.length > rows.length ? "the newest " + rows.length + " of " + all.length + " shown" : "";
  const body = $("runs");
  body.replaceChildren();
  $("list-empty").hidden = all.length > 0;
  if (all.length > 0 && rows.length === 0) body.append(el("tr", { class: "none" }, el("td", { colspan: 9, class: "hint", text: "No workflow matches the filter." })));
  for (const r of rows) {
    const link = el("a", { href: "/w/" + encodeURIComponent(r.workflow_id), text: r.workflow });
    const ended = r.ended_at ? clock(r.ended_at) + " (" + duration(r.created_at, r.ended_at) + ")" : "–";
    body.append(el("tr", { "data-workflow": r.workflow_id, "data-state": r.status, "data-verdict": hasChanges(r) ? "changes" : null },
      el("td", {}, link),
      el("td", { class: "mono", text: r.workflow_id }),
      el("td", { text: r.operation }),
      el("td", {}, stateBadge(r)),
      el("td", { text: who(r.submitted_by) }),
      el("td", { text: clock(r.created_at) }),
      el("td", { text: ended }),
      el("td", { class: "num", text: r.formulas }),
      el("td", { class: "num", text: r.nodes })));
  }
}

// shortKeys shortens the public nkeys (U + 55 characters) in s.
function shortKeys(s) {
  return s.replace(/\b([UA][A-Z2-7]{55})\b/g, (k) => k.slice(0, 8) + "…");
}

// who is a requester by name (operator, a creds file's user); only one
// without a name shows by its key, shortened.
function who(p) {
  if (!p) return "–";
  if (!p.attested) return "unattested";
  if (p.name) return p.name;
  return (p.user ? p.user.slice(0, 8) + "…" : "?") + " · " + p.account;
}

// ---------- one workflow ----------

const S = {
  id: "",
  header: null,
  formulas: new Map(), // id -> formula
  nodes: new Map(),    // "formula/node" -> node
  rollouts: new Map(), // group formula -> rollout
  sel: null,           // {kind: "node"|"formula", key}
  shape: "",           // what the DAG was drawn from
  formulaEls: new Map(),
  nodeEls: new Map(),
  unitEls: new Map(),
};

const NODE_STATES = ["running", "succeeded", "skipped", "failed", "blocked", "cancelled", "pending"];

function openWorkflow(id) {
  S.id = id;
  $("wf-view").hidden = false;
  $("wf-id").textContent = id;
  $("crumbs").replaceChildren(el("a", { href: "/", text: "workflows" }), el("span", { text: " / " }), el("span", { class: "mono", text: id.slice(0, 8) }));
  const m = /^#(node|formula)=(.+)$/.exec(location.hash);
  if (m) S.sel = { kind: m[1], key: decodeURIComponent(m[2]) };
  renderLegend();
  $("wf-state").hidden = true;
  $("dag").replaceChildren(el("p", { class: "hint", text: "Reading the run's history…" }));
  initTabs();
  initZoom();
  connect();
  window.addEventListener("resize", () => { scheduleEdges(); if (!Z.user) Z.fitted = false; });
  window.addEventListener("hashchange", () => {
    const h = /^#(node|formula)=(.+)$/.exec(location.hash);
    if (h) select(h[1], decodeURIComponent(h[2]));
  });
  // Running clocks tick, and running bars of the timeline grow.
  setInterval(() => {
    if (!S.header || S.header.ended_at) return;
    renderHeader();
    paintDag();
    renderPanel();
    if (S.view === "timeline") renderTimeline();
  }, 1000);
}

function connect() {
  setConn("connecting", "connecting…");
  const es = new EventSource("/api/workflows/" + encodeURIComponent(S.id) + "/events");
  const on = (name, fn) => es.addEventListener(name, (ev) => {
    let d;
    try { d = JSON.parse(ev.data); } catch (_) { return; }
    fn(d);
  });
  on("snapshot", (d) => {
    S.header = d.workflow;
    S.formulas = new Map(d.formulas.map((f) => [f.id, f]));
    S.nodes = new Map(d.nodes.map((n) => [n.formula + "/" + n.name, n]));
    S.rollouts = new Map(d.rollouts.map((r) => [r.formula, r]));
    S.shape = "";
    renderAll();
    setConn("live", "live");
  });
  on("workflow", (h) => { S.header = h; renderHeader(); });
  // A patch is the whole formula or node as it is now: a field it leaves
  // out is gone (an error cleared by a retry), so it replaces what was
  // there, but for the node's output lines, which come on their own.
  on("formula", (f) => {
    S.formulas.set(f.id, f);
    update();
  });
  on("node", (n) => {
    const key = n.formula + "/" + n.name;
    const old = S.nodes.get(key);
    if (old && !n.output) n.output = old.output;
    S.nodes.set(key, n);
    const f = S.formulas.get(n.formula);
    if (f && !f.nodes.includes(n.name)) f.nodes.push(n.name);
    update();
  });
  on("rollout", (r) => { S.rollouts.set(r.formula, r); update(); });
  on("line", (l) => {
    const n = S.nodes.get(l.formula + "/" + l.node);
    if (!n) return;
    n.output = n.output || [];
    n.output.push({ attempt: l.attempt, stream: l.stream, text: l.text });
    if (n.output.length > 200) n.output.splice(0, n.output.length - 200);
    if (S.sel && S.sel.kind === "node" && S.sel.key === l.formula + "/" + l.node) appendLine(l);
  });
  on("missing", (d) => {
    es.close();
    $("wf-view").hidden = true;
    $("missing-view").hidden = false;
    $("missing-msg").textContent = d.message;
    setConn("down", "not found");
  });
  on("problem", (d) => setConn("down", d.message));
  es.onerror = () => { if (es.readyState !== EventSource.CLOSED) setConn("connecting", "reconnecting…"); };
}

let pending = false;
function update() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => { pending = false; renderAll(); });
}

function renderAll() {
  if (!S.header) return;
  renderHeader();
  const shape = shapeOf();
  if (shape !== S.shape) {
    S.shape = shape;
    buildDag();
    if (!Z.user) Z.fitted = false;
  }
  paintDag();
  renderPanel();
  scheduleEdges();
  if (S.view === "timeline") renderTimeline();
}

// ---------- header ----------

function renderHeader() {
  const h = S.header;
  if (!h) return;
  document.title = (h.workflow || h.workflow_id) + " · " + h.status + " · gantry";
  $("wf-name").textContent = h.workflow || h.workflow_id;
  const st = $("wf-state");
  st.hidden = false;
  const changes = countChanges();
  const verdict = h.operation === "check" && h.status === "succeeded" && changes > 0;
  st.textContent = h.cancelling ? "cancelling" : verdict ? "changes found" : h.status;
  st.dataset.state = h.status;
  if (verdict) st.dataset.verdict = "changes";
  else delete st.dataset.verdict;
  st.title = verdict ? "check: " + changes + " node" + (changes === 1 ? "" : "s") + " would change" : "";
  renderTrace(h);
  $("wf-op").textContent = h.operation;
  $("wf-by").textContent = shortKeys(h.submitted_by || "–");
  $("wf-by").title = h.submitted_by || "";
  $("wf-start").textContent = clock(h.created_at);
  $("wf-end").textContent = h.ended_at ? clock(h.ended_at) + " (" + duration(h.created_at, h.ended_at) + ")" : (h.created_at ? "running for " + duration(h.created_at) : "–");
  $("wf-gen").textContent = h.generation > 1 ? "retry " + (h.generation - 1) + " (run " + h.generation + ")" : "first run";
  const reason = $("wf-reason");
  reason.hidden = !h.reason;
  reason.textContent = h.reason || "";
  // The server's summary, as gantry watch and gantry status count: every
  // node by its last transition across runs, and a failed health gate as
  // a failure.
  const sum = h.summary;
  let counts = {}, total = S.nodes.size;
  if (sum) {
    total = sum.total || S.nodes.size;
    counts = { running: sum.running, succeeded: sum.succeeded, skipped: sum.skipped, failed: sum.failed, blocked: sum.blocked,
      cancelled: sum.cancelled, pending: Math.max(0, total - sum.done - sum.running) };
  } else {
    for (const n of S.nodes.values()) counts[n.status] = (counts[n.status] || 0) + 1;
  }
  const failed = $("wf-failed");
  const fails = (sum && sum.failures) || [];
  failed.hidden = fails.length === 0;
  failed.textContent = fails.length ? "failed: " + fails.map((f) => (f.node ? f.formula + "/" + f.node : f.formula) + (f.why ? " (" + f.why + ")" : "")).join(", ") : "";
  const bar = $("wf-bar");
  bar.replaceChildren();
  const chips = $("wf-chips");
  chips.replaceChildren(el("span", { class: "chip total", text: total + " nodes" }));
  for (const s of NODE_STATES) {
    if (!counts[s]) continue;
    bar.append(el("span", { "data-state": s, title: counts[s] + " " + s }));
    bar.lastChild.style.flexGrow = counts[s];
    chips.append(el("span", { class: "chip", "data-state": s, text: counts[s] + " " + s }));
  }
  if (h.operation === "check" && changes > 0) chips.append(el("span", { class: "chip", "data-verdict": "changes", text: changes + " would change" }));
}

// countChanges counts the nodes whose check found they would change.
function countChanges() {
  let n = 0;
  for (const nd of S.nodes.values()) if (nd.check === "would_change") n++;
  return n;
}

// renderTrace shows the run's trace id, as a link when the web view has
// a trace URL (--trace-url), and nothing when the run has no trace.
function renderTrace(h) {
  $("wf-trace-row").hidden = !h.trace_id;
  const dd = $("wf-trace");
  const sig = (h.trace_id || "") + " " + (h.trace_url || "");
  if (!h.trace_id || dd.dataset.sig === sig) return;
  dd.dataset.sig = sig;
  const short = h.trace_id.slice(0, 16) + "…";
  dd.replaceChildren(h.trace_url && /^https?:\/\//.test(h.trace_url)
    ? el("a", { id: "wf-trace-link", href: h.trace_url, target: "_blank", rel: "noopener noreferrer", title: h.trace_id, text: short })
    : el("span", { title: h.trace_id, text: short }));
}

// ---------- the DAG ----------

// A unit is what the layout places: a formula, or a group formula with
// its instances.
function unitOf(f) { return f.of ? "group:" + f.of : "formula:" + f.id; }

function shapeOf() {
  const parts = [];
  for (const f of S.formulas.values()) {
    parts.push(f.id, f.of || "", f.batch || 0, (f.depends_on || []).map((d) => d.formula + ":" + d.condition).join(","), f.nodes.join(","));
    for (const n of f.nodes) {
      const nd = S.nodes.get(f.id + "/" + n);
      parts.push((nd && nd.depends_on || []).join(","));
    }
  }
  return parts.join("|");
}

function layers() {
  const units = new Map(); // key -> {key, group, formulas:[], deps:Set}
  const ordered = [...S.formulas.values()].sort((a, b) => a.order - b.order || (a.id < b.id ? -1 : 1));
  for (const f of ordered) {
    const k = unitOf(f);
    if (!units.has(k)) units.set(k, { key: k, group: f.of || "", formulas: [], deps: new Map(), index: units.size });
    units.get(k).formulas.push(f);
  }
  for (const u of units.values()) {
    for (const f of u.formulas) {
      for (const d of f.depends_on || []) {
        const df = S.formulas.get(d.formula);
        if (!df) continue;
        const dk = unitOf(df);
        if (dk === u.key) continue; // a rollout's batches: shown inside the group
        const cond = d.condition === "healthy" || (u.deps.get(dk) === "healthy") ? "healthy" : d.condition || "completed";
        u.deps.set(dk, cond);
      }
    }
  }
  const layer = new Map();
  const visit = (k, seen) => {
    if (layer.has(k)) return layer.get(k);
    if (seen.has(k)) return 0;
    seen.add(k);
    let l = 0;
    for (const d of units.get(k).deps.keys()) l = Math.max(l, visit(d, seen) + 1);
    layer.set(k, l);
    return l;
  };
  for (const k of units.keys()) visit(k, new Set());
  const cols = [];
  for (const u of units.values()) {
    const l = layer.get(u.key);
    (cols[l] = cols[l] || []).push(u);
  }
  // One pass of barycentres: each unit near the units it waits for.
  const pos = new Map();
  cols.forEach((col, ci) => {
    if (ci > 0) {
      const bc = (u) => {
        const ps = [...u.deps.keys()].map((d) => pos.get(d)).filter((p) => p !== undefined);
        return ps.length ? ps.reduce((a, b) => a + b, 0) / ps.length : u.index;
      };
      col.sort((a, b) => bc(a) - bc(b) || a.index - b.index);
    }
    col.forEach((u, i) => pos.set(u.key, i));
  });
  return { units, cols: cols.filter(Boolean) };
}

function buildDag() {
  const dag = $("dag");
  dag.replaceChildren();
  S.formulaEls.clear();
  S.nodeEls.clear();
  S.unitEls.clear();
  const { units, cols } = layers();
  S.units = units;
  if (S.formulas.size === 0) {
    dag.append(el("p", { class: "hint", text: "No formulas yet: the plan shows once the workflow is accepted." }));
    return;
  }
  for (const col of cols) {
    const c = el("div", { class: "col" });
    for (const u of col) c.append(u.group ? groupBox(u) : formulaBox(u.formulas[0]));
    dag.append(c);
  }
}

function groupBox(u) {
  const box = el("div", { class: "group", "data-unit": u.key, "data-group": u.group });
  const title = el("div", { class: "group-title" },
    el("span", { class: "gname", text: u.group }),
    el("span", { class: "gsub", text: "group · " + u.formulas.length + " instance" + (u.formulas.length === 1 ? "" : "s") }));
  const ro = el("div", { class: "rollout", "data-rollout": u.group });
  box.append(title, ro);
  const batches = new Map();
  for (const f of u.formulas) {
    const b = f.batches ? f.batch : 0;
    if (!batches.has(b)) batches.set(b, []);
    batches.get(b).push(f);
  }
  for (const b of [...batches.keys()].sort((x, y) => x - y)) {
    const fs = batches.get(b);
    const row = el("div", { class: "batch", "data-batch": b });
    if (b) row.append(el("div", { class: "batch-label", text: "batch " + b + " of " + fs[0].batches }));
    const inner = el("div", { class: "batch-items" });
    for (const f of fs) inner.append(formulaBox(f));
    row.append(inner);
    box.append(row);
  }
  S.unitEls.set(u.key, box);
  return box;
}

function formulaBox(f) {
  const box = el("div", { class: "formula", "data-formula": f.id, tabindex: 0 });
  box.addEventListener("click", (ev) => { if (ev.target === box || ev.target.closest(".ftitle")) select("formula", f.id); });
  const title = el("div", { class: "ftitle" },
    el("span", { class: "fname", text: f.id }),
    hostLink(f.host, "fhost", "@" + f.host),
    el("span", { class: "fstate" }));
  box.append(title);
  // Nodes in layers (rows): a node below the nodes it waits for.
  const lvl = new Map();
  const nodeLevel = (name, seen) => {
    if (lvl.has(name)) return lvl.get(name);
    if (seen.has(name)) return 0;
    seen.add(name);
    const n = S.nodes.get(f.id + "/" + name);
    let l = 0;
    for (const d of (n && n.depends_on) || []) if (f.nodes.includes(d)) l = Math.max(l, nodeLevel(d, seen) + 1);
    lvl.set(name, l);
    return l;
  };
  const rows = [];
  for (const name of f.nodes) {
    const l = nodeLevel(name, new Set());
    (rows[l] = rows[l] || []).push(name);
  }
  const body = el("div", { class: "nodes" });
  for (const r of rows.filter(Boolean)) {
    const row = el("div", { class: "nrow" });
    for (const name of r) {
      const key = f.id + "/" + name;
      const pill = el("button", { class: "node", type: "button", "data-node": key, title: key },
        el("span", { class: "dot" }), el("span", { class: "nname", text: name }), el("span", { class: "nmeta" }),
        el("span", { class: "prog" }, el("span", { class: "prog-fill" })));
      pill.addEventListener("click", (ev) => { ev.stopPropagation(); select("node", key); });
      S.nodeEls.set(key, pill);
      row.append(pill);
    }
    body.append(row);
  }
  box.append(body);
  S.formulaEls.set(f.id, box);
  if (!f.of) S.unitEls.set(unitOf(f), box);
  return box;
}

function paintDag() {
  for (const [id, box] of S.formulaEls) {
    const f = S.formulas.get(id);
    if (!f) continue;
    box.dataset.state = f.status;
    let txt = f.status;
    const last = (f.gates || [])[f.gates ? f.gates.length - 1 : 0];
    if (f.status === "gating" && last) txt += " " + last.attempt + "/" + last.retries;
    box.querySelector(".fstate").textContent = txt;
    box.classList.toggle("selected", !!(S.sel && S.sel.kind === "formula" && S.sel.key === id));
  }
  for (const [key, pill] of S.nodeEls) {
    const n = S.nodes.get(key);
    if (!n) continue;
    pill.dataset.state = n.status;
    if (n.check === "would_change") pill.dataset.check = n.check;
    else delete pill.dataset.check;
    const a = (n.attempts || [])[(n.attempts || []).length - 1];
    let meta = n.check === "would_change" ? "would change" : "";
    if (n.status === "running" && typeof n.progress === "number") meta = n.progress + "%";
    else if (n.status === "running" && a) meta = duration(a.started_at);
    else if (!meta && a && a.ended_at && (n.status === "succeeded" || n.status === "failed")) meta = duration(a.started_at, a.ended_at);
    if ((n.attempts || []).length > 1) meta = (meta ? meta + " · " : "") + "×" + n.attempts.length;
    pill.querySelector(".nmeta").textContent = meta;
    const prog = pill.querySelector(".prog");
    prog.hidden = typeof n.progress !== "number" || n.status !== "running";
    pill.querySelector(".prog-fill").style.width = (n.progress || 0) + "%";
    pill.classList.toggle("selected", !!(S.sel && S.sel.kind === "node" && S.sel.key === key));
  }
  for (const ro of document.querySelectorAll("[data-rollout]")) {
    const r = S.rollouts.get(ro.dataset.rollout);
    ro.hidden = !r;
    if (!r) continue;
    let t = "rollout: batch " + r.batch + " of " + r.batches + " " + r.status.replace("batch_", "") + " · " + r.failed + " failed (max " + r.max_failed + ")";
    if (r.status === "stopped") t = "rollout stopped: " + (r.reason || "");
    ro.textContent = t;
    ro.dataset.state = r.status;
  }
}

// ---------- edges ----------

let edgesPending = false;
function scheduleEdges() {
  if (edgesPending) return;
  edgesPending = true;
  requestAnimationFrame(() => {
    edgesPending = false;
    if (S.view !== "dag") return;
    if (!Z.fitted && !Z.user && S.formulas.size) {
      const wrap = $("dag-wrap");
      if ($("dag").offsetWidth > wrap.clientWidth) fit(false, AUTOFIT_MIN);
      else Z.fitted = true;
    }
    applyZoom();
  });
}

function drawEdges() {
  const wrap = $("dag-wrap"), g = $("edges"), ng = $("nedges"), dag = $("dag");
  if (!S.units) return;
  // The edges are drawn in the DAG's own (unzoomed) coordinates; the
  // viewBox scales them with the boxes.
  const W = dag.offsetWidth, H = dag.offsetHeight, z = Z.z;
  for (const e of [g, ng]) {
    e.replaceChildren();
    e.setAttribute("width", W * z);
    e.setAttribute("height", H * z);
    e.setAttribute("viewBox", "0 0 " + W + " " + H);
  }
  const defs = svg("defs");
  for (const k of ["done", "wait", "bad"]) {
    const m = svg("marker", { id: "arrow-" + k, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    m.append(svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow " + k }));
    defs.append(m);
  }
  g.append(defs);
  const base = dag.getBoundingClientRect();
  const box = (e) => {
    const r = e.getBoundingClientRect();
    return { x: (r.left - base.left) / z, y: (r.top - base.top) / z, w: r.width / z, h: r.height / z };
  };
  const kind = (state) => (["succeeded", "healthy", "skipped"].includes(state) ? "done" : ["failed", "unhealthy", "blocked", "cancelled"].includes(state) ? "bad" : "wait");
  for (const u of S.units.values()) {
    const to = S.unitEls.get(u.key);
    if (!to) continue;
    for (const [dk, cond] of u.deps) {
      const from = S.unitEls.get(dk);
      if (!from) continue;
      const a = box(from), b = box(to);
      const x1 = a.x + a.w, y1 = a.y + Math.min(a.h / 2, 40), x2 = b.x - 2, y2 = b.y + Math.min(b.h / 2, 40);
      const dx = Math.max(30, (x2 - x1) / 2);
      const src = S.units.get(dk);
      const states = src.formulas.map((f) => f.status);
      const k = states.every((s) => kind(s) === "done") ? "done" : states.some((s) => kind(s) === "bad") ? "bad" : "wait";
      const p = svg("path", { d: `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`, class: "edge " + k + (cond === "healthy" ? " healthy" : ""), "marker-end": `url(#arrow-${k})` });
      const t = svg("title");
      t.textContent = dk.replace(/^\w+:/, "") + " → " + u.key.replace(/^\w+:/, "") + " (" + cond + ")";
      p.append(t);
      g.append(p);
    }
  }
  // Node edges inside each formula.
  for (const f of S.formulas.values()) {
    for (const name of f.nodes) {
      const n = S.nodes.get(f.id + "/" + name);
      const to = S.nodeEls.get(f.id + "/" + name);
      if (!n || !to) continue;
      for (const d of n.depends_on || []) {
        const from = S.nodeEls.get(f.id + "/" + d);
        if (!from) continue;
        const a = box(from), b = box(to);
        const x1 = a.x + a.w / 2, y1 = a.y + a.h, x2 = b.x + b.w / 2, y2 = b.y;
        if (y2 <= y1) continue;
        const dep = S.nodes.get(f.id + "/" + d);
        const k = dep ? kind(dep.status) : "wait";
        ng.append(svg("path", { d: `M${x1},${y1} C${x1},${(y1 + y2) / 2} ${x2},${(y1 + y2) / 2} ${x2},${y2}`, class: "nedge " + k }));
      }
    }
  }
  wrap.dataset.drawn = "1";
}

// ---------- zoom and fit of the DAG ----------

// Z is the DAG's zoom: the boxes are scaled by a CSS transform, the edges
// by their SVG viewBox, and the stage takes the zoomed size so the view
// scrolls over exactly the DAG. Until the user zooms, a DAG wider than
// the view is fitted to its width when drawn (down to AUTOFIT_MIN).
const Z = { z: 1, user: false, fitted: false };
// A DAG is fitted by itself no smaller than AUTOFIT_MIN, where its text
// is still read easily; Fit goes down to ZOOM_MIN.
const ZOOM_MIN = 0.2, ZOOM_MAX = 2, AUTOFIT_MIN = 0.6;

function initZoom() {
  $("zoom-in").addEventListener("click", () => zoomBy(1.25));
  $("zoom-out").addEventListener("click", () => zoomBy(0.8));
  $("zoom-reset").addEventListener("click", () => { Z.user = true; setZoom(1); });
  $("zoom-fit").addEventListener("click", () => { Z.user = true; fit(true); });
  // Ctrl (or ⌘) + wheel, and a trackpad's pinch, zoom about the pointer;
  // the wheel alone scrolls.
  $("dag-wrap").addEventListener("wheel", (ev) => {
    if (!ev.ctrlKey && !ev.metaKey) return;
    ev.preventDefault();
    Z.user = true;
    zoomBy(Math.exp(-ev.deltaY * 0.002), ev.clientX, ev.clientY);
  }, { passive: false });
}

function zoomBy(f, cx, cy) {
  Z.user = true;
  setZoom(Z.z * f, cx, cy);
}

// setZoom zooms to z, keeping the point at (cx, cy) (the view's centre
// when not given) where it is.
function setZoom(z, cx, cy) {
  const wrap = $("dag-wrap");
  const r = wrap.getBoundingClientRect();
  const px = cx === undefined ? wrap.clientWidth / 2 : cx - r.left;
  const py = cy === undefined ? wrap.clientHeight / 2 : cy - r.top;
  const x = (wrap.scrollLeft + px) / Z.z, y = (wrap.scrollTop + py) / Z.z;
  Z.z = Math.min(ZOOM_MAX, Math.max(ZOOM_MIN, z));
  applyZoom();
  wrap.scrollLeft = x * Z.z - px;
  wrap.scrollTop = y * Z.z - py;
}

function applyZoom() {
  const dag = $("dag"), stage = $("dag-stage");
  dag.style.transform = Z.z === 1 ? "" : "scale(" + Z.z + ")";
  stage.style.width = dag.offsetWidth * Z.z + "px";
  stage.style.height = dag.offsetHeight * Z.z + "px";
  $("zoom-level").textContent = Math.round(Z.z * 100) + "%";
  $("dag-wrap").dataset.zoom = Z.z.toFixed(3);
  drawEdges();
}

// fit zooms the DAG to the view: to its width and height (whole), or to
// its width only; never above 100%, nor below floor.
function fit(whole, floor) {
  const wrap = $("dag-wrap"), dag = $("dag");
  const W = dag.offsetWidth, H = dag.offsetHeight;
  if (!W || !H) return;
  const maxH = parseFloat(getComputedStyle(wrap).maxHeight);
  const availW = wrap.clientWidth - 2;
  const availH = (isNaN(maxH) ? window.innerHeight - 250 : maxH) - 4;
  let z = availW / W;
  if (whole) z = Math.min(z, availH / H);
  Z.z = Math.min(1, Math.max(floor || ZOOM_MIN, z));
  Z.fitted = true;
  applyZoom();
  wrap.scrollLeft = 0;
  wrap.scrollTop = 0;
}

// ---------- the DAG or the timeline ----------

// The run page shows its DAG, or with ?view=timeline its timeline; the
// address keeps which, so a link opens the same view.
function initTabs() {
  const base = "/w/" + encodeURIComponent(S.id);
  $("tab-dag").href = base;
  $("tab-timeline").href = base + "?view=timeline";
  for (const [id, v] of [["tab-dag", "dag"], ["tab-timeline", "timeline"]]) {
    $(id).addEventListener("click", (ev) => {
      ev.preventDefault();
      history.pushState(null, "", (v === "timeline" ? base + "?view=timeline" : base) + location.hash);
      showView(v);
    });
  }
  window.addEventListener("popstate", () => showView(viewOf()));
  showView(viewOf());
}

function viewOf() { return new URLSearchParams(location.search).get("view") === "timeline" ? "timeline" : "dag"; }

function showView(v) {
  S.view = v;
  $("dag-box").hidden = v !== "dag";
  $("zoom").hidden = v !== "dag";
  $("tl-wrap").hidden = v !== "timeline";
  $("legend").hidden = v !== "dag";
  $("tab-dag").classList.toggle("on", v === "dag");
  $("tab-timeline").classList.toggle("on", v === "timeline");
  if (v === "timeline") renderTimeline();
  else scheduleEdges();
}

// ---------- the timeline ----------

// The timeline: a row per formula and per node, grouped by host, each a
// bar from its start to its end (now, for what still runs) on one time
// scale, so a bar's width is its duration. A node has a bar per attempt.
const ms = (t) => (t ? Date.parse(t) : NaN);

function timelineSpan() {
  const h = S.header, now = Date.now();
  let first = Infinity, last = -Infinity;
  const see = (t) => { if (!isNaN(t)) { first = Math.min(first, t); last = Math.max(last, t); } };
  see(ms(h.created_at));
  see(ms(h.ended_at));
  for (const f of S.formulas.values()) { see(ms(f.started_at)); see(ms(f.ended_at)); }
  for (const n of S.nodes.values()) for (const a of n.attempts || []) { see(ms(a.started_at)); see(ms(a.ended_at)); }
  const t1 = h.ended_at ? last : Math.max(now, last);
  if (first === Infinity) first = t1 - 1000;
  return { t0: first, t1: Math.max(t1, first + 1000) };
}

// tickStep is a round step for about 8 ticks over span ms.
function tickStep(span) {
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400].map((x) => x * 1000);
  return steps.find((st) => span / st <= 8) || steps[steps.length - 1];
}

function tickLabel(ms) {
  const s = Math.round(ms / 1000);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60 ? " " + (s % 60) + "s" : "");
  return Math.floor(s / 3600) + "h" + (Math.floor(s / 60) % 60 ? " " + (Math.floor(s / 60) % 60) + "m" : "");
}

function bar(cls, key, state, start, end, running, span, title) {
  const b = el("div", { class: "tl-bar " + cls, "data-state": state, "data-start": start, "data-end": end, "data-running": running ? "1" : null, title });
  if (key) b.dataset.node = key;
  const w = span.t1 - span.t0;
  b.style.left = ((start - span.t0) / w) * 100 + "%";
  b.style.width = ((end - start) / w) * 100 + "%";
  return b;
}

function tlRow(cls, label, attrs, ...bars) {
  return el("div", Object.assign({ class: "tl-row " + cls }, attrs), label, el("div", { class: "tl-track" }, ...bars));
}

function renderTimeline() {
  const box = $("timeline");
  if (!S.header) return;
  if (!S.formulas.size) {
    box.replaceChildren(el("p", { class: "hint", text: "No formulas yet: the plan shows once the workflow is accepted." }));
    return;
  }
  const span = timelineSpan(), now = Date.now();
  const step = tickStep(span.t1 - span.t0);
  const ticks = [];
  for (let t = 0; t <= span.t1 - span.t0; t += step) {
    const tick = el("span", { class: "tl-tick", text: tickLabel(t) });
    tick.style.left = (t / (span.t1 - span.t0)) * 100 + "%";
    ticks.push(tick);
  }
  const axis = tlRow("tl-axis", el("div", { class: "tl-label hint", text: "from " + clock(new Date(span.t0).toISOString()) }), {}, ...ticks);
  axis.lastChild.classList.add("tl-ticks");
  const rows = [axis];
  // Hosts in the order their first formula started; formulas likewise.
  const byHost = new Map();
  const started = (f) => { const t = ms(f.started_at); return isNaN(t) ? Infinity : t; };
  const formulas = [...S.formulas.values()].sort((a, b) => started(a) - started(b) || a.order - b.order);
  for (const f of formulas) {
    if (!byHost.has(f.host)) byHost.set(f.host, []);
    byHost.get(f.host).push(f);
  }
  for (const [host, fs] of byHost) {
    rows.push(el("div", { class: "tl-host", "data-host": host }, hostLink(host, "tl-hostname"), el("span", { class: "hint", text: " · " + fs.length + " formula" + (fs.length === 1 ? "" : "s") })));
    for (const f of fs) {
      const fbars = [];
      const fs0 = ms(f.started_at);
      const frunning = ["running", "gating"].includes(f.status);
      const fend = !isNaN(ms(f.ended_at)) ? ms(f.ended_at) : frunning ? now : NaN;
      if (!isNaN(fs0) && !isNaN(fend)) fbars.push(bar("tl-f", "", f.status, fs0, Math.max(fend, fs0), frunning && isNaN(ms(f.ended_at)), span, f.id + " · " + f.status + " · " + duration(f.started_at, isNaN(ms(f.ended_at)) ? null : f.ended_at)));
      const title = el("div", { class: "tl-label" }, el("a", { href: "#formula=" + encodeURIComponent(f.id), class: "tl-fname", text: f.id, on: { click: (e) => { e.preventDefault(); select("formula", f.id); } } }),
        el("span", { class: "tl-st", "data-state": f.status, text: f.status }));
      rows.push(tlRow("tl-formula", title, { "data-formula": f.id, "data-state": f.status }, ...fbars));
      for (const name of f.nodes) {
        const key = f.id + "/" + name;
        const n = S.nodes.get(key);
        if (!n) continue;
        const nbars = [];
        for (const a of n.attempts || []) {
          const s0 = ms(a.started_at);
          if (isNaN(s0)) continue;
          const running = isNaN(ms(a.ended_at)) && a.status === "running";
          const end = !isNaN(ms(a.ended_at)) ? ms(a.ended_at) : running ? now : NaN;
          if (isNaN(end)) continue;
          const b = bar("tl-n", key, a.status, s0, Math.max(end, s0), running, span, key + " · attempt " + a.n + " · " + a.status + " · " + duration(a.started_at, a.ended_at || null));
          b.dataset.attempt = a.n;
          b.addEventListener("click", () => select("node", key));
          nbars.push(b);
        }
        const label = el("div", { class: "tl-label tl-node" }, el("a", { href: "#node=" + encodeURIComponent(key), text: name, on: { click: (e) => { e.preventDefault(); select("node", key); } } }),
          nbars.length ? null : el("span", { class: "hint", text: " " + n.status }));
        const row = tlRow("tl-noderow", label, { "data-node": key, "data-state": n.status }, ...nbars);
        if (n.check === "would_change") row.dataset.check = n.check;
        if (S.sel && S.sel.kind === "node" && S.sel.key === key) row.classList.add("selected");
        rows.push(row);
      }
    }
  }
  const keep = $("tl-wrap").scrollTop;
  box.replaceChildren(...rows);
  box.dataset.t0 = span.t0;
  box.dataset.t1 = span.t1;
  $("tl-wrap").scrollTop = keep;
}

// ---------- the detail panel ----------

function select(kind, key) {
  S.sel = { kind, key };
  history.replaceState(null, "", location.pathname + location.search + "#" + kind + "=" + encodeURIComponent(key));
  paintDag();
  renderPanel(true);
  if (S.view === "timeline") renderTimeline();
}

function renderPanel(force) {
  const p = $("panel");
  const sel = S.sel;
  const item = sel && (sel.kind === "node" ? S.nodes.get(sel.key) : S.formulas.get(sel.key));
  const ticking = item && (item.status === "running" || item.status === "gating") ? Math.floor(Date.now() / 1000) : 0;
  const sig = sel ? sel.kind + ":" + sel.key + ":" + ticking + ":" + JSON.stringify(sel.kind === "node" ? stripOutput(item) : item) : "none:" + S.nodes.size;
  if (!force && p.dataset.sig === sig) return;
  p.dataset.sig = sig;
  const out = p.querySelector("pre.output");
  const stick = !out || out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
  const keep = out && out.dataset.node === (sel && sel.key) ? out.scrollTop : 0;
  p.replaceChildren();
  if (!sel) {
    p.append(el("h2", { text: "Details" }), el("p", { class: "hint", text: "Select a node or a formula to see its attempts, output and health gate." }));
    return;
  }
  if (sel.kind === "node") nodePanel(p, S.nodes.get(sel.key), sel.key);
  else formulaPanel(p, S.formulas.get(sel.key), sel.key);
  const o = p.querySelector("pre.output");
  if (o) o.scrollTop = stick ? o.scrollHeight : keep;
}

function stripOutput(n) {
  if (!n) return n;
  const { output, ...rest } = n;
  return rest;
}

function kv(rows) {
  const dl = el("dl", { class: "kv" });
  for (const [k, v] of rows) {
    if (v === undefined || v === null || v === "") continue;
    dl.append(el("dt", { text: k }), v instanceof Node ? el("dd", {}, v) : el("dd", { text: v }));
  }
  return dl;
}

// hostLink links a host's name to its page.
function hostLink(host, cls, text) {
  if (!host) return el("span", { class: cls, text: text || "?" });
  const a = el("a", { class: cls, href: "/h/" + encodeURIComponent(host), "data-host": host, text: text || host, title: "what is on " + host });
  a.addEventListener("click", (ev) => ev.stopPropagation());
  return a;
}

// outputURL is the address of a node's whole output (text/plain), the
// page that shows it, or its download.
function outputURL(id, formula, node, what) {
  const path = encodeURIComponent(id) + "/output/" + encodeURIComponent(formula) + "/" + encodeURIComponent(node);
  if (what === "page") return "/w/" + path;
  return "/api/workflows/" + path + (what === "download" ? "?download=1" : "");
}

function nodePanel(p, n, key) {
  if (!n) {
    p.append(el("h2", { text: key }), el("p", { class: "hint", text: "No such node in this workflow." }));
    return;
  }
  const f = S.formulas.get(n.formula) || {};
  p.append(el("div", { class: "ptitle" }, el("h2", { text: n.name }), el("span", { class: "badge", "data-state": n.status, text: n.status })));
  p.append(el("p", { class: "psub" }, el("span", { text: "node of " }), el("a", { href: "#formula=" + encodeURIComponent(n.formula), text: n.formula, on: { click: (e) => { e.preventDefault(); select("formula", n.formula); } } }), el("span", { text: " on " }), hostLink(f.host)));
  if (typeof n.progress === "number") {
    p.append(el("div", { class: "pbar" }, el("span", { class: "pbar-fill" })), el("div", { class: "hint", text: n.progress + "% done" }));
    p.querySelector(".pbar-fill").style.width = n.progress + "%";
  }
  p.append(kv([["waits for", (n.depends_on || []).join(", ")], ["blocked by", n.blocker], ["reason", n.reason], ["check", n.check], ["error", n.error]]));
  if ((n.files || []).length) {
    p.append(el("h3", { text: "Files" }));
    const ft = el("table", { class: "files" }, el("thead", {}, el("tr", {}, ...["path", "result", "what differs", "sha256"].map((h) => el("th", { text: h })))));
    const fb = el("tbody");
    for (const f of n.files) {
      fb.append(el("tr", { "data-file": f.status },
        el("td", { text: f.path }),
        el("td", { text: f.status }),
        el("td", { class: f.error ? "err" : "", text: [(f.differs || []).join(", "), f.error].filter(Boolean).join(" · ") }),
        el("td", { class: "num", text: (f.sha256 || "").slice(0, 12) })));
      if (f.diff) fb.append(el("tr", {}, el("td", { colspan: 4 }, el("pre", { class: "diff", text: f.diff }))));
    }
    ft.append(fb);
    p.append(ft);
  }
  p.append(el("h3", { text: "Attempts" }));
  if (!(n.attempts || []).length) p.append(el("p", { class: "hint", text: "Not started." }));
  else {
    const t = el("table", { class: "attempts" }, el("thead", {}, el("tr", {}, ...["#", "state", "started", "took", "exit", "error"].map((h) => el("th", { text: h })))));
    const tb = el("tbody");
    for (const a of n.attempts) {
      tb.append(el("tr", { "data-state": a.status },
        el("td", { text: a.n }),
        el("td", {}, el("span", { class: "badge small", "data-state": a.status, text: a.status }), a.will_retry ? el("span", { class: "hint", text: " retried" }) : null),
        el("td", { text: clock(a.started_at) }),
        el("td", { text: a.started_at ? duration(a.started_at, a.ended_at) : "" }),
        el("td", { class: "num", text: a.exit_code === undefined || a.exit_code === null ? "" : a.exit_code }),
        el("td", { class: "err", text: a.error || "" })));
    }
    t.append(tb);
    p.append(t);
  }
  p.append(el("div", { class: "out-title" }, el("h3", { text: "Output" }),
    el("a", { class: "out-link", id: "node-output-page", href: outputURL(S.id, n.formula, n.name, "page"), text: "full output" }),
    el("a", { class: "out-link", id: "node-output-download", href: outputURL(S.id, n.formula, n.name, "download"), download: "", text: "download" })));
  const pre = el("pre", { class: "output", "data-node": key });
  let prev = 0;
  for (const l of n.output || []) {
    if (prev && l.attempt !== prev) pre.append(sepEl(l.attempt));
    prev = l.attempt;
    pre.append(lineEl(l));
  }
  if (!(n.output || []).length) pre.append(el("span", { class: "hint", text: "(no output yet)" }));
  p.append(pre);
}

function sepEl(attempt) {
  return el("span", { class: "sep", text: "── attempt " + attempt + " ──\n" });
}

function lineEl(l) {
  return el("span", { class: "line " + l.stream, "data-attempt": l.attempt, text: l.text + "\n" });
}

function appendLine(l) {
  const pre = document.querySelector("#panel pre.output");
  if (!pre) return;
  const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  const hint = pre.querySelector(".hint");
  if (hint) hint.remove();
  const lines = pre.querySelectorAll(".line");
  const last = lines[lines.length - 1];
  if (last && Number(last.dataset.attempt) !== l.attempt) pre.append(sepEl(l.attempt));
  pre.append(lineEl(l));
  while (pre.childNodes.length > 200) pre.firstChild.remove();
  if (stick) pre.scrollTop = pre.scrollHeight;
}

function formulaPanel(p, f, id) {
  if (!f) {
    p.append(el("h2", { text: id }), el("p", { class: "hint", text: "No such formula in this workflow." }));
    return;
  }
  p.append(el("div", { class: "ptitle" }, el("h2", { text: f.id }), el("span", { class: "badge", "data-state": f.status, text: f.status })));
  p.append(kv([["host", hostLink(f.host)], ["instance of", f.of ? f.of + (f.batches ? " (batch " + f.batch + " of " + f.batches + ")" : "") : ""],
    ["waits for", waitsFor(f)],
    ["started", clock(f.started_at)], ["ended", f.ended_at ? clock(f.ended_at) + " (" + duration(f.started_at, f.ended_at) + ")" : ""],
    ["blocked by", f.blocker], ["error", f.error], ["nodes", f.nodes.join(", ")]]));
  p.append(el("h3", { text: "Health gate" }));
  if (!(f.gates || []).length) {
    p.append(el("p", { class: "hint", text: f.gated ? "Not checked yet." : "This formula has no health gate." }));
    return;
  }
  const t = el("table", { class: "attempts" }, el("thead", {}, el("tr", {}, ...["check", "result", "at", "exit", "output / error"].map((h) => el("th", { text: h })))));
  const tb = el("tbody");
  for (const g of f.gates) {
    tb.append(el("tr", { "data-state": g.status },
      el("td", { text: g.final ? "verdict" : g.attempt + "/" + g.retries }),
      el("td", {}, el("span", { class: "badge small", "data-state": g.status === "pass" ? "succeeded" : "failed", text: g.status })),
      el("td", { text: clock(g.ended_at || g.started_at) }),
      el("td", { class: "num", text: g.exit_code === undefined || g.exit_code === null ? "" : g.exit_code }),
      el("td", { class: "err", text: [g.error, (g.output || "").trim()].filter(Boolean).join(" · ") })));
  }
  t.append(tb);
  p.append(t);
}

// waitsFor lists a formula's prerequisites, a group's instances as one.
function waitsFor(f) {
  const seen = new Map();
  for (const d of f.depends_on || []) {
    if (d.condition === "rollout") continue; // the batch before: shown by the group
    const df = S.formulas.get(d.formula);
    const name = df && df.of ? df.of : d.formula;
    const e = seen.get(name) || { n: 0, cond: d.condition, group: !!(df && df.of) };
    e.n++;
    seen.set(name, e);
  }
  return [...seen].map(([name, e]) => name + (e.group ? " (" + e.n + " instance" + (e.n === 1 ? "" : "s") + ", " + e.cond + ")" : " (" + e.cond + ")")).join(", ");
}

function renderLegend() {
  const lg = $("legend");
  lg.replaceChildren(el("span", { class: "hint", text: "node states:" }));
  for (const s of ["pending", "running", "succeeded", "skipped", "failed", "blocked", "cancelled"]) {
    lg.append(el("span", { class: "chip", "data-state": s, text: s }));
  }
  lg.append(el("span", { class: "hint", text: "· solid arrow: waits for completed · dashed: waits for healthy (its gate passed)" }));
}

// ---------- a node's whole output ----------

// openOutput shows every line of a node's output the log stream holds,
// as text (never as HTML), with links to the text itself and its
// download.
async function openOutput(id, formula, node) {
  $("output-view").hidden = false;
  const run = "/w/" + encodeURIComponent(id);
  $("crumbs").replaceChildren(el("a", { href: "/", text: "workflows" }), el("span", { text: " / " }),
    el("a", { class: "mono", href: run, text: id.slice(0, 8) }), el("span", { text: " / " + formula + "/" + node }));
  document.title = formula + "/" + node + " output · gantry";
  $("out-title").textContent = "Output of " + formula + "/" + node;
  $("out-download").href = outputURL(id, formula, node, "download");
  $("out-plain").href = outputURL(id, formula, node, "text");
  $("out-back").href = run + "#node=" + encodeURIComponent(formula + "/" + node);
  const pre = $("out-lines");
  pre.replaceChildren(el("span", { class: "hint", text: "Reading the output…" }));
  setConn("connecting", "reading…");
  let d;
  try {
    const resp = await fetch(outputURL(id, formula, node, "text") + "?format=json", { headers: { Accept: "application/json" } });
    if (!resp.ok) throw new Error((await resp.text()).trim() || resp.statusText);
    d = await resp.json();
  } catch (e) {
    pre.replaceChildren(el("span", { class: "hint", text: "Cannot read the output: " + e.message }));
    setConn("down", "cannot read");
    return;
  }
  setConn("live", "read");
  const attempts = new Set(d.lines.map((l) => l.attempt));
  $("out-note").textContent = d.lines.length + " line" + (d.lines.length === 1 ? "" : "s") +
    (attempts.size > 1 ? " over " + attempts.size + " attempts" : "") + " on " + d.host +
    (d.cut ? "; cut at the web view's limit: download it for the rest" : "") +
    ". Lines older than the log stream keeps are gone.";
  pre.replaceChildren();
  let prev = 0;
  for (const l of d.lines) {
    if (attempts.size > 1 && l.attempt !== prev) pre.append(sepEl(l.attempt));
    prev = l.attempt;
    pre.append(lineEl(l));
  }
  if (!d.lines.length) pre.append(el("span", { class: "hint", text: "(no output kept)" }));
  pre.dataset.lines = d.lines.length;
}

// ---------- a host ----------

// openHost shows a host's nodes across compositions and workflows, from
// state.host.
async function openHost(host) {
  $("host-view").hidden = false;
  $("crumbs").replaceChildren(el("a", { href: "/", text: "workflows" }), el("span", { text: " / host " + host }));
  document.title = host + " · gantry";
  $("host-name").textContent = "Host " + host;
  setConn("connecting", "reading…");
  let nodes;
  try {
    const resp = await fetch("/api/hosts/" + encodeURIComponent(host));
    if (!resp.ok) throw new Error((await resp.text()).trim() || resp.statusText);
    nodes = await resp.json();
  } catch (e) {
    $("host-empty").hidden = false;
    $("host-empty").textContent = "Cannot read this host: " + e.message;
    setConn("down", "cannot read");
    return;
  }
  setConn("live", "read " + clock(new Date().toISOString()));
  renderHost(nodes || []);
}

function renderHost(nodes) {
  $("host-empty").hidden = nodes.length > 0;
  // The runs that last touched its nodes, newest first.
  const runs = new Map();
  for (const n of nodes) {
    if (!n.workflow_id) continue;
    const r = runs.get(n.workflow_id) || { id: n.workflow_id, workflow: n.workflow, nodes: 0, last: 0 };
    r.nodes++;
    r.last = Math.max(r.last, ms(n.ended_at || n.started_at) || 0);
    runs.set(n.workflow_id, r);
  }
  const rl = $("host-runs");
  rl.replaceChildren();
  if (runs.size) {
    rl.append(el("span", { class: "hint", text: "last runs here: " }));
    for (const r of [...runs.values()].sort((a, b) => b.last - a.last)) {
      rl.append(el("a", { class: "chip run", href: "/w/" + encodeURIComponent(r.id), "data-workflow": r.id, title: r.nodes + " node" + (r.nodes === 1 ? "" : "s") + " last run by it",
        text: r.workflow + " · " + r.id.slice(0, 8) }));
    }
  }
  const body = $("host-nodes");
  body.replaceChildren();
  const sorted = [...nodes].sort((a, b) => (a.workflow + "/" + a.formula + "/" + a.node < b.workflow + "/" + b.formula + "/" + b.node ? -1 : 1));
  for (const n of sorted) {
    const runLink = (id) => (id ? el("a", { class: "mono", href: "/w/" + encodeURIComponent(id), text: id.slice(0, 8) }) : el("span", { text: "–" }));
    const ip = n.in_place;
    const inPlace = ip
      ? el("span", { class: "inplace yes", title: "spec " + ip.spec_hash },
        el("span", { text: "yes · " + ip.status + (ip.spec_hash && ip.spec_hash !== n.spec_hash ? " · spec " + shortSpec(ip.spec_hash) : "") + " · " + clock(ip.ended_at) + " · " }), runLink(ip.workflow_id))
      : el("span", { class: "inplace no", text: "no" });
    const c = n.check;
    const check = !c ? el("span", { text: "–" })
      : el("span", {}, el("span", { class: "badge small", "data-state": c.result === "would_change" ? "succeeded" : c.status, "data-verdict": c.result === "would_change" ? "changes" : null, text: (c.result || c.status).replace("_", " ") }), el("span", { text: " " + clock(c.ended_at) + " " }), runLink(c.workflow_id));
    body.append(el("tr", { "data-node": n.workflow + "/" + n.formula + "/" + n.node, "data-state": n.status, "data-in-place": ip ? "yes" : "no" },
      el("td", { text: n.workflow || "–" }),
      el("td", { text: n.formula }),
      el("td", { text: n.node, title: (n.log || []).length + " transitions kept" }),
      el("td", {}, el("span", { class: "badge", "data-state": n.status, text: n.status })),
      el("td", { text: n.operation || "–" }),
      el("td", {}, runLink(n.workflow_id)),
      el("td", { text: n.ended_at ? clock(n.ended_at) + (n.started_at ? " (" + duration(n.started_at, n.ended_at) + ")" : "") : "–" }),
      el("td", {}, inPlace),
      el("td", {}, check)));
  }
}

function shortSpec(h) { return (h || "").replace(/^sha256:/, "").slice(0, 12); }

// ---------- start ----------

document.addEventListener("DOMContentLoaded", () => {
  const path = location.pathname;
  let m = /^\/w\/([^/]+)\/output\/([^/]+)\/([^/]+)$/.exec(path);
  if (m) {
    openOutput(decodeURIComponent(m[1]), decodeURIComponent(m[2]), decodeURIComponent(m[3]));
    return;
  }
  m = /^\/w\/([^/]+)$/.exec(path);
  if (m) {
    openWorkflow(decodeURIComponent(m[1]));
    return;
  }
  m = /^\/h\/([^/]+)$/.exec(path);
  if (m) {
    openHost(decodeURIComponent(m[1]));
    return;
  }
  $("list-view").hidden = false;
  $("crumbs").replaceChildren(el("span", { text: "workflows" }));
  initFilters();
  openList();
});
