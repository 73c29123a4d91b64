"""Reads back a model's configuration from the gateway as Triton's clients do, and checks it
against the model's config.pbtxt as protobuf's own text parser reads it.

    triton_client.py DESCRIPTORS HTTP_URL GRPC_ADDR MODEL [CONFIG_PBTXT]

DESCRIPTORS is a serialized FileDescriptorSet of Triton's model_config.proto and
grpc_service.proto (the test writes it from the gateway's generated code): the messages are
built from it at run time, as protoc's Python output would build them, so no protoc is needed.
The gRPC call is tritonclient.grpc's get_model_config (the unary ModelConfig method of
inference.GRPCInferenceService); the HTTP call is tritonclient.http's (GET
/v2/models/MODEL/config), whose JSON is read with protobuf's JSON parser into the same message.
With CONFIG_PBTXT, every field the file sets must come back with the value it sets. Prints the
configuration as JSON (protobuf's mapping) on success; exits 1 saying what differs otherwise.
"""

import json
import sys
import urllib.request

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, text_format

try:
    from google.protobuf.message_factory import GetMessageClass
except ImportError:  # protobuf < 4.22
    from google.protobuf import message_factory

    _factory = message_factory.MessageFactory()

    def GetMessageClass(desc):
        return _factory.GetPrototype(desc)


def main():
    descriptors, http_url, grpc_addr, model = sys.argv[1:5]
    pbtxt = sys.argv[5] if len(sys.argv) > 5 else None
    fds = descriptor_pb2.FileDescriptorSet()
    with open(descriptors, "rb") as f:
        fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    cls = lambda name: GetMessageClass(pool.FindMessageTypeByName(name))
    ModelConfig = cls("inference.ModelConfig")
    Request, Response = cls("inference.ModelConfigRequest"), cls("inference.ModelConfigResponse")

    call = grpc.insecure_channel(grpc_addr).unary_unary(
        "/inference.GRPCInferenceService/ModelConfig",
        request_serializer=Request.SerializeToString,
        response_deserializer=Response.FromString,
    )
    over_grpc = call(Request(name=model), timeout=30).config

    with urllib.request.urlopen(f"{http_url}/v2/models/{model}/config", timeout=30) as r:
        over_http = json_format.ParseDict(json.load(r), ModelConfig())

    problems = []
    if over_grpc != over_http:
        problems.append(f"gRPC and HTTP answer differently:\n{over_grpc}\n---\n{over_http}")
    if pbtxt:
        with open(pbtxt) as f:
            read = text_format.Parse(f.read(), ModelConfig())
        for field, value in read.ListFields():
            got = getattr(over_grpc, field.name)
            if field.label != field.LABEL_REPEATED:
                same = got == value
            elif field.message_type is not None and field.message_type.GetOptions().map_entry:
                same = dict(got) == dict(value)
            else:
                same = list(got) == list(value)
            if not same:
                problems.append(f"{field.name}: config.pbtxt sets {value!r}, the gateway answers {got!r}")
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(json_format.MessageToJson(over_grpc, preserving_proto_field_name=True))


if __name__ == "__main__":
    main()
