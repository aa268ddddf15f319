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
const L = { rows: new Map(), es: null, timer: null };

function openList() {
  setConn("connecting", "connecting…");
  const es = new EventSource("/api/workflows/events");
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

function renderList() {
  const rows = [...L.rows.values()].sort((a, b) =>
    (Date.parse(b.created_at) || 0) - (Date.parse(a.created_at) || 0) || (b.workflow_id < a.workflow_id ? -1 : 1));
  for (const r of rows.splice(100)) L.rows.delete(r.workflow_id); // the newest 100, as the server keeps
  const body = $("runs");
  body.replaceChildren();
  $("list-empty").hidden = rows.length > 0;
  for (const r of rows) {
    const link = el("a", { href: "/w/" + encodeURIComponent(r.workflow_id), text: r.workflow });
    const ended = r.ended_at ? clock(r.ended_at) + " (" + duration(r.created_at, r.ended_at) + ")" : "–";
    body.append(el("tr", { "data-workflow": r.workflow_id, "data-state": r.status },
      el("td", {}, link),
      el("td", { class: "mono", text: r.workflow_id }),
      el("td", { text: r.operation }),
      el("td", {}, el("span", { class: "badge", "data-state": r.status, text: r.status })),
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
  connect();
  window.addEventListener("resize", () => scheduleEdges());
  window.addEventListener("hashchange", () => {
    const h = /^#(node|formula)=(.+)$/.exec(location.hash);
    if (h) select(h[1], decodeURIComponent(h[2]));
  });
  // Running clocks tick.
  setInterval(() => {
    if (!S.header || S.header.ended_at) return;
    renderHeader();
    paintDag();
    renderPanel();
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
  on("formula", (f) => {
    S.formulas.set(f.id, Object.assign(S.formulas.get(f.id) || {}, f));
    update();
  });
  on("node", (n) => {
    const key = n.formula + "/" + n.name;
    const old = S.nodes.get(key);
    if (old && !n.output) n.output = old.output;
    S.nodes.set(key, Object.assign(old || {}, n));
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
  }
  paintDag();
  renderPanel();
  scheduleEdges();
}

// ---------- header ----------

function renderHeader() {
  const h = S.header;
  if (!h) return;
  document.title = (h.workflow || h.workflow_id) + " · " + h.status + " · gantry";
  $("wf-name").textContent = h.workflow || h.workflow_id;
  const st = $("wf-state");
  st.hidden = false;
  st.textContent = h.cancelling ? "cancelling" : h.status;
  st.dataset.state = h.status;
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
    el("span", { class: "fhost", text: "@" + f.host }),
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
    const a = (n.attempts || [])[(n.attempts || []).length - 1];
    let meta = "";
    if (n.status === "running" && typeof n.progress === "number") meta = n.progress + "%";
    else if (n.status === "running" && a) meta = duration(a.started_at);
    else if (a && a.ended_at && (n.status === "succeeded" || n.status === "failed")) meta = duration(a.started_at, a.ended_at);
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
  requestAnimationFrame(() => { edgesPending = false; drawEdges(); });
}

function drawEdges() {
  const wrap = $("dag-wrap"), g = $("edges"), ng = $("nedges"), dag = $("dag");
  if (!S.units) return;
  const W = dag.scrollWidth, H = dag.scrollHeight;
  for (const e of [g, ng]) {
    e.replaceChildren();
    e.setAttribute("width", W);
    e.setAttribute("height", H);
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
    return { x: r.left - base.left, y: r.top - base.top, w: r.width, h: r.height };
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

// ---------- the detail panel ----------

function select(kind, key) {
  S.sel = { kind, key };
  history.replaceState(null, "", "#" + kind + "=" + encodeURIComponent(key));
  paintDag();
  renderPanel(true);
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
    dl.append(el("dt", { text: k }), el("dd", { text: v }));
  }
  return dl;
}

function nodePanel(p, n, key) {
  if (!n) {
    p.append(el("h2", { text: key }), el("p", { class: "hint", text: "No such node in this workflow." }));
    return;
  }
  const f = S.formulas.get(n.formula) || {};
  p.append(el("div", { class: "ptitle" }, el("h2", { text: n.name }), el("span", { class: "badge", "data-state": n.status, text: n.status })));
  p.append(el("p", { class: "psub" }, el("span", { text: "node of " }), el("a", { href: "#formula=" + encodeURIComponent(n.formula), text: n.formula, on: { click: (e) => { e.preventDefault(); select("formula", n.formula); } } }), el("span", { text: " on " + (f.host || "?") })));
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
  p.append(el("h3", { text: "Output" }));
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
  p.append(kv([["host", f.host], ["instance of", f.of ? f.of + (f.batches ? " (batch " + f.batch + " of " + f.batches + ")" : "") : ""],
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

// ---------- start ----------

document.addEventListener("DOMContentLoaded", () => {
  const m = /^\/w\/([^/]+)$/.exec(location.pathname);
  if (m) {
    openWorkflow(decodeURIComponent(m[1]));
    return;
  }
  $("list-view").hidden = false;
  $("crumbs").replaceChildren(el("span", { text: "workflows" }));
  openList();
});
