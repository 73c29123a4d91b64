#!/usr/bin/python3
"""Regenerate the preprocess package's fidelity goldens (NOT run by CI).

Run from the repository root with Debian's interpreter (it has torch,
torchvision and PIL; the `python3` first on PATH does not):

    /usr/bin/python3 scripts/make_goldens.py

For every photo ../shared/images/*.{png,jpg,jpeg} (not bad/) it computes
torchvision's classifier preprocessing on PIL:
    Image.open -> ImageOps.exif_transpose -> convert('RGB')
    -> T.Resize(256) -> T.CenterCrop(224) -> uint8 HWC array
and writes preprocess/testdata/golden/<name>.rgb.gz (224*224*3 raw uint8,
gzip). It also writes small generated inputs with their goldens:
  testdata/orient/orient_<N>.jpg   one 90x61 JPEG tagged with EXIF orientation N
                                   (golden: Resize(64) + CenterCrop(56))
  testdata/webp/*.webp             lossless and lossy WebP (PIL/libwebp encoder)
plus "stretch" goldens (T.Resize((224, 224)), entries with resize 0) for a
few photos, and preprocess/testdata/golden/goldens.json listing every golden.

The goldens are exact integer data (uint8 pixels), the same on every CPU.
Classifier answers are NOT stored: floating-point kernels differ between CPUs
(the int8 reference model's above all), so preprocess/ort_test.go computes
torchvision's top-1 on the machine the test runs on, by running the same ONNX
Runtime session on these goldens (ToTensor + Normalize in float32).
"""
import glob
import gzip
import hashlib
import io
import json
import os
import sys

import numpy as np
from PIL import Image, ImageOps
import torchvision.transforms as T

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = os.path.join(ROOT, "..", "shared", "images")
TESTDATA = os.path.join(ROOT, "preprocess", "testdata")
GOLDEN = os.path.join(TESTDATA, "golden")

TF = T.Compose([T.Resize(256), T.CenterCrop(224)])


def reference(path, resize=256, crop=224):
    if resize == 0:  # "stretch": straight to crop x crop, ignoring the aspect ratio
        tf = T.Resize((crop, crop))
    elif (resize, crop) == (256, 224):
        tf = TF
    else:
        tf = T.Compose([T.Resize(resize), T.CenterCrop(crop)])
    with Image.open(path) as im:
        im = ImageOps.exif_transpose(im)
        im = im.convert("RGB")
        out = tf(im)
        a = np.asarray(out, dtype=np.uint8)
    assert a.shape == (crop, crop, 3), a.shape
    return a


def write_golden(name, arr):
    raw = np.ascontiguousarray(arr).tobytes()
    # mtime=0 keeps the .gz byte-identical across runs.
    with open(os.path.join(GOLDEN, name + ".rgb.gz"), "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, compresslevel=9) as g:
            g.write(raw)
    return hashlib.sha256(raw).hexdigest()


def make_generated():
    """Small generated inputs (committed) for orientation and WebP tests."""
    base = Image.open(os.path.join(IMAGES, "skimage_chelsea_cat.png")).convert("RGB")
    os.makedirs(os.path.join(TESTDATA, "orient"), exist_ok=True)
    os.makedirs(os.path.join(TESTDATA, "webp"), exist_ok=True)
    # Odd, non-square size; same stored pixels, eight different EXIF tags.
    small = base.resize((90, 61), Image.BILINEAR)
    out = []
    for o in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        p = os.path.join(TESTDATA, "orient", "orient_%d.jpg" % o)
        small.save(p, "JPEG", quality=95, exif=exif.tobytes())
        out.append(("orient/orient_%d.jpg" % o, p, 64, 56))
    mid = base.resize((300, 200), Image.BILINEAR)
    p = os.path.join(TESTDATA, "webp", "chelsea_lossless.webp")
    mid.save(p, "WEBP", lossless=True)
    out.append(("webp/chelsea_lossless.webp", p, 256, 224))
    p = os.path.join(TESTDATA, "webp", "chelsea_lossy.webp")
    mid.save(p, "WEBP", quality=90)
    out.append(("webp/chelsea_lossy.webp", p, 256, 224))
    return out


# Extra goldens for the "stretch" mode (T.Resize((224, 224)), no crop); the
# entry's resize is 0.
STRETCH = ["skimage_chelsea_cat.png", "skimage_rocket.jpg", "exif_landscape_orient6.jpg"]


def main():
    if not os.path.isdir(IMAGES):
        sys.exit("missing %s (shared test images)" % IMAGES)
    os.makedirs(GOLDEN, exist_ok=True)
    jpath = os.path.join(GOLDEN, "goldens.json")
    entries = []
    photos = sorted(
        p for ext in ("png", "jpg", "jpeg") for p in glob.glob(os.path.join(IMAGES, "*." + ext))
    )
    inputs = [(os.path.basename(p), p, "shared", 256, 224) for p in photos]
    inputs += [(name, p, "testdata", r, c) for name, p, r, c in make_generated()]
    inputs += [(n, os.path.join(IMAGES, n), "shared", 0, 224) for n in STRETCH]
    for name, path, where, resize, crop in inputs:
        arr = reference(path, resize, crop)
        gname = name.replace("/", "_") + ("_stretch" if resize == 0 else "")
        digest = write_golden(gname, arr)
        e = {"name": name, "source": where, "resize": resize, "crop": crop,
             "golden": gname + ".rgb.gz", "sha256": digest}
        entries.append(e)
        print("%-36s %s" % (name, digest[:12]))
    doc = {
        "pipeline": "PIL open, ImageOps.exif_transpose, convert('RGB'), T.Resize(256), T.CenterCrop(224); uint8 HWC",
        "torchvision": T.__name__ and __import__("torchvision").__version__,
        "pillow": Image.__version__,
        "images": entries,
    }
    with open(jpath, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
