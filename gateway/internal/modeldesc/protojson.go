package modeldesc

import (
	"encoding/base64"
	"math"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// protoJSON is a message as Triton's HTTP API writes a model configuration: protobuf's JSON
// mapping with the .proto's field names, but 64-bit integers as JSON numbers (protobuf's
// mapping writes them as strings; Triton rewrites them, and its clients read numbers:
// "dims": [3, 224, 224]). Fields at their zero value are left out, but for the top level's
// scalars, which Triton's clients read without a default (max_batch_size: 0).
func protoJSON(m protoreflect.Message) map[string]any { return messageJSON(m, true) }

func messageJSON(m protoreflect.Message, root bool) map[string]any {
	out := map[string]any{}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !m.Has(fd) {
			if root && fd.Cardinality() != protoreflect.Repeated && fd.Kind() != protoreflect.MessageKind && fd.ContainingOneof() == nil {
				out[string(fd.Name())] = scalarJSON(fd, fd.Default())
			}
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.IsMap():
			mm := map[string]any{}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				mm[k.String()] = valueJSON(fd.MapValue(), mv)
				return true
			})
			out[string(fd.Name())] = mm
		case fd.IsList():
			l := v.List()
			items := make([]any, l.Len())
			for j := range l.Len() {
				items[j] = valueJSON(fd, l.Get(j))
			}
			out[string(fd.Name())] = items
		default:
			out[string(fd.Name())] = valueJSON(fd, v)
		}
	}
	return out
}

func valueJSON(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
		return messageJSON(v.Message(), false)
	}
	return scalarJSON(fd, v)
}

func scalarJSON(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return int32(v.Enum())
	case protoreflect.BytesKind:
		return base64.StdEncoding.EncodeToString(v.Bytes())
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		switch f := v.Float(); { // NaN and the infinities as protobuf's JSON mapping names them
		case math.IsNaN(f):
			return "NaN"
		case math.IsInf(f, 1):
			return "Infinity"
		case math.IsInf(f, -1):
			return "-Infinity"
		default:
			return f
		}
	}
	return v.Interface() // bool, string, and integers of every width as numbers
}
