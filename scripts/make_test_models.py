#!/usr/bin/python3
"""Writes the tiny ONNX models the gateway's tests use for input layouts and types
(cmd/gateway/testdata/). Each maps an image batch to its per-channel means, [N, 3]:
  channel_means_nhwc_u8.onnx   input uint8   [N, 224, 224, 3]
  channel_means_nhwc_f32.onnx  input float32 [N, 224, 224, 3]
and two models with the same interface but different answers, for the reload tests:
  scaled_means_nchw_x1.onnx    input float32 [N, 3, 224, 224], output [N, 3]: the means
  scaled_means_nchw_x2.onnx    the same, times 2
Run with Debian's python3-onnx: /usr/bin/python3 scripts/make_test_models.py
"""
import os
import onnx
from onnx import helper, TensorProto

out_dir = os.path.join(os.path.dirname(__file__), "..", "cmd", "gateway", "testdata")


def model(elem, name):
    inp = helper.make_tensor_value_info("input", elem, ["N", 224, 224, 3])
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3])
    nodes = []
    src = "input"
    if elem != TensorProto.FLOAT:
        nodes.append(helper.make_node("Cast", ["input"], ["x"], to=TensorProto.FLOAT))
        src = "x"
    nodes.append(helper.make_node("ReduceMean", [src], ["output"], axes=[1, 2], keepdims=0))
    g = helper.make_graph(nodes, "channel_means", [inp], [out])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="imagegate-tests")
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(out_dir, name))


model(TensorProto.UINT8, "channel_means_nhwc_u8.onnx")
model(TensorProto.FLOAT, "channel_means_nhwc_f32.onnx")


def scaled(k, name):
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3])
    scale = helper.make_tensor("k", TensorProto.FLOAT, [], [float(k)])
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["m"], axes=[2, 3], keepdims=0),
        helper.make_node("Mul", ["m", "k"], ["output"]),
    ]
    g = helper.make_graph(nodes, "scaled_means", [inp], [out], initializer=[scale])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="imagegate-tests")
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(out_dir, name))


scaled(1, "scaled_means_nchw_x1.onnx")
scaled(2, "scaled_means_nchw_x2.onnx")
