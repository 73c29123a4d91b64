package ort

import (
	"fmt"

	onnx "github.com/yalue/onnxruntime_go"
)

// Sessions with several outputs, of other element types and shapes than a classifier's
// [batch, classes] scores: an embedding's features, a detector's boxes, scores, classes and
// count.
//
// An output whose shape is fixed but for its batch axis is allocated once, at the largest
// batch, and a run of n rows writes into a view of its first n rows, as the classifier's
// scores are. An output with another dynamic axis (a model with NMS built in answering as
// many rows as it kept, torchvision's detectors) cannot be: its size is known only once the
// model has run, and the most it could be is not declared. ONNX Runtime allocates it for each
// run; it is copied into Go memory (onnxruntime_go does), kept until the next run, and freed
// then. That is one allocation of the output's size per batch, small beside the run itself;
// bounding it by a guess instead would refuse a model that answers more.

// OutputSpec describes one output a session runs.
type OutputSpec struct {
	TensorInfo
	// Batched: the output's first axis is the batch (dynamic, or 1 with the input's batch
	// fixed at 1). An output without it is served only with batches of one: the whole tensor
	// is that image's.
	Batched bool
	// Dynamic: an axis other than the batch has no fixed size (ONNX Runtime allocates the
	// output per run).
	Dynamic bool
	// Row is the values per image when the output is not Dynamic.
	Row int
}

// Output is one output of a run. Its slices are owned by the session and valid until its
// next run.
type Output struct {
	Name string
	// Shape is the output's shape as the run gave it: batch axis first when Batched.
	Shape   []int64
	Batched bool
	// Exactly one of these holds the values, by the output's element type.
	F32 []float32
	I64 []int64
	I32 []int32
}

// Len is the number of values the output holds.
func (o *Output) Len() int { return len(o.F32) + len(o.I64) + len(o.I32) }

// Row returns the range [lo, hi) of the values that belong to image i of a run of n images:
// the i-th of n equal parts when Batched, else (a run of one image) all of them.
func (o *Output) Row(i, n int) (lo, hi int) {
	if !o.Batched || n <= 1 {
		return 0, o.Len()
	}
	per := o.Len() / n
	return i * per, (i + 1) * per
}

// outputSpecs checks cfg.OutputNames against the model's outputs: each must exist, hold
// float32, int64 or int32 values and, unless the batch is fixed at one, have a batch axis.
func outputSpecs(cfg SessionConfig, outs []TensorInfo, batchOne bool) ([]OutputSpec, error) {
	specs := make([]OutputSpec, len(cfg.OutputNames))
	for i, name := range cfg.OutputNames {
		t, ok := find(outs, name)
		if !ok {
			return nil, fmt.Errorf("%w: %s has no output %q (outputs: %v)", ErrModel, cfg.ModelPath, name, outs)
		}
		switch t.Type {
		case "float32", "int64", "int32":
		default:
			return nil, fmt.Errorf("%w: output %s is %s; float32, int64 and int32 outputs are served", ErrModel, t, t.Type)
		}
		sp := OutputSpec{TensorInfo: t}
		sp.Batched = len(t.Shape) > 0 && (t.Shape[0] == -1 || t.Shape[0] == 1 && batchOne)
		if !sp.Batched && cfg.MaxBatchSize > 1 {
			return nil, fmt.Errorf("%w: output %s has no batch axis (its first axis is not dynamic): serve it with batching.max_batch_size: 1", ErrModel, t)
		}
		sp.Row = 1
		dims := t.Shape
		if sp.Batched {
			dims = dims[1:]
		}
		for _, d := range dims {
			if d < 0 {
				sp.Dynamic, sp.Row = true, 0
				break
			}
			sp.Row *= int(d)
		}
		specs[i] = sp
	}
	return specs, nil
}

// multiOut is a session's outputs: buffers and views for the static ones, the last run's
// values for the dynamic ones.
type multiOut struct {
	specs []OutputSpec
	f32   [][]float32 // per output: its buffer at the largest batch (static float32 outputs)
	i64   [][]int64
	i32   [][]int32
	views [][]onnx.Value // per batch size n-1, per output: a view of n rows (nil: dynamic)
	shape [][][]int64    // the views' shapes, alike
	last  []onnx.Value   // per output: what ONNX Runtime allocated in the last run (dynamic)
	res   []Output
}

func newMultiOut(specs []OutputSpec, maxBatch int) *multiOut {
	m := &multiOut{specs: specs, f32: make([][]float32, len(specs)), i64: make([][]int64, len(specs)), i32: make([][]int32, len(specs)),
		views: make([][]onnx.Value, maxBatch), shape: make([][][]int64, maxBatch), last: make([]onnx.Value, len(specs)), res: make([]Output, len(specs))}
	for i, sp := range specs {
		m.res[i] = Output{Name: sp.Name, Batched: sp.Batched}
		if sp.Dynamic {
			continue
		}
		n := sp.Row
		if sp.Batched {
			n *= maxBatch
		}
		switch sp.Type {
		case "float32":
			m.f32[i] = make([]float32, n)
		case "int64":
			m.i64[i] = make([]int64, n)
		case "int32":
			m.i32[i] = make([]int32, n)
		}
	}
	return m
}

func (m *multiOut) names() []string {
	n := make([]string, len(m.specs))
	for i, sp := range m.specs {
		n[i] = sp.Name
	}
	return n
}

// viewsOf returns the output views of a run of n rows, made on first use.
func (m *multiOut) viewsOf(n int) ([]onnx.Value, error) {
	if v := m.views[n-1]; v != nil {
		return v, nil
	}
	v := make([]onnx.Value, len(m.specs))
	shapes := make([][]int64, len(m.specs))
	for i, sp := range m.specs {
		if sp.Dynamic {
			continue
		}
		shape := append(onnx.Shape(nil), sp.Shape...)
		rows := sp.Row
		if sp.Batched {
			shape[0] = int64(n)
			rows *= n
		}
		var t onnx.Value
		var err error
		switch sp.Type {
		case "float32":
			t, err = onnx.NewTensor(shape, m.f32[i][:rows])
		case "int64":
			t, err = onnx.NewTensor(shape, m.i64[i][:rows])
		case "int32":
			t, err = onnx.NewTensor(shape, m.i32[i][:rows])
		}
		if err != nil {
			for _, x := range v {
				if x != nil {
					x.Destroy()
				}
			}
			return nil, fmt.Errorf("ort: cannot create a view of %d rows of output %s: %w", n, sp.Name, err)
		}
		v[i], shapes[i] = t, shape
	}
	m.views[n-1], m.shape[n-1] = v, shapes
	return v, nil
}

// freeLast frees what ONNX Runtime allocated for the previous run's dynamic outputs.
func (m *multiOut) freeLast() {
	for i, v := range m.last {
		if v != nil {
			v.Destroy()
			m.last[i] = nil
		}
	}
}

func (m *multiOut) destroy() {
	m.freeLast()
	for _, vs := range m.views {
		for _, v := range vs {
			if v != nil {
				v.Destroy()
			}
		}
	}
	m.views = nil
}

// Outputs describes the outputs RunOutputs returns, in the order of OutputNames (nil for a
// classifier's session).
func (s *Session[T]) Outputs() []OutputSpec {
	if s.multi == nil {
		return nil
	}
	return s.multi.specs
}

// RunOutputs runs the model on the first n input rows of a session made with OutputNames and
// returns its outputs in their order. The result and its slices are owned by the session and
// valid until its next run.
func (s *Session[T]) RunOutputs(n int) ([]Output, error) {
	m := s.multi
	if m == nil {
		return nil, fmt.Errorf("ort: the session has no OutputNames: call Run")
	}
	if n < 1 || n > len(s.inViews) {
		return nil, fmt.Errorf("ort: batch of %d rows, the session holds 1 to %d", n, len(s.inViews))
	}
	if s.inViews[n-1] == nil {
		in, err := onnx.NewTensor(append(onnx.NewShape(int64(n)), s.inShape...), s.in[:n*s.rowIn])
		if err != nil {
			return nil, fmt.Errorf("ort: cannot create an input view of %d rows: %w", n, err)
		}
		s.inViews[n-1] = in
	}
	views, err := m.viewsOf(n)
	if err != nil {
		return nil, err
	}
	m.freeLast()
	copy(s.outputs, views) // dynamic outputs stay nil: ONNX Runtime allocates them
	s.inputs[0] = s.inViews[n-1]
	if err := s.core.sess.Run(s.inputs, s.outputs); err != nil {
		for i, v := range views {
			if v == nil && s.outputs[i] != nil {
				s.outputs[i].Destroy()
			}
		}
		return nil, fmt.Errorf("ort: run of %d rows: %w", n, err)
	}
	for i, sp := range m.specs {
		r := &m.res[i]
		r.F32, r.I64, r.I32 = nil, nil, nil
		if !sp.Dynamic {
			rows := sp.Row
			if sp.Batched {
				rows *= n
			}
			r.Shape = m.shape[n-1][i]
			switch sp.Type {
			case "float32":
				r.F32 = m.f32[i][:rows]
			case "int64":
				r.I64 = m.i64[i][:rows]
			case "int32":
				r.I32 = m.i32[i][:rows]
			}
			continue
		}
		v := s.outputs[i]
		m.last[i] = v
		r.Shape = v.GetShape()
		switch t := v.(type) {
		case *onnx.Tensor[float32]:
			r.F32 = t.GetData()
		case *onnx.Tensor[int64]:
			r.I64 = t.GetData()
		case *onnx.Tensor[int32]:
			r.I32 = t.GetData()
		default:
			return nil, fmt.Errorf("ort: output %s came back as %T", sp.Name, v)
		}
		if sp.Batched && n > 1 && (len(r.Shape) == 0 || r.Shape[0] != int64(n)) {
			return nil, fmt.Errorf("ort: output %s came back as %v for a batch of %d", sp.Name, r.Shape, n)
		}
	}
	return m.res, nil
}
