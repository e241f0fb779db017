// asynctrace's TensorBoard plugin page. TensorBoard's plugin_entry.html imports this module
// in an iframe and calls render(). Everything it shows comes from the plugin's JSON routes
// (the Report — one form for traces and records — as the analysis wrote it, the step bars and
// step windows of asynctrace/render/views.py, the comparison of asynctrace/analysis/compare.py,
// in the answers of asynctrace/tb_plugin/_data.py): this file
// lays out and draws, it computes no figure and formats no duration: what is read (the
// diagnosis, the bound, the per-step figures, the sync sites, tooltips, the comparison's
// figure table) comes as text from the server, written by the views every other output uses;
// the raw numbers only place what is drawn. DOM and SVG are built with createElement /
// textContent only (every string from a trace is text, never markup); nothing is loaded from
// another origin.

import { drawTimeline, svgEl } from "./timeline.js";

const BASE = new URL(".", import.meta.url);
const MAX_OPEN = 8; // sources opened (and loaded) at first; the others load when opened
const MAX_LOADING = 2; // reports asked for at a time: each may be a large trace's first load

let loading = 0;
const waiting = [];
async function limited(task) {
  while (loading >= MAX_LOADING) await new Promise((resolve) => waiting.push(resolve));
  loading++;
  try {
    return await task();
  } finally {
    loading--;
    const next = waiting.shift();
    if (next) next();
  }
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else node.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return node;
}

async function getJSON(route, params = {}) {
  const url = new URL(route, BASE);
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, String(v));
  const r = await fetch(url, { credentials: "same-origin" });
  if (!r.ok) throw new Error(`${route}: HTTP ${r.status}`);
  return r.json();
}

// an axis tick in ms: a place on a drawn scale, not a figure read as text
function axisMs(ns) {
  return (ns / 1e6).toFixed(3);
}

function table(head, rows, cls = "") {
  const t = el("table", { class: `at-table ${cls}` });
  const tr = el("tr");
  for (const h of head) tr.appendChild(el("th", {}, h));
  t.appendChild(el("thead", {}, tr));
  const body = el("tbody");
  if (rows.length === 0) body.appendChild(el("tr", {}, el("td", { colspan: head.length, class: "l" }, "none")));
  for (const r of rows) {
    const row = el("tr");
    r.forEach((c, i) => row.appendChild(el("td", { class: i === 0 ? "l" : "" }, c)));
    body.appendChild(row);
  }
  t.appendChild(body);
  return t;
}

// ------------------------------------------------------------------ verdict, bound, warnings

// `line`: the verdict in one line with its code said once, as the server wrote it
function verdictBox(v, line) {
  const box = el("div", { class: "at-verdict", "data-verdict": v.code });
  box.appendChild(el("b", {}, v.code));
  const rest = line && line.startsWith(v.code) ? line.slice(v.code.length) : `: ${v.message}`;
  if (v.message) box.appendChild(document.createTextNode(rest));
  const others = (v.findings || []).filter((f) => f !== v.message);
  if (others.length) box.appendChild(el("ul", {}, ...others.map((f) => el("li", {}, f))));
  return box;
}

// The diagnosis as every view shows it (answer.diagnosis: render/diagnosis.py's
// DiagnosisView): the headline with its code in bold, its next step, its evidence as read;
// then the other findings ranked, each with what it costs, and how many are left out.
function diagnosisBox(v) {
  const box = el("div", { class: "at-diagnosis", "data-code": v.code });
  const p = el("p", { class: "at-headline" }, el("b", {}, v.code));
  p.appendChild(document.createTextNode(
    v.message.startsWith(v.code) ? v.message.slice(v.code.length) : `: ${v.message}`));
  box.appendChild(p);
  if (v.advice) box.appendChild(el("p", { class: "at-advice" }, "next step: ", v.advice));
  if (v.evidence.length) box.appendChild(table(["evidence", ""], v.evidence, "at-small"));
  if (v.rest.length) {
    box.appendChild(el("p", {}, "then, ranked by what each costs:"));
    const items = v.rest.map(([code, message, cost]) => el("li", { "data-code": code },
      el("b", {}, code), ` — ${message} `, el("span", { class: "at-notes" }, `(${cost})`)));
    if (v.more) items.push(el("li", { class: "at-more" }, `… and ${v.more} more in the report JSON`));
    box.appendChild(el("ol", {}, ...items));
  }
  return box;
}

// The bound's figures as the text report writes them (answer.bound_lines: render/text.py's
// bound_text), the label in bold.
function boundBox(label, lines) {
  const box = el("div", { class: "at-bound", "data-bound": label });
  const head = `bound: ${label}`;
  const first = lines[0].startsWith(head) ? lines[0].slice(head.length) : lines[0];
  box.appendChild(el("p", {}, "bound: ", el("b", {}, label), first));
  for (const line of lines.slice(1)) box.appendChild(el("p", { class: "at-bound-part" }, line.trim()));
  return box;
}

function warningsBox(ws) {
  return el("div", { class: "at-warnings" }, el("b", {}, "warnings"),
    el("ul", {}, ...ws.map((w) => el("li", {}, typeof w === "string" ? w : (w.message || JSON.stringify(w))))));
}

// ------------------------------------------------------------------ charts

function legendRow(kinds, colors, labels) {
  const row = el("div", { class: "at-legend" });
  for (const k of kinds) {
    const sw = el("span", { class: "at-swatch" });
    sw.style.background = colors[k] || "#999";
    row.appendChild(el("span", { class: "at-legend-item" }, sw, labels[k] || k));
  }
  return row;
}

function stepBars(bars, text, colors, labels) {
  const W = 1000, H = 220, L = 56, B = 28, T = 10;
  const n = bars.length;
  const totals = bars.map((b) => Math.max(b.host.reduce((s, p) => s + p.dur_ns, 0), b.device.reduce((s, p) => s + p.dur_ns, 0)));
  const max = Math.max(1, ...totals);
  const svg = svgEl("svg", { class: "at-bars", viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img",
    "aria-label": "per-step host and device bars" });
  const plotW = W - L - 10, plotH = H - B - T;
  const slot = plotW / Math.max(n, 1);
  const bw = Math.min(Math.max(slot * 0.38, 0.5), 48);
  const yOf = (ns) => T + plotH - (ns / max) * plotH;
  // y axis
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    const y = yOf(v);
    svg.appendChild(svgEl("line", { class: "at-grid", x1: L, x2: W - 10, y1: y, y2: y }));
    svg.appendChild(svgEl("text", { class: "at-tick", x: L - 4, y: y + 4, "text-anchor": "end" }, axisMs(v)));
  }
  svg.appendChild(svgEl("text", { class: "at-tick", x: 4, y: T + 8 }, "ms"));
  const kinds = new Set();
  const stride = Math.max(1, Math.ceil(n / 20));
  bars.forEach((b, i) => {
    const x = L + i * slot + slot / 2 - bw - slot * 0.01;
    for (const [parts, read, dx, side] of [[b.host, text.host[i], 0, "host"], [b.device, text.device[i], bw + slot * 0.02, "device"]]) {
      let acc = 0;
      for (const [j, p] of parts.entries()) {
        if (!p.dur_ns) continue;
        kinds.add(p.kind);
        const r = svgEl("rect", { class: `at-bar at-${side}`, x: (x + dx).toFixed(2), y: yOf(acc + p.dur_ns).toFixed(2),
          width: bw.toFixed(2), height: Math.max(yOf(acc) - yOf(acc + p.dur_ns), 0).toFixed(2), fill: colors[p.kind] || "#999" });
        r.appendChild(svgEl("title", {}, `step ${b.step}, ${labels[p.kind] || p.kind}: ${read[j]}`));
        svg.appendChild(r);
        acc += p.dur_ns;
      }
    }
    if (i % stride === 0) {
      svg.appendChild(svgEl("text", { class: "at-tick", x: x + bw, y: H - B + 14, "text-anchor": "middle" }, String(b.step)));
    }
  });
  svg.appendChild(svgEl("text", { class: "at-tick", x: L + plotW / 2, y: H - 2, "text-anchor": "middle" },
    "step (left bar: host, right bar: device)"));
  return el("figure", { class: "at-figure" }, svg, legendRow([...kinds], colors, labels));
}

// run-ahead (left axis) and a count per step (right axis): steps in flight, or a trace's
// highest queue depth in the step
function seriesChart(bars, text, colors, counts, countLabel) {
  const W = 1000, H = 170, L = 56, R = 56, B = 28, T = 10;
  const n = bars.bars.length;
  const ra = bars.run_ahead_ns;
  const svg = svgEl("svg", { class: "at-series", viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img",
    "aria-label": "run-ahead and in-flight per step" });
  const plotW = W - L - R, plotH = H - B - T;
  const xOf = (i) => L + (n <= 1 ? plotW / 2 : (i / (n - 1)) * plotW);
  const vals = ra.filter((v) => v !== null && v !== undefined);
  const lo = Math.min(0, ...vals);
  let hi = Math.max(0, ...vals);
  if (hi - lo < 1000) hi = lo + 1e6; // all (near) zero: a 1 ms scale, not a 1 ns one
  const yRa = (v) => T + plotH - ((v - lo) / (hi - lo || 1)) * plotH;
  const cmax = Math.max(1, ...counts) * 1.15;
  const yC = (v) => T + plotH - (v / cmax) * plotH;
  svg.appendChild(svgEl("line", { class: "at-grid", x1: L, x2: W - R, y1: yRa(0), y2: yRa(0) }));
  for (const v of [lo, hi]) {
    svg.appendChild(svgEl("text", { class: "at-tick", x: L - 4, y: yRa(v) + 4, "text-anchor": "end" }, axisMs(v)));
  }
  svg.appendChild(svgEl("text", { class: "at-tick", x: W - R + 4, y: yC(cmax / 1.15) + 4 }, String(Math.round(cmax / 1.15))));
  svg.appendChild(svgEl("text", { class: "at-tick", x: W - R + 4, y: yC(0) + 4 }, "0"));
  // in flight / queue max: a step line on the right axis
  const cpts = [];
  counts.forEach((c, i) => cpts.push(`${xOf(i).toFixed(1)},${yC(c).toFixed(1)}`));
  if (n === 1) cpts.push(`${(xOf(0) + 6).toFixed(1)},${yC(counts[0]).toFixed(1)}`);
  svg.appendChild(svgEl("polyline", { class: "at-count-line", points: cpts.join(" "), fill: "none", stroke: colors.queue }));
  // run-ahead: a line with gaps where not measured
  let seg = [];
  const flush = () => {
    if (seg.length) svg.appendChild(svgEl("polyline", { class: "at-run-ahead", points: seg.join(" "), fill: "none", stroke: colors.run_ahead }));
    seg = [];
  };
  ra.forEach((v, i) => {
    if (v === null || v === undefined) { flush(); return; }
    seg.push(`${xOf(i).toFixed(1)},${yRa(v).toFixed(1)}`);
    const c = svgEl("circle", { cx: xOf(i).toFixed(1), cy: yRa(v).toFixed(1), r: 2.5, fill: colors.run_ahead });
    c.appendChild(svgEl("title", {}, `step ${bars.bars[i].step}: run-ahead ${text.run_ahead[i]}, ${countLabel} ${counts[i]}`));
    svg.appendChild(c);
  });
  flush();
  if (vals.length === 0) {
    svg.appendChild(svgEl("text", { class: "at-empty", x: L + plotW / 2, y: T + 20, "text-anchor": "middle" },
      "run-ahead not measured: no step has device figures"));
  }
  const stride = Math.max(1, Math.ceil(n / 20));
  bars.bars.forEach((b, i) => {
    if (i % stride === 0) svg.appendChild(svgEl("text", { class: "at-tick", x: xOf(i), y: H - B + 14, "text-anchor": "middle" }, String(b.step)));
  });
  const legend = legendRow(["run_ahead", "queue"], colors, { run_ahead: "run-ahead (ms, left axis)", queue: `${countLabel} (right axis)` });
  return el("figure", { class: "at-figure" }, svg, legend);
}

// ------------------------------------------------------------------ one source

// a trace's every sync call by site, else the sites of the syncs made inside steps (a
// session's), as the text report's table (answer.sync_rows: render/text.py's site_rows)
function syncTable(answer) {
  return [
    el("h4", {}, answer.sync_title),
    table(["site", "op", "count", answer.report.trace ? "total" : "wait", "steps"], answer.sync_rows, "at-syncs"),
  ];
}

// each per-step figure's mean, median and p90 (answer.figure_rows: render/text.py's figure_rows)
function figuresTable(rows) {
  return table(["figure", "mean", "median", "p90"], rows, "at-figures");
}

function timelineSection(src, answer, colors, labels) {
  const box = el("div", { class: "at-timeline-box" });
  const pick = el("select", { class: "at-step-pick", "aria-label": "step" });
  for (const w of answer.windows) pick.appendChild(el("option", { value: w.step }, w.name || `step ${w.step}`));
  const zoomIn = el("button", { type: "button" }, "zoom in");
  const zoomOut = el("button", { type: "button" }, "zoom out");
  const reset = el("button", { type: "button" }, "reset");
  const note = el("div", { class: "at-notes" });
  const area = el("div", { class: "at-timeline-area" });
  const legendBox = el("div");
  box.append(
    el("h4", {}, "Timeline of one step"),
    el("div", { class: "at-controls" }, "step ", pick, " ", zoomIn, zoomOut, reset,
      el("span", { class: "at-hint" }, " wheel: zoom · drag: pan · double-click: fit")),
    area, note, legendBox,
  );
  let handle = null;
  async function show() {
    area.textContent = "loading…";
    note.textContent = "";
    try {
      const win = await getJSON("step_window", { path: src.path, step: pick.value });
      if (win.ok === false) { area.textContent = win.error; return; }
      handle = drawTimeline(area, win, colors);
      const kinds = [...new Set(win.host.map((h) => h.kind))];
      if (win.device.length) kinds.push("busy");
      if (win.links.length) kinds.push("arrow");
      if (win.queue.length) kinds.push("queue");
      legendBox.textContent = "";
      legendBox.appendChild(legendRow(kinds, colors, labels));
      const c = win.counts;
      note.textContent = [`${c.device_shown} device activities, ${c.host_shown} host calls, ${c.links_shown} links shown`,
        ...win.notes].join(" · ");
      box.dataset.step = String(win.step);
    } catch (e) {
      area.textContent = `could not load the step window: ${e.message}`;
    }
  }
  pick.addEventListener("change", show);
  zoomIn.addEventListener("click", () => handle && handle.zoomIn());
  zoomOut.addEventListener("click", () => handle && handle.zoomOut());
  reset.addEventListener("click", () => handle && handle.reset());
  show();
  return box;
}

// what was analysed, in one line: report.source (both kinds), and what only a trace has
function metaLine(r) {
  const s = r.source;
  const parts = [s.format, `device ${s.device}` + (s.session ? ` (${s.session.device_kind})` : "")];
  if (s.rank !== null) parts.push(`rank ${s.rank}`);
  if (r.trace) {
    parts.push(`${s.events} events`, `${r.steps.length} steps (from ${r.trace.step_source})`,
      `${r.trace.activities.total} device activities`);
  } else {
    parts.push(`${r.steps.length} steps`);
  }
  if (!s.complete) parts.push("incomplete file");
  return parts.join(" · ");
}

function renderSource(box, src, answer, colors, labels) {
  box.textContent = "";
  if (!answer.ok) {
    box.classList.add("at-unreadable");
    box.dataset.status = "unreadable";
    box.appendChild(el("p", { class: "at-error" }, "unreadable: ", answer.error || "unknown error"));
    return;
  }
  box.dataset.status = "ok";
  const r = answer.report;
  box.appendChild(el("p", { class: "at-meta" }, metaLine(r)));
  // one headline: the diagnosis's first finding (without findings: the verdict)
  if (answer.diagnosis.message) box.appendChild(diagnosisBox(answer.diagnosis));
  else box.appendChild(verdictBox(r.verdict, answer.verdict_line));
  if (r.bound && answer.bound_lines.length) box.appendChild(boundBox(r.bound.label, answer.bound_lines));
  if (Array.isArray(r.warnings) && r.warnings.length) box.appendChild(warningsBox(r.warnings));
  if (answer.bars && answer.bars.bars.length) {
    box.appendChild(el("h4", {}, "Per step"));
    if (answer.bars.stride > 1) {
      box.appendChild(el("p", { class: "at-notes" },
        `one step in ${answer.bars.stride} of ${answer.bars.total_steps} shown (each bar a real step)`));
    }
    const b = answer.bars, text = answer.bar_text;
    box.appendChild(stepBars(b.bars, text, colors, labels));
    if (b.bars.length > 1) {
      box.appendChild(seriesChart(b, text, colors, b.in_flight, "steps in flight"));
      if (b.queue_max) box.appendChild(seriesChart(b, text, colors, b.queue_max, "queue max (ops)"));
    } else {
      box.appendChild(el("p", { class: "at-meta" }, `run-ahead ${text.run_ahead[0]} · ` +
        `in flight ${b.in_flight[0]}` + (b.queue_max ? ` · queue max ${b.queue_max[0]}` : "")));
    }
  }
  if (answer.figure_rows.length) box.appendChild(figuresTable(answer.figure_rows));
  for (const n of syncTable(answer)) box.appendChild(n);
  if (answer.windows.length) box.appendChild(timelineSection(src, answer, colors, labels));
}

async function loadSource(box, src, colors, labels) {
  box.textContent = "loading…";
  try {
    const answer = await limited(() => getJSON("report", { path: src.path }));
    renderSource(box, src, answer, colors, labels);
  } catch (e) {
    box.dataset.status = "unreadable";
    box.textContent = `could not load ${src.path}: ${e.message}`;
  }
}

// ------------------------------------------------------------------ compare

function compareSection(sources) {
  const box = el("section", { class: "at-compare" });
  const a = el("select", { "aria-label": "A", class: "at-pick-a" });
  const b = el("select", { "aria-label": "B", class: "at-pick-b" });
  for (const s of sources) {
    a.appendChild(el("option", { value: s.path }, s.path));
    b.appendChild(el("option", { value: s.path }, s.path));
  }
  // B: the next source of A's kind, else the next one (any two reports compare)
  const sameKind = sources.findIndex((s, i) => i > 0 && s.kind === sources[0].kind);
  b.selectedIndex = sameKind > 0 ? sameKind : Math.min(1, sources.length - 1);
  const go = el("button", { type: "button", class: "at-compare-go" }, "compare");
  const out = el("div", { class: "at-compare-out" });
  box.append(el("h2", {}, "Compare two runs"), el("div", { class: "at-controls" }, "A ", a, " B ", b, " ", go), out);
  go.addEventListener("click", async () => {
    out.textContent = "comparing…";
    try {
      const ans = await getJSON("compare", { a: a.value, b: b.value });
      out.textContent = "";
      if (!ans.ok) { out.appendChild(el("p", { class: "at-error" }, ans.error)); return; }
      const c = ans.comparison;
      out.dataset.outcome = c.outcome;
      out.append(
        el("p", { class: "at-outcome" }, el("b", {}, `B is: ${c.outcome}`), ` (judged on step time; ${c.noise})`),
        el("div", { class: "at-side-by-side" },
          el("div", {}, el("h4", {}, `A: ${c.a.split("/").pop()}`), verdictBox(c.verdict_a, ans.verdict_line_a)),
          el("div", {}, el("h4", {}, `B: ${c.b.split("/").pop()}`), verdictBox(c.verdict_b, ans.verdict_line_b))),
        el("p", {}, c.verdict_changed ? "the verdict changed" : "the verdict is the same"),
        // answer.figure_rows: render/compare.py's comparison_rows, as `asynctrace compare` prints
        table(["figure", "A median", "B median", "delta", "p", "judged"], ans.figure_rows, "at-compare-table"),
        ...(c.notes || []).map((n) => el("p", { class: "at-notes" }, n)),
      );
    } catch (e) {
      out.textContent = `could not compare: ${e.message}`;
    }
  });
  return box;
}

// ------------------------------------------------------------------ the page

export async function render() {
  const css = document.createElement("link");
  css.rel = "stylesheet";
  css.href = new URL("style.css", BASE).href;
  document.head.appendChild(css);
  const root = el("main", { class: "at-root" });
  document.body.appendChild(root);
  root.appendChild(el("h1", {}, "asynctrace"));
  let listing;
  try {
    listing = await getJSON("runs");
  } catch (e) {
    root.appendChild(el("p", { class: "at-error" }, `could not list the runs: ${e.message}`));
    return;
  }
  const colors = {}, labels = {};
  for (const l of listing.legend) { colors[l.kind] = l.color; labels[l.kind] = l.label; }
  root.appendChild(el("p", { class: "at-meta" }, `logdir ${listing.logdir} · ${listing.runs.length} runs`));
  for (const n of listing.notes) root.appendChild(el("p", { class: "at-notes" }, n));
  if (listing.runs.length === 0) {
    root.appendChild(el("p", {}, "No asynctrace records (*.records.jsonl) or traces (*.pt.trace.json.gz, *.json.gz, *.sqlite) in this logdir."));
    return;
  }
  const sources = listing.runs.flatMap((r) => r.sources);
  if (sources.length > 1) root.appendChild(compareSection(sources));
  let opened = 0;
  const pending = [];
  for (const run of listing.runs) {
    const section = el("section", { class: "at-run", "data-run": run.run });
    section.appendChild(el("h2", {}, run.run));
    for (const src of run.sources) {
      const det = el("details", { class: "at-source-wrap" });
      det.appendChild(el("summary", {}, el("span", { class: "at-file" }, src.path.split("/").pop()),
        el("span", { class: "at-kind" }, ` ${src.kind}, ${(src.size_bytes / 1e6).toFixed(2)} MB` +
          (src.error ? " — unreadable" : ""))));
      const box = el("div", { class: "at-source", "data-path": src.path, "data-kind": src.kind });
      det.appendChild(box);
      section.appendChild(det);
      let loaded = false;
      const load = () => { if (!loaded) { loaded = true; pending.push(loadSource(box, src, colors, labels)); } };
      det.addEventListener("toggle", () => { if (det.open) load(); });
      if (opened < MAX_OPEN) { opened++; det.open = true; load(); }
    }
    root.appendChild(section);
  }
  await Promise.all(pending);
  root.dataset.ready = "true";
}
