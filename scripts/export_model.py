#!/usr/bin/python3
"""Export the default image model (MobileNetV3-small, 11 weather classes) to ONNX.

Run with Debian's interpreter (python3-torch 1.13, python3-torchvision 0.14, python3-onnx):

    /usr/bin/python3 scripts/export_model.py                      # untrained, deterministic init
    /usr/bin/python3 scripts/export_model.py --weights model.pt   # real, fine-tuned weights

Without --weights the network is NOT trained: it is torchvision's initialisation under
torch.manual_seed(SEED), after which BatchNorm running statistics are re-estimated on
deterministic synthetic images and the classifier's last layer is rescaled (see
calibrate_untrained) so that different images give different, non-degenerate scores. The
predictions of such a model mean nothing; it exists so that the serving stack can be built,
tested and benchmarked with a model of the right shape and cost.

Outputs (default directory models/mobilenet_v3_small/):
    model.onnx          opset 17, input "input" float32 [N,3,224,224], output "output" [N,11]
    model.onnx.sha256   sha256sum format
    labels.txt          one label per line, in index order
    reference.json      (--reference) softmax scores of the torch model for a few images
Optionally --save-state-dict PATH writes the state_dict that was exported (for the PyTorch
baseline service in bench/torch_service).
"""

import argparse
import base64
import hashlib
import io
import json
import os
import sys

import numpy as np
import torch
import torchvision
from torchvision.models import MobileNet_V3_Small_Weights

LABELS = [
    "dew", "fogsmog", "frost", "glaze", "hail", "lightning",
    "rain", "rainbow", "rime", "sandstorm", "snow",
]
NUM_CLASSES = len(LABELS)
SEED = 0
OPSET = 17
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# Calibration of the untrained model: CALIB_BATCHES batches of CALIB_BATCH synthetic images.
CALIB_BATCHES = 8
CALIB_BATCH = 32
TARGET_LOGIT_STD = 1.0

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "models", "mobilenet_v3_small")


def build_model() -> torch.nn.Module:
    return torchvision.models.mobilenet_v3_small(num_classes=NUM_CLASSES)


# ---------------------------------------------------------------------------------------------
# Loading trained weights
# ---------------------------------------------------------------------------------------------

_PREFIXES = ("module.", "model.", "_orig_mod.", "net.", "backbone.")


def _unwrap(obj):
    """Return the state_dict inside a checkpoint (plain, {"state_dict": ...}, {"model": ...})."""
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        for key in ("state_dict", "model_state_dict", "model"):
            if key in obj and isinstance(obj[key], (dict, torch.nn.Module)):
                return _unwrap(obj[key])
        if obj and all(torch.is_tensor(v) for v in obj.values()):
            return obj
    raise SystemExit("export_model: cannot find a state_dict in the checkpoint "
                     "(expected a state_dict or a dict with a 'state_dict' or 'model' key)")


def _strip_prefixes(sd, expected_keys):
    """Strip wrapper prefixes (DataParallel's "module.", a wrapper's "model.", ...)."""
    changed = True
    while changed and not set(sd) & expected_keys:
        changed = False
        for p in _PREFIXES:
            if sd and all(k.startswith(p) for k in sd):
                sd = {k[len(p):]: v for k, v in sd.items()}
                changed = True
    return sd


def load_weights(model: torch.nn.Module, path: str) -> None:
    obj = torch.load(path, map_location="cpu")
    sd = _unwrap(obj)
    expected = model.state_dict()
    sd = _strip_prefixes(dict(sd), set(expected))
    missing = [k for k in expected if k not in sd]
    unexpected = [k for k in sd if k not in expected]
    # The head may only differ in naming (e.g. "classifier.3.*" saved as "fc.*" or "head.*"):
    # map the leftover tensors onto the missing ones, in order, when their shapes match exactly.
    if missing and len(missing) == len(unexpected):
        shapes_ok = all(tuple(sd[u].shape) == tuple(expected[m].shape)
                        for m, u in zip(missing, unexpected))
        if shapes_ok and all(m.startswith("classifier.") for m in missing):
            for m, u in zip(missing, unexpected):
                print(f"export_model: mapping checkpoint key {u} -> {m}", file=sys.stderr)
                sd[m] = sd.pop(u)
            missing, unexpected = [], []
    if missing or unexpected:
        raise SystemExit(f"export_model: checkpoint {path} does not fit mobilenet_v3_small"
                         f"(num_classes={NUM_CLASSES}): missing={missing[:8]} "
                         f"unexpected={unexpected[:8]}")
    for k, v in sd.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise SystemExit(f"export_model: {k} has shape {tuple(v.shape)}, the model wants "
                             f"{tuple(expected[k].shape)} (is the head {NUM_CLASSES} classes?)")
    model.load_state_dict(sd, strict=True)


# ---------------------------------------------------------------------------------------------
# Untrained model: make it non-degenerate, deterministically
# ---------------------------------------------------------------------------------------------

def synthetic_images(gen: torch.Generator, n: int) -> torch.Tensor:
    """Random "natural-looking" RGB images in [0,1], ImageNet-normalised, [n,3,224,224].

    Natural photographs have a roughly 1/f amplitude spectrum; each image here is pink noise
    (random phases, amplitude 1/f^alpha with alpha drawn in [0.8, 1.6]): a luminance field plus
    weaker colour fields, with a random mean colour and contrast.
    """
    size = 224
    fy = torch.fft.fftfreq(size).view(size, 1)
    fx = torch.fft.rfftfreq(size).view(1, size // 2 + 1)
    f = torch.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1.0
    alpha = torch.rand(n, 1, 1, 1, generator=gen) * 0.8 + 0.8
    amp = f.view(1, 1, *f.shape) ** (-alpha)
    amp[..., 0, 0] = 0.0
    phase = torch.rand(n, 4, *f.shape, generator=gen) * (2 * torch.pi)
    fields = torch.fft.irfft2(torch.polar(amp.expand(n, 4, *f.shape).contiguous(), phase),
                              s=(size, size))
    fields = fields / fields.flatten(2).std(dim=2).view(n, 4, 1, 1)
    lum = fields[:, :1]
    chroma = fields[:, 1:]
    mean_rgb = torch.rand(n, 3, 1, 1, generator=gen) * 0.6 + 0.2
    contrast = torch.rand(n, 1, 1, 1, generator=gen) * 0.15 + 0.05
    colourfulness = torch.rand(n, 1, 1, 1, generator=gen) * 0.5
    img = mean_rgb + contrast * (lum + colourfulness * chroma)
    img = img.clamp(0.0, 1.0)
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return (img - mean) / std


@torch.no_grad()
def calibrate_untrained(model: torch.nn.Module) -> dict:
    """Re-estimate BatchNorm statistics and rescale the last layer on synthetic images.

    1. Every BatchNorm's running mean/var is reset and recomputed as a cumulative average
       (momentum=None) over CALIB_BATCHES batches, in train mode (dropout does not touch the
       features BN sees).
    2. Each row of the last Linear layer is rescaled so that, over the same images, that class's
       logit has standard deviation TARGET_LOGIT_STD (torchvision initialises the layer with
       std 0.01, which gives near-uniform softmax scores), and its bias is set so that the
       class's mean logit is 0, so that no class wins everything.
    """
    gen = torch.Generator().manual_seed(SEED)
    batches = [synthetic_images(gen, CALIB_BATCH) for _ in range(CALIB_BATCHES)]

    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    model.train()
    for x in batches:
        model(x)
    for bn in bns:
        bn.momentum = 0.1  # torchvision's default for this model was 0.01; irrelevant in eval
    model.eval()

    # Standardise each class's logit over the calibration images: mean 0, std TARGET_LOGIT_STD.
    last = model.classifier[-1]
    logits = torch.cat([model(x) for x in batches])
    scale = TARGET_LOGIT_STD / logits.std(dim=0)
    last.weight.mul_(scale.view(-1, 1))
    last.bias.mul_(scale)
    logits = torch.cat([model(x) for x in batches])
    last.bias.sub_(logits.mean(dim=0))
    logits = torch.cat([model(x) for x in batches])
    top1 = torch.bincount(logits.argmax(dim=1), minlength=NUM_CLASSES)
    return {"bn_layers": len(bns), "images": len(batches) * CALIB_BATCH,
            "logit_scale_median": float(scale.median()), "logit_std": float(logits.std()),
            "top1_histogram": top1.tolist()}


# ---------------------------------------------------------------------------------------------
# Export and verification
# ---------------------------------------------------------------------------------------------

def export_onnx(model: torch.nn.Module, path: str) -> bytes:
    model.eval()
    dummy = torch.zeros(1, 3, 224, 224)
    buf = io.BytesIO()
    torch.onnx.export(
        model, dummy, buf,
        export_params=True,
        opset_version=OPSET,
        do_constant_folding=True,
        input_names=["input"],
        output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
    )
    data = buf.getvalue()
    with open(path, "wb") as f:
        f.write(data)
    return data


def check_onnx(path: str) -> None:
    import onnx
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)

    def dims(vi):
        return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]

    ins = [(i.name, dims(i)) for i in m.graph.input]
    outs = [(o.name, dims(o)) for o in m.graph.output]
    want_in = [("input", ["batch", 3, 224, 224])]
    want_out = [("output", ["batch", NUM_CLASSES])]
    if ins != want_in or outs != want_out:
        raise SystemExit(f"export_model: unexpected graph signature {ins} -> {outs}")
    opset = {o.domain: o.version for o in m.opset_import}
    if opset.get("", None) != OPSET:
        raise SystemExit(f"export_model: opset {opset}, want {OPSET}")
    print(f"onnx.checker: ok, {ins} -> {outs}, opset {opset['']}")


def compare_reference_evaluator(model, path, batches=(1, 5)) -> bool:
    """torch vs onnx.reference.ReferenceEvaluator (onnx >= 1.13). Returns False if unavailable."""
    try:
        from onnx.reference import ReferenceEvaluator
    except ImportError:
        print("onnx.reference is not available (onnx < 1.13): skipping the in-Python "
              "comparison; use --dump-check DIR with bench/node_service/verify_onnx.js")
        return False
    import onnx
    sess = ReferenceEvaluator(onnx.load(path))
    gen = torch.Generator().manual_seed(1234)
    for n in batches:
        x = synthetic_images(gen, n)
        with torch.no_grad():
            want = model(x).numpy()
        got = sess.run(None, {"input": x.numpy()})[0]
        print(f"batch {n}: max |torch - onnx| = {np.abs(want - got).max():.3g}")
        if not np.allclose(want, got, atol=1e-4, rtol=0):
            raise SystemExit("export_model: ONNX output differs from torch by more than 1e-4")
    return True


def dump_check(model, out_dir, batches=(1, 5)) -> None:
    """Write inputs and torch outputs (raw little-endian float32) for an external checker."""
    os.makedirs(out_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    meta = []
    for n in batches:
        x = synthetic_images(gen, n)
        with torch.no_grad():
            y = model(x)
        x.numpy().astype("<f4").tofile(os.path.join(out_dir, f"input_b{n}.f32"))
        y.numpy().astype("<f4").tofile(os.path.join(out_dir, f"output_b{n}.f32"))
        meta.append({"batch": n, "input": f"input_b{n}.f32", "output": f"output_b{n}.f32"})
    with open(os.path.join(out_dir, "check.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"wrote check tensors to {out_dir}")


def torch_transform():
    return MobileNet_V3_Small_Weights.DEFAULT.transforms()


def pattern_input(n: int = 2) -> torch.Tensor:
    """A preprocessing-free test input that is easy to rebuild in any language:
    raw[b][c][y][x] = ((x + 2*y + c*37 + b*101) % 256) / 255, then (raw - mean[c]) / std[c],
    computed in float32."""
    b = torch.arange(n).view(n, 1, 1, 1)
    c = torch.arange(3).view(1, 3, 1, 1)
    y = torch.arange(224).view(1, 1, 224, 1)
    x = torch.arange(224).view(1, 1, 1, 224)
    raw = ((x + 2 * y + c * 37 + b * 101) % 256).float() / 255.0
    mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=torch.float32).view(1, 3, 1, 1)
    return (raw - mean) / std


def write_reference(model, images, path) -> None:
    from PIL import Image
    tf = torch_transform()
    entries = []
    for img_path in images:
        source = img_path
        if img_path.endswith(".json"):  # a request body {"image": "<base64>"}
            with open(img_path) as f:
                source = io.BytesIO(base64.b64decode(json.load(f)["image"]))
        with Image.open(source) as im:
            x = tf(im.convert("RGB")).unsqueeze(0)
        with torch.no_grad():
            probs = torch.softmax(model(x), dim=1)[0]
        entries.append({
            "image": os.path.relpath(img_path, REPO),
            "top1": LABELS[int(probs.argmax())],
            "scores": [round(float(p), 6) for p in probs],
        })
    with torch.no_grad():
        pl = model(pattern_input(2))
    pattern_logits = [[round(float(v), 6) for v in row] for row in pl]
    pattern_scores = [[round(float(v), 6) for v in row] for row in torch.softmax(pl, dim=1)]
    doc = {
        "about": "Softmax scores of the torch model behind model.onnx (UNTRAINED weights unless "
                 "exported with --weights), for tests of the serving pipeline. Preprocessing: "
                 "PIL decode (for a .json file: the base64 JPEG in its \"image\" field, i.e. the request body), convert('RGB') (no EXIF transpose), torchvision "
                 "MobileNet_V3_Small_Weights.DEFAULT.transforms() (resize shorter side to 256, "
                 "bilinear, antialias; center crop 224; /255; ImageNet mean/std). Paths are "
                 "relative to the repository root. Other resizers move these scores by up to a few 1e-2 (the untrained network is sensitive to 1-level pixel differences; see README.md); pattern_input is the exact check.",
        "model_sha256": hashlib.sha256(open(os.path.join(os.path.dirname(path), "model.onnx"),
                                            "rb").read()).hexdigest(),
        "labels": LABELS,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "images": entries,
        "pattern_input": {
            "about": "Exact check of the model without image decoding or resizing (tolerance "
                     "1e-4 on logits): input[b][c][y][x] = (((x + 2*y + c*37 + b*101) % 256)"
                     " / 255 - mean[c]) / std[c] in float32, batch 2, ImageNet mean/std.",
            "mean": list(IMAGENET_MEAN),
            "std": list(IMAGENET_STD),
            "logits": pattern_logits,
            "scores": pattern_scores,
        },
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for e in entries:
        print(f"reference: {e['image']}: top1={e['top1']} max={max(e['scores']):.3f}")


DEFAULT_REFERENCE_IMAGES = [
    "../shared/seed/rime_5868.jpg",
    "../shared/images/skimage_astronaut.png",
    "../shared/images/skimage_coffee.png",
    "../shared/images/skimage_camera_gray.png",
    "../shared/seed/rime_5868.json",
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", help="trained checkpoint (state_dict, or dict with "
                                      "'state_dict'/'model'); default: untrained, seed 0")
    ap.add_argument("--out-dir", default=DEFAULT_OUT, help="default: %(default)s")
    ap.add_argument("--save-state-dict", metavar="PATH",
                    help="also write the exported model's state_dict (torch.save) to PATH")
    ap.add_argument("--state-dict-only", action="store_true",
                    help="only build the model and write --save-state-dict (no ONNX export)")
    ap.add_argument("--reference", action="store_true",
                    help="write reference.json (torch softmax scores for a few images)")
    ap.add_argument("--reference-images", nargs="*", default=DEFAULT_REFERENCE_IMAGES,
                    help="images for reference.json, relative to the repository root")
    ap.add_argument("--dump-check", metavar="DIR",
                    help="write inputs/outputs for batch 1 and 5 as raw float32 for an "
                         "external ONNX Runtime comparison")
    args = ap.parse_args(argv)

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # same floating-point summation order on every machine we run

    model = build_model()
    if args.weights:
        load_weights(model, args.weights)
        print(f"loaded weights from {args.weights}")
    else:
        info = calibrate_untrained(model)
        print(f"untrained model (seed {SEED}), calibrated: {info}")
    model.eval()

    if args.save_state_dict:
        d = os.path.dirname(os.path.abspath(args.save_state_dict))
        os.makedirs(d, exist_ok=True)
        torch.save(model.state_dict(), args.save_state_dict)
        print(f"wrote state_dict to {args.save_state_dict}")
    if args.state_dict_only:
        if not args.save_state_dict:
            ap.error("--state-dict-only needs --save-state-dict")
        return 0

    os.makedirs(args.out_dir, exist_ok=True)
    onnx_path = os.path.join(args.out_dir, "model.onnx")
    data = export_onnx(model, onnx_path)
    digest = hashlib.sha256(data).hexdigest()
    with open(onnx_path + ".sha256", "w") as f:
        f.write(f"{digest}  model.onnx\n")
    with open(os.path.join(args.out_dir, "labels.txt"), "w") as f:
        f.write("\n".join(LABELS) + "\n")
    print(f"wrote {onnx_path} ({len(data)} bytes, sha256 {digest})")

    check_onnx(onnx_path)
    compare_reference_evaluator(model, onnx_path)
    if args.dump_check:
        dump_check(model, args.dump_check)
    if args.reference:
        imgs = [os.path.normpath(os.path.join(REPO, p)) for p in args.reference_images]
        write_reference(model, imgs, os.path.join(args.out_dir, "reference.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
