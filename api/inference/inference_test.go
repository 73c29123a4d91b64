package inference

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestFieldNumbers holds the definition to the published ones on what the clients depend on.
// The numbers were read from KServe's grpc_predict_v2.proto (kserve/kserve,
// docs/predict-api/v2/grpc_predict_v2.proto), Triton's grpc_service.proto and
// model_config.proto (triton-inference-server/common, protobuf/); a field that only Triton
// defines says so.
func TestFieldNumbers(t *testing.T) {
	for _, c := range []struct {
		msg   protoreflect.ProtoMessage
		field string
		num   protoreflect.FieldNumber
		kind  protoreflect.Kind
	}{
		{&ModelInferRequest{}, "model_name", 1, protoreflect.StringKind},
		{&ModelInferRequest{}, "model_version", 2, protoreflect.StringKind},
		{&ModelInferRequest{}, "id", 3, protoreflect.StringKind},
		{&ModelInferRequest{}, "parameters", 4, protoreflect.MessageKind},
		{&ModelInferRequest{}, "inputs", 5, protoreflect.MessageKind},
		{&ModelInferRequest{}, "outputs", 6, protoreflect.MessageKind},
		{&ModelInferRequest{}, "raw_input_contents", 7, protoreflect.BytesKind},
		{&ModelInferRequest_InferInputTensor{}, "name", 1, protoreflect.StringKind},
		{&ModelInferRequest_InferInputTensor{}, "datatype", 2, protoreflect.StringKind},
		{&ModelInferRequest_InferInputTensor{}, "shape", 3, protoreflect.Int64Kind},
		{&ModelInferRequest_InferInputTensor{}, "contents", 5, protoreflect.MessageKind},
		{&ModelInferRequest_InferRequestedOutputTensor{}, "parameters", 2, protoreflect.MessageKind},
		{&ModelInferResponse{}, "id", 3, protoreflect.StringKind},
		{&ModelInferResponse{}, "outputs", 5, protoreflect.MessageKind},
		{&ModelInferResponse{}, "raw_output_contents", 6, protoreflect.BytesKind},
		{&ModelInferResponse_InferOutputTensor{}, "shape", 3, protoreflect.Int64Kind},
		{&InferParameter{}, "bool_param", 1, protoreflect.BoolKind},
		{&InferParameter{}, "int64_param", 2, protoreflect.Int64Kind},
		{&InferParameter{}, "string_param", 3, protoreflect.StringKind},
		{&InferParameter{}, "double_param", 4, protoreflect.DoubleKind}, // Triton's
		{&InferParameter{}, "uint64_param", 5, protoreflect.Uint64Kind}, // Triton's
		{&InferTensorContents{}, "fp32_contents", 6, protoreflect.FloatKind},
		{&InferTensorContents{}, "bytes_contents", 8, protoreflect.BytesKind},
		{&ModelMetadataResponse{}, "platform", 3, protoreflect.StringKind},
		{&ModelMetadataResponse{}, "inputs", 4, protoreflect.MessageKind},
		{&ModelMetadataResponse_TensorMetadata{}, "shape", 3, protoreflect.Int64Kind},
		{&ServerMetadataResponse{}, "extensions", 3, protoreflect.StringKind},
		// Triton's extensions.
		{&ModelStreamInferResponse{}, "error_message", 1, protoreflect.StringKind},
		{&ModelStreamInferResponse{}, "infer_response", 2, protoreflect.MessageKind},
		{&ModelConfigResponse{}, "config", 1, protoreflect.MessageKind},
		{&ModelConfig{}, "name", 1, protoreflect.StringKind},
		{&ModelConfig{}, "platform", 2, protoreflect.StringKind},
		{&ModelConfig{}, "version_policy", 3, protoreflect.MessageKind},
		{&ModelConfig{}, "max_batch_size", 4, protoreflect.Int32Kind},
		{&ModelConfig{}, "input", 5, protoreflect.MessageKind},
		{&ModelConfig{}, "output", 6, protoreflect.MessageKind},
		{&ModelConfig{}, "instance_group", 7, protoreflect.MessageKind},
		{&ModelConfig{}, "dynamic_batching", 11, protoreflect.MessageKind},
		{&ModelConfig{}, "parameters", 14, protoreflect.MessageKind},
		{&ModelConfig{}, "backend", 17, protoreflect.StringKind},
		{&ModelInput{}, "data_type", 2, protoreflect.EnumKind},
		{&ModelInput{}, "format", 3, protoreflect.EnumKind},
		{&ModelInput{}, "dims", 4, protoreflect.Int64Kind},
		{&ModelOutput{}, "dims", 3, protoreflect.Int64Kind},
		{&ModelOutput{}, "label_filename", 4, protoreflect.StringKind},
		{&ModelInstanceGroup{}, "count", 2, protoreflect.Int32Kind},
		{&ModelInstanceGroup{}, "kind", 4, protoreflect.EnumKind},
		{&ModelDynamicBatching{}, "max_queue_delay_microseconds", 2, protoreflect.Uint64Kind},
		{&ModelStatistics{}, "inference_count", 4, protoreflect.Uint64Kind},
		{&ModelStatistics{}, "execution_count", 5, protoreflect.Uint64Kind},
		{&ModelStatistics{}, "inference_stats", 6, protoreflect.MessageKind},
		{&InferStatistics{}, "queue", 3, protoreflect.MessageKind},
		{&InferStatistics{}, "compute_infer", 5, protoreflect.MessageKind},
		{&StatisticDuration{}, "ns", 2, protoreflect.Uint64Kind},
		{&RepositoryIndexResponse_ModelIndex{}, "state", 3, protoreflect.StringKind},
		{&RepositoryModelLoadRequest{}, "model_name", 2, protoreflect.StringKind},
		{&RepositoryModelLoadRequest{}, "parameters", 3, protoreflect.MessageKind},
		{&ModelRepositoryParameter{}, "bytes_param", 4, protoreflect.BytesKind},
	} {
		md := c.msg.ProtoReflect().Descriptor()
		f := md.Fields().ByName(protoreflect.Name(c.field))
		if f == nil {
			t.Errorf("%s has no field %s", md.FullName(), c.field)
			continue
		}
		if f.Number() != c.num || f.Kind() != c.kind {
			t.Errorf("%s.%s is field %d of kind %v; the published definition has %d, %v", md.FullName(), c.field, f.Number(), f.Kind(), c.num, c.kind)
		}
	}
	// The oneofs that clients see as such.
	if o := (&ModelConfig{}).ProtoReflect().Descriptor().Fields().ByName("dynamic_batching").ContainingOneof(); o == nil || o.Name() != "scheduling_choice" {
		t.Errorf("ModelConfig.dynamic_batching: oneof %v, want scheduling_choice", o)
	}
	if o := (&InferParameter{}).ProtoReflect().Descriptor().Oneofs().ByName("parameter_choice"); o == nil || o.Fields().Len() != 5 {
		t.Errorf("InferParameter.parameter_choice: %v", o)
	}
}

// TestEnumValues: the numbers of the enum values clients read, from Triton's model_config.proto.
func TestEnumValues(t *testing.T) {
	for _, c := range []struct {
		got  protoreflect.Enum
		want protoreflect.EnumNumber
	}{
		{DataType_TYPE_UINT8, 2}, {DataType_TYPE_INT64, 9}, {DataType_TYPE_FP16, 10},
		{DataType_TYPE_FP32, 11}, {DataType_TYPE_STRING, 13}, {DataType_TYPE_BF16, 14},
		{ModelInput_FORMAT_NONE, 0}, {ModelInput_FORMAT_NHWC, 1}, {ModelInput_FORMAT_NCHW, 2},
		{ModelInstanceGroup_KIND_GPU, 1}, {ModelInstanceGroup_KIND_CPU, 2},
	} {
		if n := c.got.Number(); n != c.want {
			t.Errorf("%s = %d, published %d", c.got.Descriptor().Values().ByNumber(n).FullName(), n, c.want)
		}
	}
}

// TestServiceNames: the gRPC paths clients call are the package's, service's and methods'.
func TestServiceNames(t *testing.T) {
	for got, want := range map[string]string{
		GRPCInferenceService_ModelInfer_FullMethodName:            "/inference.GRPCInferenceService/ModelInfer",
		GRPCInferenceService_ModelStreamInfer_FullMethodName:      "/inference.GRPCInferenceService/ModelStreamInfer",
		GRPCInferenceService_ServerLive_FullMethodName:            "/inference.GRPCInferenceService/ServerLive",
		GRPCInferenceService_ModelConfig_FullMethodName:           "/inference.GRPCInferenceService/ModelConfig",
		GRPCInferenceService_RepositoryModelUnload_FullMethodName: "/inference.GRPCInferenceService/RepositoryModelUnload",
	} {
		if got != want {
			t.Errorf("method %s, want %s", got, want)
		}
	}
	sd := GRPCInferenceService_ServiceDesc
	if sd.ServiceName != "inference.GRPCInferenceService" || len(sd.Methods) != 11 || len(sd.Streams) != 1 ||
		!sd.Streams[0].ClientStreams || !sd.Streams[0].ServerStreams {
		t.Errorf("service %s: %d unary methods, streams %+v", sd.ServiceName, len(sd.Methods), sd.Streams)
	}
}

// TestGeneratedUpToDate compares api/inference/generated.sha256, which make proto writes, with
// the files: a .proto edited without make proto, or generated code edited by hand, fails
// here, where protoc need not be installed.
func TestGeneratedUpToDate(t *testing.T) {
	f, err := os.Open("generated.sha256")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("generated.sha256: line %q", sc.Text())
		}
		listed[name] = true
		data, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("generated.sha256 lists %s: %v", name, err)
			continue
		}
		if h := sha256.Sum256(data); hex.EncodeToString(h[:]) != sum {
			t.Errorf("%s is not the file make proto generated or read: run make proto (and commit its output)", name)
		}
	}
	files, _ := filepath.Glob("*.proto")
	gen, _ := filepath.Glob("*.pb.go")
	for _, name := range append(files, gen...) {
		if !listed[name] {
			t.Errorf("%s is not in generated.sha256: run make proto", name)
		}
	}
}

// TestGeneratorVersions: the generated headers name the generators that scripts/proto.sh pins,
// and protoc-gen-go's version is that of the protobuf runtime in go.mod (as
// scripts/proto.sh installs it).
func TestGeneratorVersions(t *testing.T) {
	script, err := os.ReadFile("../../scripts/proto.sh")
	if err != nil {
		t.Fatal(err)
	}
	pin := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `=(\S+)$`).FindSubmatch(script)
		if m == nil {
			t.Fatalf("scripts/proto.sh does not set %s", name)
		}
		return string(m[1])
	}
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*google\.golang\.org/protobuf (v\S+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod does not require google.golang.org/protobuf")
	}
	runtimeVersion := string(m[1])
	header := func(file string) string {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(string(data), "// versions:\n")
		head, _, _ := strings.Cut(rest, "// source:")
		return head
	}
	for _, c := range []struct{ file, want string }{
		{"grpc_service.pb.go", "// \tprotoc-gen-go " + runtimeVersion + "\n// \tprotoc        v" + pin("PROTOC_VERSION") + "\n"},
		{"model_config.pb.go", "// \tprotoc-gen-go " + runtimeVersion + "\n// \tprotoc        v" + pin("PROTOC_VERSION") + "\n"},
		{"grpc_service_grpc.pb.go", "// - protoc-gen-go-grpc " + pin("PROTOC_GEN_GO_GRPC_VERSION") + "\n// - protoc             v" + pin("PROTOC_VERSION") + "\n"},
	} {
		if got := header(c.file); got != c.want {
			t.Errorf("%s was generated by\n%swant\n%s(run make proto)", c.file, got, c.want)
		}
	}
	gen, _ := filepath.Glob("*.pb.go")
	if want := []string{"grpc_service.pb.go", "grpc_service_grpc.pb.go", "model_config.pb.go"}; !slices.Equal(gen, want) {
		t.Errorf("generated files %v, want %v", gen, want)
	}
}

// TestTritonModelConfigVendored: model_config.proto is Triton's published file as it is
// (scripts/proto.sh pins its commit and checksum), with its licence beside it, so that a
// config.pbtxt is read with Triton's own schema.
func TestTritonModelConfigVendored(t *testing.T) {
	script, err := os.ReadFile("../../scripts/proto.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TRITON_MODEL_CONFIG_SHA256=([0-9a-f]{64})$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/proto.sh does not pin TRITON_MODEL_CONFIG_SHA256")
	}
	data, err := os.ReadFile("model_config.proto")
	if err != nil {
		t.Fatal(err)
	}
	if h := sha256.Sum256(data); hex.EncodeToString(h[:]) != string(m[1]) {
		t.Errorf("model_config.proto is not the Triton file scripts/proto.sh pins (sha256 %x)", h)
	}
	lic, err := os.ReadFile("LICENSE.triton")
	if err != nil || !strings.Contains(string(lic), "NVIDIA CORPORATION") || !strings.Contains(string(lic), "Redistribution and use") {
		t.Errorf("LICENSE.triton, Triton's BSD licence, is missing or not it (%v)", err)
	}
	// Messages of Triton's that only the full file has: a config.pbtxt using them parses.
	for _, msg := range []protoreflect.ProtoMessage{&ModelSequenceBatching{}, &ModelEnsembling{}, &ModelOptimizationPolicy{}, &ModelWarmup{}} {
		if msg.ProtoReflect().Descriptor().ParentFile().Path() != "model_config.proto" {
			t.Errorf("%s is not from model_config.proto", msg.ProtoReflect().Descriptor().FullName())
		}
	}
}
