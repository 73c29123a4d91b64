'use strict';
// Baseline peer for imagegate's benchmarks: the service a typical Node.js team would write.
// node:http + node:cluster (one worker per core), sharp (libvips) to decode and resize,
// onnxruntime-node to run the model, one image per inference call (no batching).
//
// API (same as the article's services):
//   GET  /          -> {"status":"healthy","message":"Node.js model service is running."}
//   POST /predict/  {"image":"<base64 JPEG/PNG/...>"} -> {"prediction":"<label>"}
// and, for the other tasks the gateway serves (TASK), the gateway's answers:
//   TASK=embed:  -> {"embedding":[...]}: the model's first output (or OUTPUT) for the image,
//                   L2-normalized with NORMALIZE=1; preprocessing as the classifier's.
//   TASK=detect: -> {"detections":[{"label","score","box":[x1,y1,x2,y2]}]}: an SSD-style
//                   model's boxes (normalized corners) and scores (class 0 the background),
//                   decoded here: EXIF orientation applied, stretched to DETECT_WIDTH x
//                   DETECT_HEIGHT (320x240), (x/255-MEAN)/STD (ultraface's 127/255, 128/255),
//                   per-class greedy NMS (SCORE 0.7, IOU 0.3, MAX_DETECTIONS 100), boxes scaled
//                   to the photo and clipped: the work the gateway does for such a model.
//
// Environment: PORT (8080), WORKERS (one per core), MODEL (the repository's default model),
// LABELS (labels.txt next to MODEL), MAX_BODY_BYTES (32 MiB), TASK (classify), FULL_DECODE
// (1: decode the whole image at full size before resizing, as the gateway's embed task does
// by default; otherwise sharp's shrink-on-load may decode a large JPEG at a reduced scale),
// and the task's settings above.
const cluster = require('node:cluster');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');

const PORT = Number(process.env.PORT || process.argv[2] || 8080);
const WORKERS = Number(process.env.WORKERS || os.availableParallelism());
const MODEL = process.env.MODEL ||
  path.join(__dirname, '..', '..', 'models', 'mobilenet_v3_small', 'model.onnx');
const LABELS = process.env.LABELS || path.join(path.dirname(MODEL), 'labels.txt');
const MAX_BODY_BYTES = Number(process.env.MAX_BODY_BYTES || 32 << 20);
const TASK = process.env.TASK || 'classify';
const FULL_DECODE = process.env.FULL_DECODE === '1';
if (!['classify', 'embed', 'detect'].includes(TASK)) throw new Error(`TASK must be classify, embed or detect, got ${TASK}`);
const env3 = (name, dflt) => (process.env[name] ? process.env[name].split(',').map(Number) : dflt);
const DETECT = {
  width: Number(process.env.DETECT_WIDTH || 320),
  height: Number(process.env.DETECT_HEIGHT || 240),
  mean: env3('MEAN', [127 / 255, 127 / 255, 127 / 255]),
  std: env3('STD', [128 / 255, 128 / 255, 128 / 255]),
  score: Number(process.env.SCORE || 0.7),
  iou: Number(process.env.IOU || 0.3),
  max: Number(process.env.MAX_DETECTIONS || 100),
};

// Preprocessing of torchvision's MobileNet_V3_Small_Weights.DEFAULT.transforms().
const RESIZE = 256;
const CROP = 224;
const MEAN = [0.485, 0.456, 0.406];
const STD = [0.229, 0.224, 0.225];

if (cluster.isPrimary) {
  console.log(`primary ${process.pid}: ${WORKERS} workers, port ${PORT}, model ${MODEL}`);
  for (let i = 0; i < WORKERS; i++) cluster.fork();
  cluster.on('exit', (worker, code, signal) => {
    console.error(`worker ${worker.process.pid} exited (code ${code}, signal ${signal})`);
  });
  const stop = () => {
    for (const id in cluster.workers) cluster.workers[id].kill('SIGTERM');
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
} else {
  startWorker().catch((err) => {
    console.error(`worker ${process.pid}: cannot start: ${err.stack || err}`);
    process.exit(1);
  });
}

async function startWorker() {
  const ort = require('onnxruntime-node');
  const sharp = require('sharp');
  sharp.concurrency(1); // one worker process per core already
  // Labels are the classifier's (required) and the detector's (optional: class indices).
  let labels = [];
  if (TASK === 'classify' || fs.existsSync(LABELS)) {
    labels = fs.readFileSync(LABELS, 'utf8').split('\n').map((s) => s.trim()).filter(Boolean);
  }
  const session = await ort.InferenceSession.create(MODEL, {
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const inputName = session.inputNames[0];
  const outputName = process.env.OUTPUT || session.outputNames[0];

  // source: the pipeline a resize starts from, turned by the EXIF orientation where rotate. By
  // default the encoded image, so that libvips may decode a large JPEG at a reduced DCT scale
  // (shrink-on-load); with FULL_DECODE=1 its pixels decoded at full size first, as the
  // gateway's embed task does by default.
  async function source(bytes, rotate) {
    if (!FULL_DECODE) return rotate ? sharp(bytes).rotate() : sharp(bytes);
    const full = rotate ? sharp(bytes).rotate() : sharp(bytes);
    const { data, info } = await full
      .removeAlpha()
      .toColourspace('srgb')
      .raw()
      .toBuffer({ resolveWithObject: true });
    return sharp(data, { raw: { width: info.width, height: info.height, channels: info.channels } });
  }

  async function preprocess(bytes) {
    const meta = await sharp(bytes).metadata();
    if (!meta.width || !meta.height) throw new HttpError(400, 'cannot read image dimensions');
    // Shorter side to RESIZE (torchvision truncates the longer side), no EXIF rotation (PIL
    // does not apply it either), then the centre CROP x CROP.
    let w; let h;
    if (meta.width <= meta.height) {
      w = RESIZE; h = Math.floor((RESIZE * meta.height) / meta.width);
    } else {
      h = RESIZE; w = Math.floor((RESIZE * meta.width) / meta.height);
    }
    const left = Math.round((w - CROP) / 2);
    const top = Math.round((h - CROP) / 2);
    const { data, info } = await (await source(bytes, false))
      .resize(w, h, { fit: 'fill', kernel: sharp.kernel.linear })
      .extract({ left, top, width: CROP, height: CROP })
      .removeAlpha()
      .toColourspace('srgb')
      .raw()
      .toBuffer({ resolveWithObject: true });
    if (info.channels !== 3 || info.width !== CROP || info.height !== CROP) {
      throw new HttpError(400, `unexpected decoded shape ${info.width}x${info.height}x${info.channels}`);
    }
    // HWC uint8 -> NCHW float32, /255, ImageNet mean/std.
    const plane = CROP * CROP;
    const out = new Float32Array(3 * plane);
    for (let c = 0; c < 3; c++) {
      const scale = 1 / (255 * STD[c]);
      const shift = MEAN[c] / STD[c];
      const base = c * plane;
      for (let i = 0; i < plane; i++) out[base + i] = data[i * 3 + c] * scale - shift;
    }
    return out;
  }

  // The detector's preprocessing: EXIF orientation, stretch, normalization; and the photo's
  // size as shown, for mapping the boxes back.
  async function preprocessDetect(bytes) {
    const { width, height, mean, std } = DETECT;
    const { data, info } = await (await source(bytes, true))
      .resize(width, height, { fit: 'fill', kernel: sharp.kernel.linear })
      .removeAlpha()
      .toColourspace('srgb')
      .raw()
      .toBuffer({ resolveWithObject: true });
    if (info.channels !== 3) throw new HttpError(400, `unexpected decoded shape ${info.width}x${info.height}x${info.channels}`);
    const meta = await sharp(bytes).metadata();
    const swap = (meta.orientation || 1) >= 5;
    const plane = width * height;
    const out = new Float32Array(3 * plane);
    for (let c = 0; c < 3; c++) {
      const scale = 1 / (255 * std[c]);
      const shift = mean[c] / std[c];
      for (let i = 0; i < plane; i++) out[c * plane + i] = data[i * 3 + c] * scale - shift;
    }
    return { input: out, w: swap ? meta.height : meta.width, h: swap ? meta.width : meta.height };
  }

  // Per-class greedy NMS over the anchors of boxes [N, 4] (normalized corners) and scores
  // [N, C], class 0 the background; boxes scaled to w x h and clipped.
  function decodeDetections(boxes, scores, classes, w, h) {
    const { score, iou, max } = DETECT;
    const cand = [];
    const n = scores.length / classes;
    for (let i = 0; i < n; i++) {
      for (let c = 1; c < classes; c++) {
        const s = scores[i * classes + c];
        if (s > score) cand.push({ s, c, b: [boxes[4 * i] * w, boxes[4 * i + 1] * h, boxes[4 * i + 2] * w, boxes[4 * i + 3] * h] });
      }
    }
    cand.sort((a, b) => b.s - a.s);
    const area = (b) => Math.max(0, b[2] - b[0]) * Math.max(0, b[3] - b[1]);
    const overlap = (a, b) => {
      const iw = Math.min(a[2], b[2]) - Math.max(a[0], b[0]);
      const ih = Math.min(a[3], b[3]) - Math.max(a[1], b[1]);
      if (iw <= 0 || ih <= 0) return 0;
      const inter = iw * ih;
      return inter / (area(a) + area(b) - inter);
    };
    const kept = [];
    for (const d of cand) {
      if (kept.length >= max) break;
      if (kept.some((k) => k.c === d.c && overlap(k.b, d.b) > iou)) continue;
      kept.push(d);
    }
    const clip = (v, hi) => Math.min(Math.max(v, 0), hi);
    return kept.map((d) => ({
      label: labels[d.c] || String(d.c),
      score: d.s,
      box: [clip(d.b[0], w), clip(d.b[1], h), clip(d.b[2], w), clip(d.b[3], h)],
    }));
  }

  // decoded runs a preprocessing step: a failure there is the image's (400).
  async function decoded(step) {
    try {
      return await step;
    } catch (e) {
      if (e instanceof HttpError) throw e;
      throw new HttpError(400, `cannot decode image: ${e.message}`);
    }
  }

  async function infer(bytes) {
    if (TASK === 'detect') {
      const { input, w, h } = await decoded(preprocessDetect(bytes));
      const result = await session.run({ [inputName]: new ort.Tensor('float32', input, [1, 3, DETECT.height, DETECT.width]) });
      const scores = result[process.env.SCORES_OUTPUT || 'scores'];
      const boxes = result[process.env.BOXES_OUTPUT || 'boxes'];
      return { detections: decodeDetections(boxes.data, scores.data, scores.dims[scores.dims.length - 1], w, h) };
    }
    const input = await decoded(preprocess(bytes));
    const result = await session.run({ [inputName]: new ort.Tensor('float32', input, [1, 3, CROP, CROP]) });
    const out = result[outputName].data;
    if (TASK === 'embed') {
      const v = Array.from(out);
      if (process.env.NORMALIZE === '1') {
        const norm = Math.sqrt(v.reduce((a, x) => a + x * x, 0));
        if (norm > 0) for (let i = 0; i < v.length; i++) v[i] /= norm;
      }
      return { embedding: v };
    }
    let best = 0;
    for (let i = 1; i < out.length; i++) if (out[i] > out[best]) best = i;
    return { prediction: labels[best] };
  }

  async function predict(body) {
    let payload;
    try {
      payload = JSON.parse(body);
    } catch (e) {
      throw new HttpError(422, 'body is not valid JSON');
    }
    if (!payload || typeof payload.image !== 'string') {
      throw new HttpError(422, 'field "image" (base64 string) is required');
    }
    const bytes = Buffer.from(payload.image, 'base64');
    if (bytes.length === 0) throw new HttpError(400, 'image is empty');
    return infer(bytes);
  }

  const server = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/') {
      return send(res, 200, { status: 'healthy', message: 'Node.js model service is running.' });
    }
    if (req.url !== '/predict/') return send(res, 404, { detail: 'Not Found' });
    if (req.method !== 'POST') return send(res, 405, { detail: 'Method Not Allowed' });
    const chunks = [];
    let size = 0;
    let aborted = false;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        aborted = true;
        send(res, 413, { detail: `body larger than ${MAX_BODY_BYTES} bytes` });
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (aborted) return;
      predict(Buffer.concat(chunks, size).toString('utf8')).then(
        (answer) => send(res, 200, answer),
        (err) => {
          if (err instanceof HttpError) return send(res, err.status, { detail: err.message });
          console.error(`worker ${process.pid}: ${err.stack || err}`);
          return send(res, 500, { detail: 'internal error' });
        },
      );
    });
  });
  server.keepAliveTimeout = 5000;
  server.listen(PORT, () => console.log(`worker ${process.pid}: listening on :${PORT}`));
  process.on('SIGTERM', () => server.close(() => process.exit(0)));
}

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function send(res, status, obj) {
  if (res.headersSent) return;
  const body = JSON.stringify(obj);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}
