'use strict';
// Baseline peer for imagegate's benchmarks: the service a typical Node.js team would write.
// node:http + node:cluster (one worker per core), sharp (libvips) to decode and resize,
// onnxruntime-node to run the model, one image per inference call (no batching).
//
// API (same as the article's services):
//   GET  /          -> {"status":"healthy","message":"Node.js model service is running."}
//   POST /predict/  {"image":"<base64 JPEG/PNG/...>"} -> {"prediction":"<label>"}
//
// Environment: PORT (8080), WORKERS (one per core), MODEL (the repository's default model),
// LABELS (labels.txt next to MODEL), MAX_BODY_BYTES (32 MiB).
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
  const labels = fs.readFileSync(LABELS, 'utf8').split('\n').map((s) => s.trim()).filter(Boolean);
  const session = await ort.InferenceSession.create(MODEL, {
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const inputName = session.inputNames[0];
  const outputName = session.outputNames[0];

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
    const { data, info } = await sharp(bytes)
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
    let input;
    try {
      input = await preprocess(bytes);
    } catch (e) {
      if (e instanceof HttpError) throw e;
      throw new HttpError(400, `cannot decode image: ${e.message}`);
    }
    const tensor = new ort.Tensor('float32', input, [1, 3, CROP, CROP]);
    const result = await session.run({ [inputName]: tensor });
    const logits = result[outputName].data;
    let best = 0;
    for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
    return labels[best];
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
        (label) => send(res, 200, { prediction: label }),
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
