'use strict';
// Compares ONNX Runtime's output for model.onnx with the torch outputs written by
// `scripts/export_model.py --dump-check DIR` (raw little-endian float32 files + check.json).
// Usage: node verify_onnx.js MODEL.onnx DIR [TOLERANCE]
const fs = require('node:fs');
const path = require('node:path');
const ort = require('onnxruntime-node');

function readF32(file) {
  const buf = fs.readFileSync(file);
  return new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
}

async function main() {
  const [modelPath, dir, tolArg] = process.argv.slice(2);
  if (!modelPath || !dir) {
    console.error('usage: node verify_onnx.js MODEL.onnx DIR [TOLERANCE]');
    process.exit(2);
  }
  const tol = tolArg ? Number(tolArg) : 1e-4;
  const session = await ort.InferenceSession.create(modelPath, {
    intraOpNumThreads: 1, interOpNumThreads: 1,
  });
  const cases = JSON.parse(fs.readFileSync(path.join(dir, 'check.json'), 'utf8'));
  let worst = 0;
  for (const c of cases) {
    const input = readF32(path.join(dir, c.input));
    const want = readF32(path.join(dir, c.output));
    const out = await session.run({ input: new ort.Tensor('float32', input, [c.batch, 3, 224, 224]) });
    const got = out.output.data;
    if (got.length !== want.length) throw new Error(`batch ${c.batch}: ${got.length} outputs, want ${want.length}`);
    let maxDiff = 0;
    for (let i = 0; i < got.length; i++) maxDiff = Math.max(maxDiff, Math.abs(got[i] - want[i]));
    console.log(`batch ${c.batch}: dims [${out.output.dims}], max |torch - onnxruntime| = ${maxDiff.toExponential(3)}`);
    worst = Math.max(worst, maxDiff);
  }
  // reference.json next to the model: its pattern_input, rebuilt from the formula it states.
  const refPath = path.join(path.dirname(modelPath), 'reference.json');
  if (fs.existsSync(refPath)) {
    const ref = JSON.parse(fs.readFileSync(refPath, 'utf8')).pattern_input;
    const n = ref.logits.length;
    const x = new Float32Array(n * 3 * 224 * 224);
    let i = 0;
    for (let b = 0; b < n; b++) {
      for (let c = 0; c < 3; c++) {
        for (let y = 0; y < 224; y++) {
          for (let xx = 0; xx < 224; xx++) {
            const raw = Math.fround(((xx + 2 * y + c * 37 + b * 101) % 256) / 255);
            x[i++] = Math.fround(Math.fround(raw - Math.fround(ref.mean[c])) / Math.fround(ref.std[c]));
          }
        }
      }
    }
    const out = await session.run({ input: new ort.Tensor('float32', x, [n, 3, 224, 224]) });
    let maxDiff = 0;
    ref.logits.flat().forEach((v, j) => { maxDiff = Math.max(maxDiff, Math.abs(out.output.data[j] - v)); });
    console.log(`reference.json pattern_input (batch ${n}): max |reference - onnxruntime| = ${maxDiff.toExponential(3)}`);
    worst = Math.max(worst, maxDiff);
  }
  if (!(worst <= tol)) {
    console.error(`FAIL: max difference ${worst} > ${tol}`);
    process.exit(1);
  }
  console.log(`ok (onnxruntime-node ${require('onnxruntime-node/package.json').version}, tolerance ${tol})`);
}
main().catch((e) => { console.error(e); process.exit(1); });
