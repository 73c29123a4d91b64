// Pure helpers of the console: DOM building that never parses HTML, number formatting, the
// Server-Timing header, histogram arithmetic over cumulative snapshots, vectors. No state.

// h builds an element: h("div", {class: "x", onclick: f}, "text", child, ...). Attribute
// values and children are set as properties and text, never parsed as HTML.
export function h(tag, attrs, ...children) {
  const svg = SVG_TAGS.has(tag);
  const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "style" && typeof v === "object") for (const [p, pv] of Object.entries(v)) el.style.setProperty(p, pv);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

const SVG_TAGS = new Set(["svg", "g", "rect", "line", "polyline", "path", "text", "title", "circle"]);

// replace puts children in place of el's.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// fmt: a number with about 3 significant digits.
export function fmt(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (Number.isInteger(v)) return v.toLocaleString("en-US");
  if (a >= 100) return Math.round(v).toLocaleString("en-US");
  if (a >= 10) return v.toFixed(1);
  if (a >= 1) return v.toFixed(2);
  if (a >= 0.01) return v.toFixed(3);
  return v.toPrecision(2);
}

// fmtMs: a duration given in milliseconds.
export function fmtMs(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "–";
  if (ms >= 1000) return fmt(ms / 1000) + " s";
  if (ms >= 1) return fmt(ms) + " ms";
  return fmt(ms * 1000) + " µs";
}

// fmtBytes: a size in bytes (binary prefixes, as the configuration's sizes).
export function fmtBytes(b) {
  if (!Number.isFinite(b)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(b) >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i === 0 ? String(Math.round(b)) : fmt(b)) + " " + units[i];
}

export function pct(p) {
  if (!Number.isFinite(p)) return "–";
  if (p >= 0.9995) return "100 %";
  if (p >= 0.1) return (p * 100).toFixed(1) + " %";
  if (p >= 0.001) return (p * 100).toFixed(2) + " %";
  return "< 0.1 %";
}

// STAGES are the Server-Timing entries of a request, in the order they follow one another,
// and "answer": what the total has beyond them (admission, parsing, writing the answer).
export const STAGES = ["read", "decode", "queue", "run", "answer"];

// parseServerTiming reads `read;dur=0.4, decode;dur=6.8, ...` into {read: 0.4, ...} (ms).
export function parseServerTiming(header) {
  const out = {};
  if (!header) return out;
  for (const part of header.split(",")) {
    const [name, ...params] = part.trim().split(";");
    if (!name) continue;
    for (const p of params) {
      const [k, v] = p.trim().split("=");
      if (k === "dur" && v !== undefined && Number.isFinite(Number(v))) out[name.trim()] = Number(v);
    }
  }
  return out;
}

// waterfall lays the stages out one after another: [{stage, start, dur}] in ms, "answer"
// being the rest of the total (never negative).
export function waterfall(t) {
  const out = [];
  let at = 0;
  for (const s of STAGES.slice(0, 4)) {
    const d = Math.max(0, t[s] || 0);
    out.push({ stage: s, start: at, dur: d });
    at += d;
  }
  const total = Number.isFinite(t.total) ? t.total : at;
  out.push({ stage: "answer", start: at, dur: Math.max(0, total - at) });
  return { stages: out, total: Math.max(total, at) };
}

// histDelta is the histogram of what was observed between two snapshots of a cumulative
// one (old may be missing: everything since it started). A count that went down means the
// series started again (a model reloaded): the newer one is then the delta.
export function histDelta(cur, old) {
  if (!cur) return null;
  if (!old || old.counts.length !== cur.counts.length || old.count > cur.count) {
    return { le: cur.le, counts: cur.counts.slice(), sum: cur.sum, count: cur.count };
  }
  const counts = cur.counts.map((c, i) => Math.max(0, c - old.counts[i]));
  return { le: cur.le, counts, sum: Math.max(0, cur.sum - old.sum), count: Math.max(0, cur.count - old.count) };
}

// quantile estimates the q-quantile of a cumulative histogram as Prometheus'
// histogram_quantile does: linear within the bucket that holds it, the highest finite
// bound when it falls in +Inf. null without observations.
export function quantile(q, h) {
  if (!h) return null;
  const total = h.counts[h.counts.length - 1];
  if (!(total > 0)) return null;
  const rank = q * total;
  let prevCount = 0, prevBound = 0;
  for (let i = 0; i < h.le.length; i++) {
    if (h.counts[i] >= rank) {
      const inBucket = h.counts[i] - prevCount;
      const lower = i === 0 && h.le[0] > 0 ? 0 : prevBound;
      if (inBucket <= 0) return h.le[i];
      return lower + (h.le[i] - lower) * ((rank - prevCount) / inBucket);
    }
    prevCount = h.counts[i];
    prevBound = h.le[i];
  }
  return h.le[h.le.length - 1];
}

// counterDelta is how much a counter grew between two snapshots (a reset counts from 0).
export function counterDelta(cur, old) {
  if (cur === undefined) return 0;
  if (old === undefined || cur < old) return cur;
  return cur - old;
}

// softmax of raw scores (as the gateway's top_k computes them).
export function softmax(xs) {
  let mx = -Infinity;
  for (const x of xs) mx = Math.max(mx, x);
  const e = xs.map(x => Math.exp(x - mx));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map(x => x / s);
}

// topK returns the indices of the k largest values, largest first (ties: lower index).
export function topK(xs, k) {
  return xs.map((v, i) => i).sort((a, b) => xs[b] - xs[a] || a - b).slice(0, k);
}

// cosine similarity of two vectors of one length (null otherwise).
export function cosine(a, b) {
  if (!a || !b || a.length !== b.length || a.length === 0) return null;
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  if (na === 0 || nb === 0) return null;
  return dot / Math.sqrt(na * nb);
}

// vectorSummary: what a user reads of an embedding at a glance.
export function vectorSummary(v) {
  let min = Infinity, max = -Infinity, sum = 0, sq = 0, zeros = 0;
  for (const x of v) {
    min = Math.min(min, x); max = Math.max(max, x); sum += x; sq += x * x;
    if (x === 0) zeros++;
  }
  const n = v.length;
  const mean = n ? sum / n : NaN;
  return { dim: n, norm: Math.sqrt(sq), min, max, mean, std: n ? Math.sqrt(Math.max(0, sq / n - mean * mean)) : NaN, zeros };
}

// taskOf reads a model's task from its configuration's parameters or its metadata's properties
// ("task": "detect (model)" and the like); classification when neither says.
export function taskOf(config, metadata) {
  const raw = paramString(config && config.parameters && config.parameters.task) ||
    paramString(metadata && metadata.properties && metadata.properties.task) || "";
  const t = raw.trim().split(/[\s(]/)[0].toLowerCase();
  if (t.startsWith("detect")) return "detect";
  if (t.startsWith("embed")) return "embed";
  return "classify";
}

function paramString(p) {
  if (p === undefined || p === null) return "";
  if (typeof p === "string") return p;
  if (typeof p === "object" && typeof p.string_value === "string") return p.string_value;
  return "";
}

// batchBucketLabel names a power-of-two bucket of batch sizes: 1, 2, 3–4, 5–8, ...
export function batchBucketLabel(le, prev) {
  const lo = Math.floor(prev) + 1;
  return lo >= le ? String(le) : lo + "–" + le;
}

// parseClassification reads Triton's classification strings "<score>:<index>:<label>".
export function parseClassification(strings) {
  return strings.map(s => {
    const a = s.indexOf(":"), b = s.indexOf(":", a + 1);
    return { score: Number(s.slice(0, a)), index: Number(s.slice(a + 1, b)), label: s.slice(b + 1) };
  });
}
