package ort

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	onnx "github.com/yalue/onnxruntime_go"
	"google.golang.org/protobuf/encoding/protowire"
)

// ModelInfo is what a model file says about itself: its inputs and outputs, and its
// metadata_props.
type ModelInfo struct {
	Inputs, Outputs []TensorInfo
	// Metadata holds the model's metadata_props (empty when it has none).
	Metadata map[string]string
	// Producer is the producer_name the exporter wrote ("pytorch", "tf2onnx", ...).
	Producer string
}

// Describe reads a model's inputs and outputs as ONNX Runtime reports them, and its
// metadata_props and producer from the file's top-level protobuf fields (ONNX Runtime's
// GetModelMetadata would load the model once more). The inputs and outputs are read from the
// file (scanModel) where its declarations say all; else from a temporary session that skips
// graph optimization and weight prepacking (neither changes them, and both cost start-up
// time), which still parses and copies the whole model (docs/startup.md).
func Describe(path string) (ModelInfo, error) {
	var info ModelInfo
	if s, err := scanModel(path, false); err == nil && s.complete {
		info.Inputs, info.Outputs = s.inputs, s.outputs
	} else if info, err = describeSession(path); err != nil {
		return ModelInfo{}, err
	}
	var err error
	if info.Metadata, info.Producer, err = readMetadata(path); err != nil {
		return ModelInfo{}, fmt.Errorf("ort: cannot read the metadata of model %s: %w", path, err)
	}
	return info, nil
}

// describeSession reads a model's inputs and outputs from a temporary ONNX Runtime session.
func describeSession(path string) (ModelInfo, error) {
	opts, err := onnx.NewSessionOptions()
	if err != nil {
		return ModelInfo{}, fmt.Errorf("ort: cannot create session options: %w", err)
	}
	defer opts.Destroy()
	if err := opts.SetGraphOptimizationLevel(onnx.GraphOptimizationLevelDisableAll); err != nil {
		return ModelInfo{}, fmt.Errorf("ort: cannot set the optimization level: %w", err)
	}
	if err := opts.SetIntraOpNumThreads(1); err != nil {
		return ModelInfo{}, fmt.Errorf("ort: cannot set the threads: %w", err)
	}
	if err := opts.AddSessionConfigEntry("session.disable_prepacking", "1"); err != nil {
		return ModelInfo{}, fmt.Errorf("ort: cannot turn prepacking off: %w", err)
	}
	in, out, err := onnx.GetInputOutputInfoWithOptions(path, opts)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("ort: cannot read model %s: %w", path, err)
	}
	return ModelInfo{Inputs: tensorInfos(in), Outputs: tensorInfos(out)}, nil
}

func tensorInfos(infos []onnx.InputOutputInfo) []TensorInfo {
	r := make([]TensorInfo, len(infos))
	for i, x := range infos {
		r[i] = TensorInfo{Name: x.Name, Type: typeName(x.DataType), Shape: append([]int64(nil), x.Dimensions...)}
		if x.OrtValueType != onnx.ONNXTypeTensor { // a sequence or a map: no element type or shape
			r[i].Type, r[i].Shape = x.OrtValueType.String(), nil
		}
	}
	return r
}

// ModelProto's fields read here (onnx.proto), and StringStringEntryProto's.
const (
	modelProducerName  = 2
	modelMetadataProps = 14
	entryKey           = 1
	entryValue         = 2
	// maxMetadataField bounds a producer_name or metadata entry read into memory.
	maxMetadataField = 16 << 20
)

// readMetadata reads a model file's metadata_props and producer_name, seeking past the other
// top-level fields (the graph is most of the file) without reading them.
func readMetadata(path string) (map[string]string, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, "", err
	}
	md, producer := map[string]string{}, ""
	var head [2 * binary.MaxVarintLen64]byte // a tag and a length
	for off := int64(0); off < st.Size(); {
		n, err := f.ReadAt(head[:], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, "", err
		}
		b := head[:n]
		num, typ, tn := protowire.ConsumeTag(b)
		if tn < 0 {
			return nil, "", protowire.ParseError(tn)
		}
		var size int64
		switch typ {
		case protowire.VarintType:
			_, vn := protowire.ConsumeVarint(b[tn:])
			if vn < 0 {
				return nil, "", protowire.ParseError(vn)
			}
			off += int64(tn + vn)
			continue
		case protowire.Fixed32Type:
			size = 4
		case protowire.Fixed64Type:
			size = 8
		case protowire.BytesType:
			l, ln := protowire.ConsumeVarint(b[tn:])
			if ln < 0 {
				return nil, "", protowire.ParseError(ln)
			}
			tn += ln
			size = int64(l)
		default:
			return nil, "", fmt.Errorf("unexpected wire type %d at byte %d", typ, off)
		}
		off += int64(tn)
		if size < 0 || off+size > st.Size() {
			return nil, "", fmt.Errorf("field %d at byte %d runs past the end of the file", num, off)
		}
		if typ == protowire.BytesType && (num == modelMetadataProps || num == modelProducerName) {
			if size > maxMetadataField {
				return nil, "", fmt.Errorf("field %d has %d bytes", num, size)
			}
			v := make([]byte, size)
			if _, err := f.ReadAt(v, off); err != nil {
				return nil, "", err
			}
			if num == modelProducerName {
				producer = string(v)
			} else if k, val, err := metadataEntry(v); err != nil {
				return nil, "", err
			} else {
				md[k] = val
			}
		}
		off += size
	}
	return md, producer, nil
}

// metadataEntry decodes a StringStringEntryProto.
func metadataEntry(b []byte) (key, value string, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", "", protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return "", "", protowire.ParseError(m)
			}
			b = b[m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return "", "", protowire.ParseError(m)
		}
		switch num {
		case entryKey:
			key = string(v)
		case entryValue:
			value = string(v)
		}
		b = b[m:]
	}
	return key, value, nil
}
