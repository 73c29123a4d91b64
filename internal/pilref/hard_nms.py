# Per-class hard NMS of SSD-style outputs with numpy, as detectors' authors post-process them (pilref.HardNMS).
import json, sys
import numpy as np
def iou(a, b):
    x1 = np.maximum(a[0], b[:, 0]); y1 = np.maximum(a[1], b[:, 1])
    x2 = np.minimum(a[2], b[:, 2]); y2 = np.minimum(a[3], b[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = lambda r: np.clip(r[..., 2] - r[..., 0], 0, None) * np.clip(r[..., 3] - r[..., 1], 0, None)
    return inter / (area(a) + area(b) - inter + 1e-12)
req = json.load(sys.stdin)
out = []
for j in req["jobs"]:
    boxes = np.array(j["boxes"], dtype=np.float32).reshape(-1, 4)
    scores = np.array(j["scores"], dtype=np.float32).reshape(-1, j["classes"])
    found = []
    for c in range(1, j["classes"]):  # per class, the background left out
        keep = scores[:, c] > req["score"]
        b, s = boxes[keep], scores[keep, c]
        order = np.argsort(-s, kind="stable")
        b, s = b[order], s[order]
        picked = []
        while len(s) > 0 and len(picked) < req["max"]:
            picked.append((b[0], s[0]))
            if len(s) == 1:
                break
            rest = iou(b[0], b[1:]) <= req["iou"]
            b, s = b[1:][rest], s[1:][rest]
        for bb, ss in picked:
            found.append({"box": [float(bb[0]) * j["w"], float(bb[1]) * j["h"], float(bb[2]) * j["w"], float(bb[3]) * j["h"]], "score": float(ss)})
    out.append(sorted(found, key=lambda d: -d["score"]))
json.dump(out, sys.stdout)
