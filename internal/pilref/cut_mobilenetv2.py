# Cuts the shared int8 MobileNetV2 at its pooled features: {"src": ..., "dst": ...} as JSON on stdin
# (pilref.CutMobileNetV2; bench/ceiling and the Node.js peer's embedding model).
import json, sys
import onnx
from onnx import helper, TensorProto
req = json.load(sys.stdin)
m = onnx.load(req["src"])
g = m.graph
pool = [n for n in g.node if n.op_type == "QLinearGlobalAveragePool"]
if len(pool) != 1:
    raise SystemExit("expected one QLinearGlobalAveragePool, found %d" % len(pool))
q, _, _, scale, zero = pool[0].input[0], pool[0].input[1], pool[0].input[2], pool[0].input[3], pool[0].input[4]
g.node.append(helper.make_node("DequantizeLinear", [pool[0].output[0], scale, zero], ["features_4d"]))
g.node.append(helper.make_node("Flatten", ["features_4d"], ["features"], axis=1))
# Keep only the nodes the features need.
needed, keep = {"features"}, []
for n in reversed(list(g.node)):
    if any(o in needed for o in n.output):
        keep.append(n)
        needed.update(n.input)
del g.node[:]
g.node.extend(reversed(keep))
inits = [t for t in g.initializer if t.name in needed]
del g.initializer[:]
g.initializer.extend(inits)
del g.output[:]
g.output.append(helper.make_tensor_value_info("features", TensorProto.FLOAT, [g.input[0].type.tensor_type.shape.dim[0].dim_param or "N", 1280]))
onnx.save(m, req["dst"])
json.dump({"nodes": len(g.node)}, sys.stdout)
