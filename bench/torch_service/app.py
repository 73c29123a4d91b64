"""Baseline peer: the article's naive PyTorch + FastAPI service ("torch_serving").

The model is served straight from its state_dict with model.eval() and torch.inference_mode(),
one image per request, torch.set_num_threads(1) per uvicorn worker, preprocessing with
torchvision's MobileNet_V3_Small_Weights transforms (resize 256, center crop 224, ImageNet
mean/std). It serves the same weights as models/mobilenet_v3_small/model.onnx: the state_dict
written by `scripts/export_model.py --save-state-dict PATH` (see bench/peers.sh).

    STATE_DICT=bench/out/torch_state_dict.pt uvicorn app:app --workers 2 --port 8081

API:  GET / -> {"status": "healthy", "message": "PyTorch model service is running."}
      POST /predict/ {"image": "<base64>"} -> {"prediction": "<label>"}
"""

import base64
import io
import os

import torch
from fastapi import FastAPI
from PIL import Image
from pydantic import BaseModel
from torchvision.models import MobileNet_V3_Small_Weights, mobilenet_v3_small

LABELS = [
    "dew", "fogsmog", "frost", "glaze", "hail", "lightning",
    "rain", "rainbow", "rime", "sandstorm", "snow",
]
HERE = os.path.dirname(os.path.abspath(__file__))
STATE_DICT = os.environ.get(
    "STATE_DICT", os.path.join(HERE, "..", "out", "torch_state_dict.pt"))

torch.set_num_threads(1)

model = mobilenet_v3_small(num_classes=len(LABELS))
model.load_state_dict(torch.load(STATE_DICT, map_location="cpu"))
model.eval()
transforms = MobileNet_V3_Small_Weights.DEFAULT.transforms()

app = FastAPI()


class ImageRequest(BaseModel):
    image: str


@app.get("/")
async def root():
    return {"status": "healthy", "message": "PyTorch model service is running."}


@app.post("/predict/")
async def predict(request: ImageRequest):
    image_bytes = base64.b64decode(request.image)
    image = Image.open(io.BytesIO(image_bytes)).convert("RGB")
    batch = transforms(image).unsqueeze(0)
    with torch.inference_mode():
        logits = model(batch)
    return {"prediction": LABELS[int(logits.argmax(dim=1).item())]}
