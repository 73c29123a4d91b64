// Live: the gateway's own counters, polled once a second (GET /ui/api/snapshot) while the
// page is visible; rates, percentiles and the last minute's histograms are differences
// between snapshots kept here (a minute of them). Elements are kept and updated in place, so
// that a button keeps its focus while the numbers change around it.
import { h, replace, fmt, fmtMs, fmtBytes, histDelta, quantile, counterDelta, batchBucketLabel } from "./util.js";
import { stacked, lines, bars, meter } from "./charts.js";

const KEEP = 61;          // snapshots kept: a minute of differences
const WINDOW = 10;        // seconds over which the headline percentiles and means are taken
const CHART_SLOTS = 60;

// OUTCOMES group the failure reasons of gateway_request_failures_total for the chart.
export const OUTCOMES = [
  { key: "ok", name: "served", reasons: null },
  { key: "refused", name: "refused", reasons: ["overloaded", "queue_full", "shed", "draining", "unavailable"] },
  { key: "timeout", name: "timed out", reasons: ["timeout"] },
  { key: "canceled", name: "client left", reasons: ["canceled"] },
  { key: "client", name: "bad request", reasons: ["bad_input", "not_found"] },
  { key: "error", name: "server error", reasons: ["internal"] },
];

const REFUSAL_STAGES = ["queue", "queue_time", "memory", "decode_queue", "deadline", "connections"];

export class Live {
  constructor(api, onSnapshot) {
    this.api = api;
    this.onSnapshot = onSnapshot;
    this.ring = [];
    this.cards = new Map();   // "name\0version" -> card elements
    this.entries = new Map(); // model name -> repository entry elements
    this.timer = 0;
    this.failures = 0;
    this.strip = document.getElementById("server-strip");
    this.cardsEl = document.getElementById("model-cards");
    this.modelsEl = document.getElementById("models");
    this.statusEl = document.getElementById("server-status");
    this.actionEl = document.getElementById("action-status");
    document.addEventListener("visibilitychange", () => (document.hidden ? this.stop() : this.start()));
  }

  start() {
    if (this.timer || document.hidden) return;
    this.timer = setTimeout(() => this.poll(), 0);
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = 0;
  }

  async poll() {
    const began = performance.now();
    try {
      const snap = await this.api.json("/ui/api/snapshot", { auth: true });
      this.failures = 0;
      this.push(snap);
      this.render();
      this.onSnapshot(snap);
    } catch (err) {
      this.failures++;
      this.statusEl.textContent = "cannot reach the gateway (" + err.message + "); trying again";
      this.statusEl.className = "bad";
    }
    if (!this.timer) return; // stopped meanwhile
    const wait = this.failures ? Math.min(5000, 1000 * this.failures) : Math.max(100, 1000 - (performance.now() - began));
    this.timer = setTimeout(() => this.poll(), wait);
  }

  push(snap) {
    this.ring.push(snap);
    if (this.ring.length > KEEP) this.ring.shift();
  }

  // at returns the snapshot about `seconds` before the newest (the oldest kept if none is that
  // old), by the server's clock.
  at(seconds) {
    const last = this.ring[this.ring.length - 1];
    for (let i = this.ring.length - 1; i >= 0; i--) if (last.time - this.ring[i].time >= seconds * 1000 - 200) return this.ring[i];
    return this.ring[0];
  }

  render() {
    const snap = this.ring[this.ring.length - 1];
    const sv = (snap.server && snap.server.values) || {};
    const ready = sv.ready === 1, live = sv.live === 1;
    this.statusEl.className = ready && live ? "ok" : "bad";
    this.statusEl.textContent = `gateway ${snap.version || ""} · ${ready ? "ready" : "not ready"} · ${live ? "live" : "not live: a batch run is hung"} · console on the ${snap.listener} listener`;
    this.renderServer(snap);
    this.renderCards(snap);
    this.renderModels(snap);
  }

  renderServer(snap) {
    const prev = this.ring.length > 1 ? this.ring[this.ring.length - 2] : null;
    const minute = this.at(60);
    const sv = snap.server.values || {};
    const by = snap.server.by || {};
    const refusals = REFUSAL_STAGES.map(st => [st, counterDelta((by.refusals_total || {})[st], ((minute.server.by || {}).refusals_total || {})[st])]);
    let cpu = null;
    if (prev && snap.process && prev.process && snap.process.values && prev.process.values) {
      const dt = (snap.time - prev.time) / 1000;
      if (dt > 0) cpu = counterDelta(snap.process.values.cpu_seconds_total, prev.process.values.cpu_seconds_total) / dt;
    }
    const unknown = sumValues(((snap.unknown || {}).by || {}).requests_total) - sumValues((((minute.unknown || {}).by) || {}).requests_total);
    replace(this.strip,
      tile("In-flight memory", meter(sv.inflight_bytes || 0, sv.inflight_bytes_limit || 0,
        fmtBytes(sv.inflight_bytes || 0) + " of " + fmtBytes(sv.inflight_bytes_limit || 0), "mem"), "server.max_inflight_bytes: bodies, decode buffers and input rows of the requests in flight"),
      tile("Decode workers", meter(sv.decode_busy || 0, sv.decode_workers || 0, `${fmt(sv.decode_busy || 0)} of ${fmt(sv.decode_workers || 0)} busy`),
        `${fmt(sv.decode_waiting || 0)} waiting (of ${fmt(sv.decode_queue_capacity || 0)}), ${fmt(sv.decode_incoming || 0)} still reading their bodies; predicted wait ${fmtMs((sv.decode_wait_predicted_seconds || 0) * 1000)}`),
      tile("In flight", h("p", { class: "big num" }, fmt(sv.inflight_requests || 0)),
        `requests; ${fmt(sv.connections || 0)} connections (${fmt(sv.connections_idle || 0)} idle)`),
      tile("Process", h("p", { class: "big num" }, cpu === null ? "–" : Math.round(cpu * 100) + " %"),
        "of one CPU; resident memory " + fmtBytes(((snap.process || {}).values || {}).resident_memory_bytes)),
      tile("Refusals, last minute", h("ul", { class: "chips" }, refusals.map(([st, n]) =>
        h("li", { class: n > 0 ? "hot" : "" }, h("span", {}, st.replace("_", " ")), " ", h("strong", { class: "num" }, fmt(n))))),
        "refused at once, by the bound that refused them (gateway_refusals_total)" + (unknown > 0 ? `; ${fmt(unknown)} requests for models not served` : "")));
  }

  renderCards(snap) {
    const seen = new Set();
    for (const m of snap.models) {
      if (!m.values) continue; // not loaded: listed under Models only
      const key = m.name + "\0" + m.version;
      seen.add(key);
      let c = this.cards.get(key);
      if (!c) {
        c = card(m);
        this.cards.set(key, c);
        this.cardsEl.append(c.root);
      }
      this.updateCard(c, key);
    }
    for (const [key, c] of this.cards) if (!seen.has(key)) { c.root.remove(); this.cards.delete(key); }
    if (!this.cards.size) replace(this.cardsEl, h("p", { class: "muted" }, "no model version is loaded"));
    else this.cardsEl.querySelectorAll(":scope > p.muted").forEach(p => p.remove());
  }

  // series returns a model version's snapshots, oldest first (undefined where it was absent).
  series(key) {
    return this.ring.map(s => ({ time: s.time, m: s.models.find(m => m.name + "\0" + m.version === key && m.values) }));
  }

  updateCard(c, key) {
    const pts = this.series(key);
    const last = pts[pts.length - 1].m;
    const lastTime = pts[pts.length - 1].time;
    // Per second: outcomes, latency percentiles (over the last WINDOW/2 s), queue length.
    const perSec = OUTCOMES.map(o => ({ cls: "o-" + o.key, values: [] }));
    const p50 = [], p99 = [], qlen = [];
    for (let i = 1; i < pts.length; i++) {
      const a = pts[i - 1], b = pts[i];
      const dt = (b.time - a.time) / 1000;
      const oc = outcomes(b.m, a.m);
      OUTCOMES.forEach((o, j) => perSec[j].values.push(dt > 0 && b.m ? oc[o.key] / dt : 0));
      const back = pts[Math.max(0, i - 5)];
      const d = b.m && histDelta(hist(b.m, "request_duration_seconds"), back.m && hist(back.m, "request_duration_seconds"));
      p50.push(d && d.count > 0 ? quantile(0.5, d) * 1000 : null);
      p99.push(d && d.count > 0 ? quantile(0.99, d) * 1000 : null);
      qlen.push(b.m ? b.m.values.queue_length || 0 : null);
    }
    const win = this.at(WINDOW);
    const wm = win.models.find(m => m.name + "\0" + m.version === key && m.values);
    const secs = Math.max(0.001, (lastTime - win.time) / 1000);
    const dur = histDelta(hist(last, "request_duration_seconds"), wm && hist(wm, "request_duration_seconds"));
    const qw = histDelta(hist(last, "queue_wait_seconds"), wm && hist(wm, "queue_wait_seconds"));
    const oc = outcomes(last, wm);
    const total = OUTCOMES.reduce((a, o) => a + oc[o.key], 0);
    // The headline rate: the last second (at least), by the server's clock.
    const sec = this.at(1);
    const sm = sec.models.find(m => m.name + "\0" + m.version === key && m.values);
    const secDt = (lastTime - sec.time) / 1000;
    const secOc = outcomes(last, sm);
    const nowRate = secDt > 0 ? OUTCOMES.reduce((a, o) => a + secOc[o.key], 0) / secDt : null;
    const v = last.values;
    const requests = sumValues((last.by || {}).requests_total);
    c.requests.textContent = fmt(requests);
    c.requests.dataset.count = String(requests);
    c.rate.textContent = nowRate === null ? "–" : fmt(nowRate);
    c.ok.textContent = fmt(oc.ok / secs) + " served/s, " + fmt((total - oc.ok) / secs) + " failed/s (last " + Math.round(secs) + " s)";
    c.p50.textContent = fmtMs(dur && dur.count ? quantile(0.5, dur) * 1000 : NaN);
    c.p99.textContent = fmtMs(dur && dur.count ? quantile(0.99, dur) * 1000 : NaN);
    c.queue.textContent = fmt(v.queue_length || 0) + " / " + fmt(v.queue_capacity || 0);
    c.queueWait.textContent = "wait " + (qw && qw.count ? fmtMs(1000 * qw.sum / qw.count) + " mean, p99 " + fmtMs(1000 * quantile(0.99, qw)) : "–") + "; " + fmt(v.pending_samples || 0) + " pending";
    const minute = this.at(60);
    const mm = minute.models.find(m => m.name + "\0" + m.version === key && m.values);
    const batches = counterDelta(v.batches_total, mm && mm.values.batches_total);
    const items = counterDelta(v.batch_items_total, mm && mm.values.batch_items_total);
    c.batch.textContent = batches > 0 ? fmt(items / batches) : "–";
    c.batchNote.textContent = "max " + fmt(v.max_batch_size || 0) + (v.adaptive_batch_cap ? ", adaptive cap " + fmt(v.adaptive_batch_cap) : "") + "; " + fmt(batches) + " runs in the last " + Math.round((lastTime - minute.time) / 1000) + " s";
    // Charts.
    replace(c.rateChart, stacked(perSec, CHART_SLOTS, "requests per second by outcome, the last minute", v => fmt(v) + "/s"));
    replace(c.legend, OUTCOMES.map(o => {
      const n = oc[o.key];
      return o.key === "ok" || n > 0 ? h("li", {}, h("span", { class: "swatch o-" + o.key, "aria-hidden": "true" }), o.name + " " + fmt(n / secs) + "/s") : null;
    }));
    replace(c.latChart, lines([{ cls: "p50", values: p50 }, { cls: "p99", values: p99 }], CHART_SLOTS, "latency p50 and p99 over 5-second windows, the last minute", fmtMs));
    replace(c.queueChart, lines([{ cls: "qlen", values: qlen }], CHART_SLOTS, "queue length, the last minute", fmt));
    replace(c.batchChart, batchHistogram(last, mm));
    replace(c.fails, failureList(last, mm));
    replace(c.stages, servedStages(last, wm, secs));
  }

  // renderModels lists every model of the repository with its versions' states, and the
  // load and unload buttons where this page may use the repository API.
  renderModels(snap) {
    const byName = new Map();
    for (const m of snap.models) {
      if (!byName.has(m.name)) byName.set(m.name, []);
      byName.get(m.name).push(m);
    }
    const canAct = snap.repository === "open" || (snap.repository === "token" && snap.authorized);
    for (const [name, vs] of byName) {
      let e = this.entries.get(name);
      if (!e) {
        e = entry(name, this);
        this.entries.set(name, e);
        this.modelsEl.append(e.root);
      }
      e.loaded = vs.some(v => v.values);
      e.note.textContent = vs.some(v => v.default) ? " · the default model of /predict/" : "";
      replace(e.versions, vs.map(v => h("li", { class: "st-" + v.state.toLowerCase() },
        h("span", { class: "vname" }, "version " + v.version), " ",
        h("span", { class: "state" }, v.state), v.newest ? " · newest" : "",
        v.instances ? " · " + v.instances + (v.instances === 1 ? " instance" : " instances") : "",
        v.reason ? h("span", { class: "reason" }, " · " + v.reason) : null)));
      e.actions.hidden = !canAct;
      e.unload.disabled = !e.loaded || e.busy;
      e.load.disabled = e.busy;
    }
    for (const [name, e] of this.entries) if (!byName.has(name)) { e.root.remove(); this.entries.delete(name); }
    const note = document.getElementById("repo-note");
    note.textContent = canAct ? "" : snap.repository === "none" ?
      "Loading and unloading are served on the admin listener (server.admin_listen), or here with an admin token configured (server.admin_token_file)." :
      "Give the admin token (top of the page) to load and unload models.";
  }

  async act(e, action) {
    if (action === "unload" && !e.confirming) {
      e.confirming = true;
      e.unload.textContent = "Confirm unload";
      e.unload.setAttribute("aria-label", "confirm: unload every version of " + e.name);
      e.confirmTimer = setTimeout(() => resetUnload(e), 5000);
      return;
    }
    resetUnload(e);
    e.busy = true;
    e.load.disabled = e.unload.disabled = true;
    this.actionEl.textContent = (action === "load" ? "loading " : "unloading ") + e.name + "…";
    try {
      const res = await this.api.post("/v2/repository/models/" + encodeURIComponent(e.name) + "/" + action);
      let msg = "";
      try { msg = (await res.json()).error || ""; } catch { /* empty answer */ }
      this.actionEl.textContent = res.ok ? `${e.name}: ${action === "load" ? "loaded" : "unloaded"}` : `${e.name}: ${action} failed (${res.status}) ${msg}`;
    } catch (err) {
      this.actionEl.textContent = `${e.name}: ${action} failed: ${err.message}`;
    } finally {
      e.busy = false;
    }
  }
}

function resetUnload(e) {
  clearTimeout(e.confirmTimer);
  e.confirming = false;
  e.unload.textContent = "Unload";
  e.unload.setAttribute("aria-label", "unload every version of " + e.name);
}

function entry(name, live) {
  const e = { name, busy: false, confirming: false };
  e.load = h("button", { type: "button", "aria-label": "load " + name + " from the repository", onclick: () => live.act(e, "load") }, "Load");
  e.unload = h("button", { type: "button", class: "danger", "aria-label": "unload every version of " + name, onclick: () => live.act(e, "unload") }, "Unload");
  e.unload.addEventListener("keydown", ev => { if (ev.key === "Escape") resetUnload(e); });
  e.unload.addEventListener("blur", () => setTimeout(() => { if (document.activeElement !== e.unload) resetUnload(e); }, 0));
  e.actions = h("span", { class: "actions" }, e.load, " ", e.unload);
  e.versions = h("ul", { class: "versions" });
  e.note = h("span", { class: "muted" });
  e.root = h("li", { class: "entry" }, h("div", { class: "ehead" }, h("span", {}, h("strong", {}, name), e.note), e.actions), e.versions);
  return e;
}

function card(m) {
  const c = {};
  const stat = (label, el, note) => h("div", { class: "stat" }, h("span", { class: "slabel" }, label), el, note || null);
  c.rate = h("span", { class: "big num" }, "–");
  c.ok = h("span", { class: "note" });
  c.p50 = h("span", { class: "big num" }, "–");
  c.p99 = h("span", { class: "big num" }, "–");
  c.queue = h("span", { class: "big num" }, "–");
  c.queueWait = h("span", { class: "note" });
  c.batch = h("span", { class: "big num" }, "–");
  c.batchNote = h("span", { class: "note" });
  c.requests = h("span", { class: "big num requests-total", "data-model": m.name, "data-version": m.version }, "–");
  c.rateChart = h("div", { class: "chartbox" });
  c.legend = h("ul", { class: "legend" });
  c.latChart = h("div", { class: "chartbox" });
  c.queueChart = h("div", { class: "chartbox" });
  c.batchChart = h("div", { class: "chartbox" });
  c.fails = h("div", {});
  c.stages = h("div", {});
  c.root = h("article", { class: "card", "aria-label": m.name + " version " + m.version },
    h("h3", {}, m.name, h("span", { class: "ver" }, " version " + m.version)),
    h("div", { class: "stats" },
      stat("requests/s", c.rate, c.ok),
      stat("p50 (last 10 s)", c.p50),
      stat("p99 (last 10 s)", c.p99),
      stat("queue", c.queue, c.queueWait),
      stat("mean batch (last minute)", c.batch, c.batchNote),
      stat("requests answered", c.requests, h("span", { class: "note" }, "since the version loaded"))),
    h("div", { class: "charts" },
      h("figure", {}, h("figcaption", {}, "Requests per second by outcome"), c.rateChart, c.legend),
      h("figure", {}, h("figcaption", {}, "Latency ", h("span", { class: "key p50" }, "p50"), " ", h("span", { class: "key p99" }, "p99"), " (every answer)"), c.latChart),
      h("figure", {}, h("figcaption", {}, "Batch sizes, last minute"), c.batchChart),
      h("figure", {}, h("figcaption", {}, "Queue length"), c.queueChart)),
    h("div", { class: "cardfoot" }, c.stages, c.fails));
  return c;
}

function hist(m, name) { return m && m.hist ? m.hist[name] : undefined; }

function sumValues(o) {
  let s = 0;
  for (const v of Object.values(o || {})) s += v;
  return s;
}

// outcomes counts a version's answers between two snapshots, by OUTCOMES key.
function outcomes(cur, old) {
  const out = {};
  for (const o of OUTCOMES) out[o.key] = 0;
  if (!cur) return out;
  out.ok = counterDelta(cur.values.request_success_total, old && old.values.request_success_total);
  const f = (cur.by || {}).request_failures_total || {};
  const of = old && old.by ? old.by.request_failures_total || {} : {};
  for (const o of OUTCOMES) {
    if (!o.reasons) continue;
    for (const r of o.reasons) out[o.key] += counterDelta(f[r], old ? of[r] : undefined);
  }
  return out;
}

// batchHistogram: the batch sizes run since `old`, exact from the statistics' executions per
// batch size, else in the metric's power-of-two buckets.
function batchHistogram(cur, old) {
  const max = cur.values.max_batch_size || 1;
  const st = cur.stats && cur.stats.batch_stats;
  if (st) {
    const prev = new Map(((old && old.stats && old.stats.batch_stats) || []).map(b => [b.batch_size, b.compute_infer.count]));
    const counts = new Map(st.map(b => [b.batch_size, counterDelta(b.compute_infer.count, prev.get(b.batch_size))]));
    const top = Math.max(max, ...counts.keys());
    const items = [];
    for (let n = 1; n <= top; n++) items.push({ label: String(n), value: counts.get(n) || 0 });
    const runs = items.reduce((a, i) => a + i.value, 0);
    return h("div", {}, bars(items, "batch runs by size, the last minute: " + items.filter(i => i.value).map(i => i.label + ": " + i.value).join(", ")),
      runs ? null : h("p", { class: "muted" }, "no batch ran in the last minute"));
  }
  const d = histDelta(hist(cur, "batch_size"), hist(old, "batch_size"));
  if (!d) return h("p", { class: "muted" }, "no batch sizes");
  const items = [];
  let prevCum = 0, prevLe = 0;
  for (let i = 0; i < d.le.length && prevLe < max; i++) {
    items.push({ label: batchBucketLabel(d.le[i], prevLe), value: d.counts[i] - prevCum });
    prevCum = d.counts[i];
    prevLe = d.le[i];
  }
  return bars(items, "batch runs by size, the last minute");
}

function failureList(cur, old) {
  const f = (cur.by || {}).request_failures_total || {};
  const of = (old && old.by && old.by.request_failures_total) || {};
  const rows = Object.keys(f).sort().map(r => [r, counterDelta(f[r], old ? of[r] : undefined), f[r]]).filter(([, n, t]) => n > 0 || t > 0);
  return h("div", { class: "fails" }, h("h4", {}, "Failures by reason"),
    rows.length ? h("ul", { class: "chips" }, rows.map(([r, n, t]) => h("li", { class: n > 0 ? "hot" : "" },
      h("span", {}, r.replace("_", " ")), " ", h("strong", { class: "num" }, fmt(n)), h("span", { class: "muted" }, " last minute, " + fmt(t) + " in all"))))
      : h("p", { class: "muted" }, "none since the version loaded"));
}

// servedStages: where a served request's time went on average over the window, from the
// statistics (queue: decode worker and batch queue; input: parse, decode, tensor fill;
// infer: its batch's run; output: scores and the answer).
function servedStages(cur, old, secs) {
  const s = cur.stats && cur.stats.inference_stats;
  if (!s) return null;
  const o = old && old.stats && old.stats.inference_stats;
  const n = counterDelta(s.success.count, o && o.success.count);
  const parts = [["queue", "queue"], ["compute_input", "input"], ["compute_infer", "infer"], ["compute_output", "output"]]
    .map(([k, name]) => [name, n > 0 ? counterDelta(s[k].ns, o && o[k].ns) / n / 1e6 : 0]);
  const total = n > 0 ? counterDelta(s.success.ns, o && o.success.ns) / n / 1e6 : 0;
  return h("div", { class: "served" }, h("h4", {}, "A served request, on average (last " + Math.round(secs) + " s)"),
    n > 0 ? h("p", {}, parts.map(([name, ms]) => h("span", { class: "part" }, name + " ", h("strong", { class: "num" }, fmtMs(ms)), " ")),
      "· total ", h("strong", { class: "num" }, fmtMs(total))) : h("p", { class: "muted" }, "no request served in the window"));
}

function tile(title, body, note) {
  return h("div", { class: "tile" }, h("h3", {}, title), body, note ? h("p", { class: "note" }, note) : null);
}
