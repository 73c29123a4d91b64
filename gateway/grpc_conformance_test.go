package gateway

import (
	"encoding/binary"
	"math"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/imagegate/imagegate/gateway/internal/wire"
)

// TestGRPCConformance checks the server against the protocol's text rather than against the
// generated code: requests are written field by field with the field numbers and wire types
// of the published definition (KServe's grpc_predict_v2.proto; Triton's grpc_service.proto
// for the classification parameter), and the answers are read back the same way.
//
//	ModelInferRequest: model_name 1, model_version 2, id 3, parameters 4, inputs 5,
//	  outputs 6, raw_input_contents 7
//	InferInputTensor: name 1, datatype 2, shape 3 (repeated int64), parameters 4, contents 5
//	InferRequestedOutputTensor: name 1, parameters 2 (map<string, InferParameter>)
//	InferParameter: bool_param 1, int64_param 2, string_param 3
//	ModelInferResponse: model_name 1, model_version 2, id 3, parameters 4, outputs 5,
//	  raw_output_contents 6
//	InferOutputTensor: name 1, datatype 2, shape 3
func TestGRPCConformance(t *testing.T) {
	_, _, cc := newGRPCServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	img := solidPNG(t, 8, 8, 90)
	str := func(b []byte, num protowire.Number, s string) []byte {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendString(b, s)
	}
	msg := func(b []byte, num protowire.Number, m []byte) []byte {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, m)
	}
	for _, tc := range []struct {
		name   string
		packed bool // shape packed (proto3's default) or as separate varints (parsers take both)
		k      int64
	}{{"scores, packed shape", true, 0}, {"classes, unpacked shape", false, 2}} {
		var in []byte
		in = str(in, 1, "input")
		in = str(in, 2, "BYTES")
		if tc.packed {
			in = msg(in, 3, protowire.AppendVarint(nil, 2))
		} else {
			in = protowire.AppendTag(in, 3, protowire.VarintType)
			in = protowire.AppendVarint(in, 2)
		}
		var out []byte
		out = str(out, 1, "output")
		if tc.k > 0 {
			param := protowire.AppendTag(nil, 2, protowire.VarintType) // int64_param
			param = protowire.AppendVarint(param, uint64(tc.k))
			entry := str(nil, 1, "classification")
			entry = msg(entry, 2, param)
			out = msg(out, 2, entry)
		}
		var req []byte
		req = str(req, 1, "m")
		req = str(req, 2, "1")
		req = str(req, 3, "conf-1")
		req = msg(req, 5, in)
		req = msg(req, 6, out)
		raw := wire.AppendBytesElement(wire.AppendBytesElement(nil, img), img)
		req = msg(req, 7, raw)

		var resp rawMessage
		if err := cc.Invoke(t.Context(), grpcModelInfer, &rawMessage{req}, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		fields := map[protowire.Number][][]byte{}
		for b := resp.b; len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 || typ != protowire.BytesType {
				t.Fatalf("%s: field %d of wire type %d in the response", tc.name, num, typ)
			}
			v, m := protowire.ConsumeBytes(b[n:])
			if m < 0 {
				t.Fatalf("%s: malformed response", tc.name)
			}
			fields[num] = append(fields[num], v)
			b = b[n+m:]
		}
		if string(fields[1][0]) != "m" || string(fields[2][0]) != "1" || string(fields[3][0]) != "conf-1" || len(fields[5]) != 1 || len(fields[6]) != 1 {
			t.Fatalf("%s: response fields %q", tc.name, fields)
		}
		var oname, dtype string
		var shape []int64
		for b := fields[5][0]; len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			b = b[n:]
			switch {
			case num == 1 && typ == protowire.BytesType:
				v, m := protowire.ConsumeString(b)
				oname, b = v, b[m:]
			case num == 2 && typ == protowire.BytesType:
				v, m := protowire.ConsumeString(b)
				dtype, b = v, b[m:]
			case num == 3 && typ == protowire.BytesType: // packed, as proto3 writes it
				v, m := protowire.ConsumeBytes(b)
				b = b[m:]
				for len(v) > 0 {
					d, k := protowire.ConsumeVarint(v)
					shape, v = append(shape, int64(d)), v[k:]
				}
			default:
				m := protowire.ConsumeFieldValue(num, typ, b)
				b = b[m:]
			}
		}
		data := fields[6][0]
		if tc.k == 0 {
			if oname != "output" || dtype != "FP32" || !equalShape(shape, []int64{2, 3}) || len(data) != 2*3*4 {
				t.Fatalf("%s: output %q %q %v, %d bytes", tc.name, oname, dtype, shape, len(data))
			}
			if f := math.Float32frombits(binary.LittleEndian.Uint32(data)); !(f > 0) {
				t.Errorf("%s: first score %v", tc.name, f)
			}
			continue
		}
		if dtype != "BYTES" || !equalShape(shape, []int64{2, tc.k}) {
			t.Fatalf("%s: output %q %v", tc.name, dtype, shape)
		}
		n, err := wire.CountBytesElements(data)
		if err != nil || n != 4 {
			t.Fatalf("%s: %d elements, %v", tc.name, n, err)
		}
	}
}

// rawMessage is a message's bytes, sent and received as they are (rawCodec).
type rawMessage struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.(*rawMessage).b, nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	v.(*rawMessage).b = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }
