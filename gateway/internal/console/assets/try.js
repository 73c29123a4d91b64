// Try it: pick a served model and version, drop, pick or paste a photo, and read the answer
// as the model's task gives it, with the request's stage times (Server-Timing) and its ID.
import {
  h, replace, fmt, fmtMs, pct, parseServerTiming, waterfall, softmax, topK, cosine, vectorSummary, taskOf,
  parseClassification,
} from "./util.js";

const TASK_NAMES = { classify: "classification", detect: "detection", embed: "embedding" };
const TOP_K = 5;

export class TryIt {
  constructor(api) {
    this.api = api;
    this.model = document.getElementById("model");
    this.version = document.getElementById("version");
    this.taskEl = document.getElementById("task");
    this.result = document.getElementById("result");
    this.timing = document.getElementById("timing");
    this.slots = [0, 1].map(i => this.slot(i));
    this.served = new Map(); // name -> [{version, newest}], newest first
    this.signature = "";
    this.desc = new Map(); // "name\0version" -> {task, input, output, classes} or a promise
    this.current = null; // the description of the selected version
    this.results = [null, null];
    this.model.addEventListener("change", () => this.modelChanged());
    this.version.addEventListener("change", () => this.describe());
    document.addEventListener("paste", e => this.pasted(e));
  }

  // slot wires photo input i (0; 1 is the second photo of an embedding comparison).
  slot(i) {
    const root = document.getElementById("drop" + i);
    const input = document.getElementById("file" + i);
    const again = root.querySelector("button.again");
    const s = { i, root, input, again, file: null, url: null, img: root.querySelector("img"), overlay: root.querySelector("svg.boxes") };
    input.addEventListener("change", () => { if (input.files && input.files[0]) this.choose(s, input.files[0]); });
    again.addEventListener("click", () => this.send(s));
    root.addEventListener("dragover", e => { e.preventDefault(); root.classList.add("over"); });
    root.addEventListener("dragleave", () => root.classList.remove("over"));
    root.addEventListener("drop", e => {
      e.preventDefault();
      root.classList.remove("over");
      const f = e.dataTransfer && e.dataTransfer.files && e.dataTransfer.files[0];
      if (f) this.choose(s, f);
    });
    s.img.addEventListener("load", () => this.drawBoxes(s));
    return s;
  }

  // setModels takes the served versions from a live snapshot; the selects are rebuilt only
  // when that set changes (rebuilding them every second would close an open one).
  setModels(models) {
    const served = new Map();
    for (const m of models) {
      if (m.state !== "READY" || !m.values) continue;
      if (!served.has(m.name)) served.set(m.name, []);
      served.get(m.name).push({ version: m.version, newest: !!m.newest, default: !!m.default });
    }
    for (const vs of served.values()) vs.reverse(); // newest first
    const sig = JSON.stringify([...served]);
    if (sig === this.signature) return;
    this.signature = sig;
    this.served = served;
    const keep = this.model.value;
    let pick = served.has(keep) ? keep : "";
    if (!pick) for (const [name, vs] of served) if (vs.some(v => v.default)) pick = name;
    if (!pick && served.size) pick = served.keys().next().value;
    replace(this.model, [...served.keys()].map(n => h("option", { value: n, selected: n === pick }, n)));
    if (!served.size) replace(this.model, h("option", { value: "" }, "no model is served"));
    this.model.disabled = !served.size;
    this.fillVersions();
  }

  modelChanged() { this.fillVersions(); }

  fillVersions() {
    const vs = this.served.get(this.model.value) || [];
    const keep = this.version.value;
    const pick = vs.some(v => v.version === keep) ? keep : (vs[0] && vs[0].version);
    replace(this.version, vs.map(v => h("option", { value: v.version, selected: v.version === pick }, v.version + (v.newest ? " (newest)" : ""))));
    this.version.disabled = !vs.length;
    this.describe();
  }

  // isNewest: d is the version a request without one gets (the article's API serves it).
  isNewest(d) {
    const vs = this.served.get(d.name) || [];
    return vs.length > 0 && vs[0].version === d.version;
  }

  // describe reads the selected version's metadata and configuration: its task, its input and
  // output names and its classes.
  async describe() {
    const name = this.model.value, version = this.version.value;
    if (!name || !version) { this.current = null; this.showTask(); return; }
    const key = name + "\0" + version;
    if (!this.desc.has(key)) {
      const base = "/v2/models/" + encodeURIComponent(name) + "/versions/" + encodeURIComponent(version);
      this.desc.set(key, Promise.all([this.api.json(base), this.api.json(base + "/config")]).then(([meta, config]) => {
        const task = taskOf(config, meta);
        // An embedding model's vector is its embed.output (the pooled features beside the
        // logits, say), which need not be its first output.
        const vec = task === "embed" ? configWord(config, "embed.output") : "";
        const out = (meta.outputs || []).find(o => o.name === vec) || (meta.outputs && meta.outputs[0]) || {};
        const d = {
          name, version, task,
          input: meta.inputs && meta.inputs[0] && meta.inputs[0].name,
          output: out.name, classes: out.shape ? out.shape[out.shape.length - 1] : 0,
        };
        this.desc.set(key, d);
        return d;
      }).catch(err => { this.desc.delete(key); throw err; }));
    }
    try {
      const d = await this.desc.get(key);
      if (this.model.value === name && this.version.value === version) { this.current = d; this.showTask(); }
    } catch (err) {
      this.current = null;
      this.showTask("cannot read the model's description: " + err.message);
    }
  }

  showTask(problem) {
    const d = this.current;
    const embed = d && d.task === "embed";
    this.taskEl.textContent = problem || (d ? TASK_NAMES[d.task] : "");
    this.slots[1].root.hidden = !embed;
    this.slots[0].root.querySelector(".slotname").textContent = embed ? "Photo A" : "Photo";
    if (!embed) this.results[1] = null;
  }

  pasted(e) {
    const items = e.clipboardData && e.clipboardData.files;
    if (!items || !items.length || !items[0].type.startsWith("image/")) return;
    const target = this.slots[1].root.contains(document.activeElement) && !this.slots[1].root.hidden ? this.slots[1] : this.slots[0];
    this.choose(target, items[0]);
  }

  choose(s, file) {
    s.file = file;
    s.dets = null;
    if (s.url) URL.revokeObjectURL(s.url);
    s.url = URL.createObjectURL(file);
    s.img.src = s.url;
    s.img.alt = "the photo sent: " + (file.name || "pasted image");
    s.root.querySelector(".fname").textContent = (file.name || "pasted image") + " · " + fmt(file.size / 1024) + " KiB";
    replace(s.overlay);
    s.again.disabled = false;
    this.send(s);
  }

  // send posts the slot's photo to the selected version: /models/{name}/predict for the
  // newest (the article's API, answering as the task does), the Open Inference Protocol for
  // another version.
  async send(s) {
    if (!s.file) return;
    let d = this.current;
    if (!d || d.name !== this.model.value || d.version !== this.version.value) { await this.describe(); d = this.current; }
    if (!d) return;
    const newest = this.isNewest(d);
    replace(this.result, h("p", { class: "pending" }, "sending " + (s.file.name || "the photo") + " to " + d.name + " version " + d.version + "…"));
    const started = performance.now();
    let res, body, endpoint;
    try {
      if (newest) {
        endpoint = "/models/" + encodeURIComponent(d.name) + "/predict" + (d.task === "classify" ? "?top_k=" + TOP_K : "");
        res = await fetch(endpoint, { method: "POST", headers: { "Content-Type": s.file.type || "application/octet-stream" }, body: s.file });
      } else {
        endpoint = "/v2/models/" + encodeURIComponent(d.name) + "/versions/" + encodeURIComponent(d.version) + "/infer";
        const req = { inputs: [{ name: d.input, shape: [1], datatype: "BYTES", data: [await base64(s.file)] }] };
        // A detector's raw outputs are its anchors: ask for its detections (the outputs the
        // metadata's "detections" property names) instead.
        if (d.task === "detect") req.parameters = { detections: true };
        else req.outputs = [d.task === "classify" ? { name: d.output, parameters: { classification: d.classes } } : { name: d.output }];
        res = await fetch(endpoint, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(req) });
      }
      const text = await res.text();
      try { body = JSON.parse(text); } catch { body = { error: text.slice(0, 500) || "(an empty answer)" }; }
    } catch (err) {
      replace(this.result, h("p", { class: "error", role: "alert" }, "the request failed: " + err.message));
      return;
    }
    const rtt = performance.now() - started;
    const r = {
      slot: s.i, file: s.file, status: res.status, endpoint, newest, desc: d, rtt,
      timing: parseServerTiming(res.headers.get("Server-Timing")), id: res.headers.get("X-Request-ID") || "",
      answer: res.ok ? (newest ? body : fromV2(body, d)) : null, error: res.ok ? "" : (body && body.error) || res.statusText,
    };
    this.results[s.i] = r;
    this.render(r);
  }

  render(r) {
    const head = h("p", { class: "said" },
      h("span", { class: "status " + (r.status < 400 ? "ok" : "bad") }, String(r.status)), " ",
      h("code", {}, "POST " + r.endpoint), " · ", r.desc.name, " version ", r.desc.version);
    if (r.error) {
      replace(this.result, head, h("p", { class: "error", role: "alert" }, r.error));
    } else {
      const a = r.answer || {};
      let body;
      if (Array.isArray(a.detections)) body = this.renderDetections(r, a.detections);
      else if (Array.isArray(a.embedding)) body = this.renderEmbeddings();
      else if (a.top_k || a.prediction !== undefined) body = renderClasses(a);
      else body = h("pre", { class: "raw" }, JSON.stringify(a, null, 1).slice(0, 4000));
      replace(this.result, head, body);
    }
    this.renderTiming(r);
  }

  renderDetections(r, dets) {
    const s = this.slots[r.slot];
    s.dets = dets;
    this.drawBoxes(s);
    if (!dets.length) return h("p", { class: "prediction" }, "no detection above the model's score threshold");
    return h("div", {},
      h("p", { class: "prediction" }, dets.length + (dets.length === 1 ? " detection" : " detections")),
      h("ol", { class: "dets" }, dets.map((d, i) => h("li", {},
        h("span", { class: "swatch c" + (i % 6), "aria-hidden": "true" }),
        h("span", { class: "label" }, d.label), " ", h("span", { class: "num" }, pct(d.score)), " ",
        h("span", { class: "box" }, "[" + (d.box || []).map(v => Math.round(v)).join(", ") + "]")))));
  }

  // drawBoxes draws a slot's detections over its photo, in the photo's own pixels (the
  // overlay's viewBox is the image's natural size: the answer's coordinates are the
  // original image's).
  drawBoxes(s) {
    const dets = s.dets, img = s.img;
    if (!dets || !img.naturalWidth) { replace(s.overlay); return; }
    const w = img.naturalWidth, hgt = img.naturalHeight;
    s.overlay.setAttribute("viewBox", `0 0 ${w} ${hgt}`);
    const fs = Math.max(12, Math.round(Math.max(w, hgt) / 40));
    replace(s.overlay, dets.map((d, i) => {
      const [x1, y1, x2, y2] = d.box || [0, 0, 0, 0];
      const text = d.label + " " + Math.round(d.score * 100) + "%";
      const ty = y1 > fs * 1.3 ? y1 - fs * 0.3 : y1 + fs * 1.05;
      return h("g", { class: "det c" + (i % 6) },
        h("rect", { x: x1, y: y1, width: Math.max(0, x2 - x1), height: Math.max(0, y2 - y1), "vector-effect": "non-scaling-stroke" }),
        h("rect", { class: "tag", x: x1, y: ty - fs, width: text.length * fs * 0.6, height: fs * 1.25 }),
        h("text", { x: x1 + fs * 0.25, y: ty, "font-size": fs }, text));
    }));
    // Each label's tag as wide as its text as drawn.
    for (const g of s.overlay.querySelectorAll("g.det")) {
      const text = g.querySelector("text"), tag = g.querySelector("rect.tag");
      try { tag.setAttribute("width", (text.getComputedTextLength() + fs * 0.5).toFixed(1)); } catch { /* not rendered (hidden) */ }
    }
  }

  renderEmbeddings() {
    const [a, b] = this.results.map(r => r && r.answer && Array.isArray(r.answer.embedding) ? r.answer.embedding : null);
    const sum = (v, name) => {
      if (!v) return h("div", { class: "emb" }, h("h4", {}, name), h("p", { class: "muted" }, name === "Photo B" ? "pick a second photo to compare" : "no vector yet"));
      const st = vectorSummary(v);
      return h("div", { class: "emb" }, h("h4", {}, name),
        h("dl", {},
          h("dt", {}, "dimensions"), h("dd", { class: "dim" }, String(st.dim)),
          h("dt", {}, "L2 norm"), h("dd", {}, fmt(st.norm)),
          h("dt", {}, "min / mean / max"), h("dd", {}, fmt(st.min) + " / " + fmt(st.mean) + " / " + fmt(st.max)),
          h("dt", {}, "first values"), h("dd", { class: "mono" }, v.slice(0, 6).map(x => fmt(x)).join(", ") + (v.length > 6 ? ", …" : ""))),
        strip(v));
    };
    const c = cosine(a, b);
    return h("div", { class: "embeddings" },
      h("div", { class: "embpair" }, sum(a, "Photo A"), sum(b, "Photo B")),
      c === null ? (a && b ? h("p", { class: "error" }, "the two vectors differ in length") : null) :
        h("p", { class: "cosine" }, "cosine similarity ", h("strong", { class: "num", id: "cosine" }, c.toFixed(4))));
  }

  renderTiming(r) {
    const w = waterfall(r.timing);
    const rows = w.stages.map(st => h("div", { class: "wf-row" },
      h("span", { class: "wf-name" }, st.stage),
      h("span", { class: "wf-track", "aria-hidden": "true" },
        h("span", { class: "wf-bar st-" + st.stage, style: { left: pctOf(st.start, w.total), width: pctOf(st.dur, w.total) } })),
      h("span", { class: "wf-ms num" }, fmtMs(st.dur))));
    replace(this.timing,
      h("h3", {}, "Where its time went"),
      h("div", { class: "wf", role: "table", "aria-label": "stage times from Server-Timing" }, rows),
      h("p", { class: "wf-total" }, "server total ", h("strong", { class: "num" }, fmtMs(w.total)),
        " · round trip in the browser ", h("span", { class: "num" }, fmtMs(r.rtt))),
      h("p", { class: "rid" }, "request ID ", h("code", { id: "request-id" }, r.id || "(none)"), " ",
        r.id ? h("button", { type: "button", class: "small", onclick: e => copy(r.id, e.target) }, "Copy") : null),
      h("p", { class: "curl" }, h("span", { class: "muted" }, "the same from a shell: "),
        h("code", {}, curlLine(r))));
  }
}

function pctOf(v, total) { return (total > 0 ? (100 * v / total) : 0).toFixed(2) + "%"; }

function renderClasses(a) {
  const top = a.top_k || [];
  return h("div", {},
    h("p", { class: "prediction" }, h("span", { class: "muted" }, "prediction "), h("strong", { id: "prediction" }, a.prediction ?? (top[0] && top[0].label) ?? "")),
    top.length ? h("ol", { class: "topk", "aria-label": "top classes with their probabilities" }, top.map(t => h("li", {},
      h("span", { class: "label" }, t.label),
      h("span", { class: "pbar", "aria-hidden": "true" }, h("span", { style: { width: (Math.max(0, Math.min(1, t.score)) * 100).toFixed(2) + "%" } })),
      h("span", { class: "num" }, pct(t.score))))) : null);
}

// fromV2 turns an Open Inference Protocol answer into the predict API's shape: the
// classification strings (every class) into the top classes' softmax probabilities, a vector
// into an embedding.
function fromV2(body, d) {
  const outs = body.outputs || [];
  const named = n => outs.find(o => o.name === n);
  if (d.task === "detect" && named("detection_boxes")) {
    // One image: detection_boxes [1, n, 4] in its pixels, detection_scores and
    // detection_labels [1, n]; num_detections [1] says how many of the n are real.
    const boxes = named("detection_boxes").data || [], scores = (named("detection_scores") || {}).data || [];
    const labels = (named("detection_labels") || {}).data || [], num = named("num_detections");
    const n = num && num.data && num.data.length ? Number(num.data[0]) : scores.length;
    const dets = [];
    for (let i = 0; i < n; i++) dets.push({ label: labels[i] ?? "", score: scores[i], box: boxes.slice(4 * i, 4 * i + 4) });
    return { detections: dets };
  }
  const out = named(d.output) || outs[0];
  if (!out) return body;
  if (d.task === "classify" && out.datatype === "BYTES") {
    const cls = parseClassification(out.data);
    const p = softmax(cls.map(c => c.score));
    const top = topK(p, TOP_K).map(i => ({ index: cls[i].index, label: cls[i].label, score: p[i] }));
    return { prediction: top[0] && top[0].label, top_k: top };
  }
  if (d.task === "embed" && out.datatype === "FP32") return { embedding: out.data };
  return body;
}

// configWord is the first word of a configuration parameter's string_value ("features
// (model)" -> "features").
function configWord(config, key) {
  const p = config && config.parameters && config.parameters[key];
  const v = p && typeof p.string_value === "string" ? p.string_value : "";
  return v.trim().split(/\s/)[0] || "";
}

function strip(v) {
  const n = Math.min(v.length, 128);
  const per = v.length / n;
  let mx = 0;
  for (const x of v) mx = Math.max(mx, Math.abs(x));
  const cells = [];
  for (let i = 0; i < n; i++) {
    let s = 0;
    const a = Math.floor(i * per), b = Math.max(a + 1, Math.floor((i + 1) * per));
    for (let j = a; j < b; j++) s += v[j];
    const m = s / (b - a);
    cells.push(h("rect", { x: i, y: 0, width: 1, height: 1, class: m >= 0 ? "pos" : "neg", "fill-opacity": mx > 0 ? (Math.abs(m) / mx).toFixed(3) : 0 }));
  }
  return h("svg", { class: "strip", viewBox: `0 0 ${n} 1`, preserveAspectRatio: "none", role: "img", "aria-label": "the vector's values, averaged in " + n + " cells" }, cells);
}

function base64(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result).replace(/^data:[^,]*,/, ""));
    r.onerror = () => reject(r.error);
    r.readAsDataURL(file);
  });
}

function curlLine(r) {
  const origin = location.origin;
  const name = r.file && r.file.name ? r.file.name.replace(/'/g, "") : "photo.jpg";
  if (r.endpoint.startsWith("/v2/")) return "curl -H 'Content-Type: application/json' -d @request.json '" + origin + r.endpoint + "'";
  return "curl -H 'Content-Type: " + ((r.file && r.file.type) || "application/octet-stream") + "' --data-binary @'" + name + "' '" + origin + r.endpoint + "'";
}

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = "Copied";
  } catch {
    const sel = window.getSelection(), range = document.createRange();
    range.selectNodeContents(document.getElementById("request-id"));
    sel.removeAllRanges();
    sel.addRange(range);
    button.textContent = "Selected: Ctrl+C";
  }
}
