// Small charts drawn as inline SVG (time series) and HTML (bars), colored by CSS classes so
// that light and dark schemes both read; every chart carries a text summary for screen
// readers, and its numbers are also printed beside it.
import { h, fmt } from "./util.js";

const W = 300, H = 64;

// stacked draws one column per time slot, its parts stacked (series: [{cls, values}]); the
// slots are aligned to the right (the newest last) over `slots` positions; scale formats the
// top of the scale.
export function stacked(series, slots, label, scale) {
  let max = 0;
  const n = Math.max(0, ...series.map(s => s.values.length));
  for (let i = 0; i < n; i++) max = Math.max(max, series.reduce((a, s) => a + (s.values[i] || 0), 0));
  const top = niceMax(max);
  const bw = W / slots;
  const cols = [];
  for (let i = 0; i < n; i++) {
    const x = W - (n - i) * bw;
    let y = H;
    for (const s of series) {
      const v = s.values[i] || 0;
      if (v <= 0) continue;
      const hh = (v / top) * H;
      y -= hh;
      cols.push(h("rect", { x: x + 0.5, y, width: Math.max(0.5, bw - 1), height: hh, class: s.cls }));
    }
  }
  return frame(cols, top, label, scale);
}

// lines draws series of values (null: no value) as polylines over `slots` positions.
export function lines(series, slots, label, scale, fixedTop) {
  let max = 0;
  for (const s of series) for (const v of s.values) if (v !== null && Number.isFinite(v)) max = Math.max(max, v);
  const top = fixedTop || niceMax(max);
  const step = W / Math.max(1, slots - 1);
  const parts = [];
  for (const s of series) {
    const n = s.values.length;
    let pts = [];
    const flush = () => {
      if (pts.length > 1) parts.push(h("polyline", { points: pts.join(" "), class: "line " + s.cls, "vector-effect": "non-scaling-stroke" }));
      else if (pts.length === 1) {
        const [x, y] = pts[0].split(",");
        parts.push(h("circle", { cx: x, cy: y, r: 1.5, class: "dot " + s.cls }));
      }
      pts = [];
    };
    s.values.forEach((v, i) => {
      if (v === null || !Number.isFinite(v)) { flush(); return; }
      const x = W - (n - 1 - i) * step;
      pts.push(x.toFixed(1) + "," + (H - Math.min(1, v / top) * H).toFixed(1));
    });
    flush();
  }
  return frame(parts, top, label, scale);
}

// frame puts a chart's marks on its grid, with the top of its scale and its time axis as
// text (HTML, so that it stays readable at any zoom).
function frame(parts, top, label, scale) {
  const grid = [0.25, 0.5, 0.75].map(f => h("line", { x1: 0, x2: W, y1: H * f, y2: H * f, class: "grid", "vector-effect": "non-scaling-stroke" }));
  return h("div", { class: "chartwrap" },
    h("span", { class: "scale", "aria-hidden": "true" }, (scale || fmt)(top)),
    h("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", class: "chart", role: "img", "aria-label": label },
      h("title", {}, label), grid, parts),
    h("div", { class: "axis", "aria-hidden": "true" }, h("span", {}, "1 min ago"), h("span", {}, "now")));
}

// niceMax rounds a maximum up to 1, 2 or 5 times a power of ten, so that the scale's top is
// a round number.
export function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

// bars draws a histogram in HTML: one column per item [{label, value}], heights relative to
// the largest, the label under each (every nth when there are many).
export function bars(items, label) {
  const max = Math.max(0, ...items.map(i => i.value));
  const every = Math.ceil(items.length / 16);
  const total = items.reduce((a, i) => a + i.value, 0);
  return h("div", { class: "hist", role: "img", "aria-label": label },
    items.map((it, i) => h("div", { class: "col", title: `${it.label}: ${fmt(it.value)}${total ? " (" + Math.round(100 * it.value / total) + " %)" : ""}` },
      h("div", { class: "barwrap", "aria-hidden": "true" },
        h("div", { class: "bar" + (it.value > 0 ? "" : " empty"), style: { height: (max > 0 ? (100 * it.value / max) : 0).toFixed(1) + "%" } })),
      h("span", { class: "x" + (i % every === 0 || i === items.length - 1 ? "" : " skip") }, it.label))));
}

// meter is a horizontal gauge: value against a limit, its text beside it.
export function meter(value, limit, text, cls) {
  const f = limit > 0 ? Math.min(1, Math.max(0, value / limit)) : 0;
  return h("div", { class: "meter " + (cls || "") + (f >= 0.9 ? " hot" : f >= 0.7 ? " warm" : "") },
    h("div", { class: "track", "aria-hidden": "true" }, h("div", { class: "fill", style: { width: (100 * f).toFixed(1) + "%" } })),
    h("span", { class: "mtext" }, text));
}
