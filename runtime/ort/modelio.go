package ort

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"

	onnx "github.com/yalue/onnxruntime_go"
	"google.golang.org/protobuf/encoding/protowire"
)

// Reading a model's declared inputs and outputs without ONNX Runtime.
//
// onnxruntime_go learns a model's inputs and outputs from a temporary session: ONNX Runtime
// parses the whole file, copies its weights and optimizes the graph, to throw it away. At
// start-up that was the largest single step after the session itself. scanModel reads the
// file once, as a stream: it decodes the graph's inputs, outputs and initializer names and
// skips the weights' bytes, while hashing every byte (the model cache's key) and noting
// whether any tensor keeps its data in another file.

// ONNX protobuf field numbers for what scanModel reads, beside rewrite.go's (onnx.proto3).
const (
	modelFunctions = 25

	graphOutput            = 12
	graphSparseInitializer = 15

	attrT             = 5
	attrG             = 6
	attrTensors       = 10
	attrGraphs        = 11
	attrSparseTensor  = 22
	attrSparseTensors = 23

	functionNode = 7

	sparseValues  = 1
	sparseIndices = 2

	valueInfoType = 2
	typeTensor    = 1 // TypeProto.tensor_type
	tensorElem    = 1 // TypeProto.Tensor.elem_type
	tensorShape   = 2
	shapeDim      = 1
	dimValue      = 1

	tensorExternal = 1 // TensorProto.DataLocation EXTERNAL
)

// maxScannedMessage bounds a message scanModel holds whole (a node, an input, a sparse
// initializer); weights are streamed past, never held.
const maxScannedMessage = 64 << 20

// modelScan is what scanModel learns of a model file.
type modelScan struct {
	path         string
	sum          [sha256.Size]byte // of the whole file
	size         int64
	mode         os.FileMode
	inputs       []TensorInfo // as declared, initializers left out (ONNX Runtime's inputs)
	outputs      []TensorInfo
	complete     bool // every input and output is a tensor whose shape ONNX Runtime cannot refine
	externalData bool // some tensor's data lives in another file
	// initInputs counts the graph inputs that are initializers too (old exporters list every
	// weight as an input): initinputs.go drops them before ONNX Runtime loads the model.
	initInputs int
}

// scanModel reads the model at path in one pass (see above). Without hash it seeks past the
// weights instead of reading them, and leaves sum zero.
func scanModel(path string, hash bool) (*modelScan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	s := &modelScan{path: path, complete: true, mode: fi.Mode()}
	h := sha256.New()
	r := &pbReader{r: bufio.NewReaderSize(io.TeeReader(f, h), 64<<10)}
	if !hash {
		r = &pbReader{r: bufio.NewReaderSize(f, 16<<10), seek: f}
	}
	var inputs []TensorInfo
	inits := map[string]bool{}
	err = r.fields(-1, func(num protowire.Number, typ protowire.Type, n int64) error {
		switch {
		case num == modelGraph && typ == protowire.BytesType:
			return r.fields(n, func(num protowire.Number, typ protowire.Type, n int64) error {
				if typ != protowire.BytesType {
					return r.skip(typ, n)
				}
				switch num {
				case graphInput, graphOutput:
					b, err := r.message(n)
					if err != nil {
						return err
					}
					info, complete := valueInfo(b, num == graphOutput)
					s.complete = s.complete && complete
					if num == graphInput {
						inputs = append(inputs, info)
					} else {
						s.outputs = append(s.outputs, info)
					}
				case graphInitializer:
					return r.fields(n, func(num protowire.Number, typ protowire.Type, n int64) error {
						switch {
						case num == tensorName && typ == protowire.BytesType:
							b, err := r.message(n)
							inits[string(b)] = true
							return err
						case num == tensorLocation && typ == protowire.VarintType:
							s.externalData = s.externalData || n == tensorExternal
						}
						return r.skip(typ, n)
					})
				case graphNode, graphSparseInitializer:
					b, err := r.message(n)
					if err != nil {
						return err
					}
					if num == graphSparseInitializer {
						s.externalData = s.externalData || sparseExternal(b)
						if vs, err := fields(b); err == nil {
							for _, v := range vs {
								if v.num == sparseValues {
									if name, _, _, _, err := tensorInfo(v.val); err == nil {
										inits[name] = true
									}
								}
							}
						}
					} else {
						s.externalData = s.externalData || nodeExternal(b)
					}
				default:
					return r.skip(typ, n)
				}
				return nil
			})
		case num == modelFunctions && typ == protowire.BytesType:
			b, err := r.message(n)
			if err != nil {
				return err
			}
			fs, err := fields(b)
			if err != nil {
				return err
			}
			for _, f := range fs {
				if f.num == functionNode {
					s.externalData = s.externalData || nodeExternal(f.val)
				}
			}
			return nil
		}
		return r.skip(typ, n)
	})
	if err != nil {
		return nil, fmt.Errorf("ort: cannot read model %s: %w", path, err)
	}
	for _, in := range inputs {
		if !inits[in.Name] {
			s.inputs = append(s.inputs, in)
		} else {
			s.initInputs++
		}
	}
	s.size = r.off
	if hash {
		h.Sum(s.sum[:0])
	}
	return s, nil
}

// valueInfo decodes a graph input or output. complete is false when ONNX Runtime may report
// more than the declaration says: not a tensor, no shape, or (for an output, whose shape
// inference can refine) a dimension after the batch axis without a fixed size.
func valueInfo(b []byte, output bool) (info TensorInfo, complete bool) {
	fs, err := fields(b)
	if err != nil {
		return info, false
	}
	hasShape := false
	for _, f := range fs {
		switch f.num {
		case valueInfoName:
			info.Name = string(f.val)
		case valueInfoType:
			tfs, _ := fields(f.val)
			for _, tf := range tfs {
				if tf.num != typeTensor {
					continue
				}
				ts, _ := fields(tf.val)
				for _, t := range ts {
					switch t.num {
					case tensorElem:
						info.Type = typeName(onnx.TensorElementDataType(varintOf(t)))
					case tensorShape:
						hasShape = true
						ds, _ := fields(t.val)
						for _, d := range ds {
							if d.num != shapeDim {
								continue
							}
							dim := int64(-1) // a named (symbolic) or unknown dimension
							dfs, _ := fields(d.val)
							for _, df := range dfs {
								if df.num == dimValue {
									dim = int64(varintOf(df))
								}
							}
							info.Shape = append(info.Shape, dim)
						}
					}
				}
			}
		}
	}
	if !hasShape || info.Type == "" || info.Type == onnx.TensorElementDataType(onnx.TensorElementDataTypeUndefined).String() {
		return info, false
	}
	if output {
		for _, d := range info.Shape[min(1, len(info.Shape)):] {
			if d == -1 {
				return info, false
			}
		}
	}
	return info, true
}

// varintOf is the value of a varint field.
func varintOf(f field) uint64 {
	_, _, n := protowire.ConsumeTag(f.raw)
	v, _ := protowire.ConsumeVarint(f.raw[n:])
	return v
}

// nodeExternal reports whether an encoded NodeProto holds a tensor (in an attribute, or in a
// subgraph's initializers and nodes) whose data is in another file.
func nodeExternal(b []byte) bool {
	fs, err := fields(b)
	if err != nil {
		return true // unreadable: the caller treats it as not cacheable
	}
	for _, f := range fs {
		if f.num != nodeAttribute {
			continue
		}
		afs, err := fields(f.val)
		if err != nil {
			return true
		}
		for _, a := range afs {
			switch a.num {
			case attrT, attrTensors:
				if _, _, _, ext, err := tensorInfo(a.val); err != nil || ext {
					return true
				}
			case attrSparseTensor, attrSparseTensors:
				if sparseExternal(a.val) {
					return true
				}
			case attrG, attrGraphs:
				if graphExternal(a.val) {
					return true
				}
			}
		}
	}
	return false
}

func graphExternal(b []byte) bool {
	fs, err := fields(b)
	if err != nil {
		return true
	}
	for _, f := range fs {
		switch f.num {
		case graphInitializer:
			if _, _, _, ext, err := tensorInfo(f.val); err != nil || ext {
				return true
			}
		case graphSparseInitializer:
			if sparseExternal(f.val) {
				return true
			}
		case graphNode:
			if nodeExternal(f.val) {
				return true
			}
		}
	}
	return false
}

func sparseExternal(b []byte) bool {
	fs, err := fields(b)
	if err != nil {
		return true
	}
	for _, f := range fs {
		if f.num == sparseValues || f.num == sparseIndices {
			if _, _, _, ext, err := tensorInfo(f.val); err != nil || ext {
				return true
			}
		}
	}
	return false
}

// pbReader decodes protobuf fields from a stream, counting the bytes read.
type pbReader struct {
	r    *bufio.Reader
	seek io.Seeker // r's source, when skipping may seek past what is not buffered
	off  int64
}

var errTruncated = errors.New("truncated protobuf message")

func (p *pbReader) byte() (byte, error) {
	c, err := p.r.ReadByte()
	if err == nil {
		p.off++
	}
	return c, err
}

func (p *pbReader) varint() (uint64, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		c, err := p.byte()
		if err != nil {
			if err == io.EOF {
				err = errTruncated
			}
			return 0, err
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, errors.New("protobuf varint overflows 64 bits")
}

// fields calls f for each field of the message of n bytes that follows (n < 0: up to the end
// of the stream). For a length-delimited field n is its length, and f must consume exactly
// that (skip, message or fields); for a varint it is the value, for the others 0.
func (p *pbReader) fields(n int64, f func(num protowire.Number, typ protowire.Type, n int64) error) error {
	end := p.off + n
	for n < 0 || p.off < end {
		if n < 0 {
			if _, err := p.r.Peek(1); err == io.EOF {
				return nil
			}
		}
		tag, err := p.varint()
		if err != nil {
			return err
		}
		num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
		if num <= 0 {
			return fmt.Errorf("protobuf field number %d", num)
		}
		var v int64
		switch typ {
		case protowire.VarintType:
			u, err := p.varint()
			if err != nil {
				return err
			}
			v = int64(u)
		case protowire.BytesType:
			u, err := p.varint()
			if err != nil {
				return err
			}
			if u > 1<<62 || (n >= 0 && p.off+int64(u) > end) {
				return errTruncated
			}
			v = int64(u)
		case protowire.Fixed32Type, protowire.Fixed64Type:
		default:
			return fmt.Errorf("protobuf wire type %d", typ)
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	if p.off != end {
		return errTruncated
	}
	return nil
}

// skip consumes a field's value after its tag (fields has read a varint's already).
func (p *pbReader) skip(typ protowire.Type, n int64) error {
	switch typ {
	case protowire.Fixed32Type:
		n = 4
	case protowire.Fixed64Type:
		n = 8
	case protowire.BytesType:
	default:
		return nil
	}
	if b := int64(p.r.Buffered()); p.seek != nil && n > b {
		end, err := p.seek.Seek(n-b, io.SeekCurrent)
		if err != nil {
			return err
		}
		size, err := p.seek.Seek(0, io.SeekEnd)
		if err == nil && end > size {
			err = errTruncated
		}
		if err == nil {
			_, err = p.seek.Seek(end, io.SeekStart)
		}
		p.r.Reset(p.seek.(io.Reader))
		p.off += n
		return err
	}
	d, err := p.r.Discard(int(n))
	p.off += int64(d)
	if err == io.EOF {
		err = errTruncated
	}
	return err
}

// message reads a length-delimited value of n bytes whole.
func (p *pbReader) message(n int64) ([]byte, error) {
	if n > maxScannedMessage {
		return nil, fmt.Errorf("a protobuf message of %d bytes where at most %d are expected", n, maxScannedMessage)
	}
	b := make([]byte, n)
	m, err := io.ReadFull(p.r, b)
	p.off += int64(m)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = errTruncated
	}
	return b, err
}
