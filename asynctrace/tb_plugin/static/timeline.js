// asynctrace: the step timeline, drawn with SVG through DOM calls (no innerHTML, no eval,
// nothing fetched). Input: a TimelineWindow as /step_window answers it
// (asynctrace/render/views.py, with the durations its tooltips read as text: host_text,
// device_text) and the legend of /runs. It draws; it computes no figure and formats no
// duration.
//
// Lanes: host lanes (launch calls, sync stalls, or operators), device lanes (one per stream),
// queued→executed links (launch call end → activity start), and each stream's queue depth.
// Zoom: mouse wheel (around the pointer), drag to pan, double-click or "reset" to fit.

const SVG_NS = "http://www.w3.org/2000/svg";

export function svgEl(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.textContent = text;
  return node;
}

// an axis tick in ms from the window's start: a place on the drawn scale
function msLabel(ns) {
  const ms = ns / 1e6;
  const a = Math.abs(ms);
  if (a === 0) return "0";
  if (a >= 100) return ms.toFixed(0);
  if (a >= 1) return ms.toFixed(2);
  return ms.toFixed(4);
}

function niceStep(span, target) {
  const raw = span / Math.max(target, 1);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

const LABEL_W = 150;
const LANE_H = 22;
const LANE_GAP = 6;
const QUEUE_H = 70;
const AXIS_H = 24;

/**
 * Draw `win` into `container` (emptied first). Returns {svg, setView(v0, v1), reset()}.
 * `colors`: kind → colour (from the legend).
 */
export function drawTimeline(container, win, colors, opts = {}) {
  const width = opts.width || 1000;
  const plotW = width - LABEL_W - 10;
  const lanes = win.lanes;
  const laneY = new Map();
  let y = 8;
  for (const lane of lanes) {
    laneY.set(lane.id, y);
    y += LANE_H + LANE_GAP;
  }
  const queueTop = y + 6;
  const hasQueue = win.queue.length > 0;
  const height = queueTop + (hasQueue ? QUEUE_H + 8 : 0) + AXIS_H;
  while (container.firstChild) container.removeChild(container.firstChild);
  const svg = svgEl("svg", {
    class: "at-timeline",
    viewBox: `0 0 ${width} ${height}`,
    width: "100%",
    role: "img",
    "aria-label": `timeline of step ${win.step}`,
  });
  container.appendChild(svg);
  const defs = svgEl("defs");
  const clip = svgEl("clipPath", { id: `at-clip-${win.step}-${Math.random().toString(36).slice(2)}` });
  clip.appendChild(svgEl("rect", { x: LABEL_W, y: 0, width: plotW, height }));
  defs.appendChild(clip);
  const marker = svgEl("marker", {
    id: `${clip.id}-arrow`, viewBox: "0 0 6 6", refX: 6, refY: 3,
    markerWidth: 5, markerHeight: 5, orient: "auto-start-reverse",
  });
  marker.appendChild(svgEl("path", { d: "M0,0 L6,3 L0,6 z", fill: colors.arrow || "#555" }));
  defs.appendChild(marker);
  svg.appendChild(defs);

  for (const lane of lanes) {
    const ly = laneY.get(lane.id);
    svg.appendChild(svgEl("rect", {
      class: "at-lane-bg", x: LABEL_W, y: ly, width: plotW, height: LANE_H,
    }));
    svg.appendChild(svgEl("text", {
      class: "at-lane-label", x: LABEL_W - 6, y: ly + LANE_H / 2 + 4, "text-anchor": "end",
    }, lane.label));
  }
  if (hasQueue) {
    svg.appendChild(svgEl("text", {
      class: "at-lane-label", x: LABEL_W - 6, y: queueTop + QUEUE_H / 2, "text-anchor": "end",
    }, "queue depth"));
  }
  if (lanes.length === 0) {
    svg.appendChild(svgEl("text", { class: "at-empty", x: LABEL_W + plotW / 2, y: 20,
      "text-anchor": "middle" }, "nothing recorded in this window"));
  }
  const content = svgEl("g", { "clip-path": `url(#${clip.id})` });
  svg.appendChild(content);
  const axis = svgEl("g", { class: "at-axis" });
  svg.appendChild(axis);

  const full = [win.start_ns, win.end_ns];
  let view = full.slice();
  const maxDepth = Math.max(1, ...win.queue.flatMap((q) => q.depth));

  function xOf(t) {
    return LABEL_W + ((t - view[0]) / (view[1] - view[0])) * plotW;
  }

  // `read`: the event's duration as text (win.host_text / win.device_text)
  function bar(parent, ev, read, laneId, cls, color) {
    const ly = laneY.get(laneId);
    if (ly === undefined) return;
    const x0 = xOf(ev.start_ns);
    const x1 = xOf(ev.start_ns + ev.dur_ns);
    if (x1 < LABEL_W - 1 || x0 > LABEL_W + plotW + 1) return;
    const r = svgEl("rect", {
      class: cls, x: x0.toFixed(2), y: ly + 2,
      width: Math.max(x1 - x0, 0.6).toFixed(2), height: LANE_H - 4, fill: color,
    });
    r.appendChild(svgEl("title", {}, `${ev.name} (${ev.kind}): ${read}`));
    parent.appendChild(r);
  }

  function draw() {
    while (content.firstChild) content.removeChild(content.firstChild);
    while (axis.firstChild) axis.removeChild(axis.firstChild);
    // the step's own host span, shaded
    const sx0 = xOf(win.step_start_ns);
    const sx1 = xOf(win.step_end_ns);
    content.appendChild(svgEl("rect", {
      class: "at-step-span", x: sx0, y: 0, width: Math.max(sx1 - sx0, 0), height: queueTop - 4,
    }));
    win.host.forEach((h, i) => bar(content, h, win.host_text[i], h.lane, `host-call at-${h.kind}`, colors[h.kind] || colors.host));
    win.device.forEach((a, i) => {
      bar(content, a, win.device_text[i], a.lane, a.in_step ? "activity" : "activity at-other-step", colors.busy);
    });
    const links = svgEl("g", { class: "at-links" });
    for (const l of win.links) {
      const hy = laneY.get(l.host_lane);
      const dy = laneY.get(l.device_lane);
      if (hy === undefined || dy === undefined) continue;
      links.appendChild(svgEl("line", {
        class: "at-link", x1: xOf(l.queued_ns).toFixed(2), y1: hy + LANE_H - 2,
        x2: xOf(l.executed_ns).toFixed(2), y2: dy + 2,
        stroke: colors.arrow || "#555", "marker-end": `url(#${clip.id}-arrow)`,
      }));
    }
    content.appendChild(links);
    if (hasQueue) {
      content.appendChild(svgEl("rect", {
        class: "at-lane-bg", x: LABEL_W, y: queueTop, width: plotW, height: QUEUE_H,
      }));
      win.queue.forEach((q, k) => {
        const pts = [];
        const yOf = (d) => queueTop + QUEUE_H - (d / maxDepth) * (QUEUE_H - 4);
        for (let i = 0; i < q.time_ns.length; i++) {
          const x = xOf(q.time_ns[i]);
          if (i > 0) pts.push(`${x.toFixed(2)},${yOf(q.depth[i - 1]).toFixed(2)}`);
          pts.push(`${x.toFixed(2)},${yOf(q.depth[i]).toFixed(2)}`);
        }
        const last = q.depth[q.depth.length - 1];
        pts.push(`${xOf(win.end_ns).toFixed(2)},${yOf(last).toFixed(2)}`);
        const line = svgEl("polyline", {
          class: "at-queue", points: pts.join(" "), fill: "none",
          stroke: colors.queue || "#B07AA1", "stroke-opacity": k === 0 ? 1 : 0.6,
        });
        line.appendChild(svgEl("title", {}, `queue depth, ${q.lane.replace("device:", "stream ")}`));
        content.appendChild(line);
      });
      axis.appendChild(svgEl("text", { class: "at-tick", x: LABEL_W + 3, y: queueTop + 10 },
        `max ${maxDepth}`));
    }
    // time axis: ms from the window's start
    const ay = height - AXIS_H + 4;
    axis.appendChild(svgEl("line", { class: "at-axis-line", x1: LABEL_W, x2: LABEL_W + plotW, y1: ay, y2: ay }));
    const span = view[1] - view[0];
    const step = niceStep(span, 8);
    const first = Math.ceil((view[0] - win.start_ns) / step) * step + win.start_ns;
    for (let t = first; t <= view[1]; t += step) {
      const x = xOf(t);
      axis.appendChild(svgEl("line", { class: "at-axis-line", x1: x, x2: x, y1: ay, y2: ay + 4 }));
      axis.appendChild(svgEl("text", { class: "at-tick", x, y: ay + 15, "text-anchor": "middle" },
        msLabel(t - win.start_ns)));
    }
    axis.appendChild(svgEl("text", { class: "at-tick", x: LABEL_W - 6, y: ay + 15, "text-anchor": "end" },
      "ms"));
  }

  function setView(v0, v1) {
    const minSpan = 1000; // 1 µs
    if (v1 - v0 < minSpan) {
      const mid = (v0 + v1) / 2;
      v0 = mid - minSpan / 2;
      v1 = mid + minSpan / 2;
    }
    view = [v0, v1];
    draw();
  }

  function zoom(factor, atX) {
    const frac = Math.min(Math.max((atX - LABEL_W) / plotW, 0), 1);
    const t = view[0] + frac * (view[1] - view[0]);
    const span = (view[1] - view[0]) * factor;
    setView(t - frac * span, t - frac * span + span);
  }

  function svgX(evt) {
    const box = svg.getBoundingClientRect();
    return ((evt.clientX - box.left) / box.width) * width;
  }

  svg.addEventListener("wheel", (evt) => {
    evt.preventDefault();
    zoom(evt.deltaY > 0 ? 1.25 : 0.8, svgX(evt));
  }, { passive: false });
  let drag = null;
  svg.addEventListener("mousedown", (evt) => {
    drag = { x: svgX(evt), view: view.slice() };
  });
  window.addEventListener("mouseup", () => { drag = null; });
  svg.addEventListener("mousemove", (evt) => {
    if (!drag) return;
    const dt = ((svgX(evt) - drag.x) / plotW) * (drag.view[1] - drag.view[0]);
    setView(drag.view[0] - dt, drag.view[1] - dt);
  });
  svg.addEventListener("dblclick", () => setView(full[0], full[1]));
  draw();
  return {
    svg,
    setView,
    reset: () => setView(full[0], full[1]),
    zoomIn: () => zoom(0.5, LABEL_W + plotW / 2),
    zoomOut: () => zoom(2, LABEL_W + plotW / 2),
  };
}
