# torchvision-style preprocessing with PIL: jobs as JSON on stdin, tensors as JSON on stdout (pilref.Preprocess).
import base64, json, sys
import numpy as np
from PIL import Image, ImageOps
out = []
for j in json.load(sys.stdin):
    im = ImageOps.exif_transpose(Image.open(j["path"])).convert("RGB")
    w, h = im.size
    W, H = j["width"], j["height"]
    if j["mode"] == "stretch":
        im = im.resize((W, H), Image.BILINEAR)
    elif j["mode"] == "letterbox":
        r = min(W / w, H / h)
        nw, nh = min(max(round(w * r), 1), W), min(max(round(h * r), 1), H)
        canvas = Image.new("RGB", (W, H), (j["pad"],) * 3)
        canvas.paste(im.resize((nw, nh), Image.BILINEAR), ((W - nw) // 2, (H - nh) // 2))
        im = canvas
    else:  # torchvision Resize(int) + CenterCrop
        s = j["resize"]
        nw, nh = (s, int(s * h / w)) if w <= h else (int(s * w / h), s)
        im = im.resize((nw, nh), Image.BILINEAR)
        left, top = int(round((nw - W) / 2.0)), int(round((nh - H) / 2.0))
        im = im.crop((left, top, left + W, top + H))
    x = np.asarray(im, dtype=np.uint8).astype(np.float32)
    if not j["raw"]:
        x = x / np.float32(255)
        x = (x - np.array(j["mean"], dtype=np.float32)) / np.array(j["std"], dtype=np.float32)
    x = np.ascontiguousarray(x.astype(np.float32).transpose(2, 0, 1))
    out.append({"w": w, "h": h, "t": base64.b64encode(x.astype("<f4").tobytes()).decode()})
json.dump(out, sys.stdout)
