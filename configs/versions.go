package configs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// ModelVersion is one version of a model as its configuration and files name it.
type ModelVersion struct {
	Version string // "1", "2", ...
	Path    string // the ONNX file
	// Labels is the label file: the configuration's, or one found beside the model
	// (LabelsFound); "" when there is none (the model's metadata or the class indices name
	// the classes).
	Labels      string
	LabelsFound bool
}

// labelFiles are the names of the label files looked for beside a model, in this order.
func labelFiles() []string { return []string{"labels.txt", "labels.json", "synset.txt"} }

// labelsIn returns the first label file in dir, "" when there is none.
func labelsIn(dir string) string {
	for _, n := range labelFiles() {
		p := filepath.Join(dir, n)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// ForVersion is m's configuration for serving version v: its path and labels are the
// version's.
func (m Model) ForVersion(v ModelVersion) Model {
	m.Path, m.Labels, m.labelsFound = v.Path, v.Labels, v.LabelsFound
	return m
}

// Versions lists the versions of m to serve, by its path and version policy, in ascending
// order. A file path is version 1. A directory holds the versions in numeric subfolders
// (Triton's layout), each with model.onnx (or a single .onnx file) and optionally its own
// label file. A version's labels: a label file in its folder, else the model's labels,
// else a label file beside the model file (or the version folders); labelFiles names them.
func (m *Model) Versions() ([]ModelVersion, error) {
	st, err := os.Stat(m.Path)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Name, err)
	}
	if !st.IsDir() {
		v := ModelVersion{Version: "1", Path: m.Path, Labels: m.Labels}
		if v.Labels == "" {
			v.Labels = labelsIn(filepath.Dir(m.Path))
			v.LabelsFound = v.Labels != ""
		}
		return []ModelVersion{v}, nil
	}
	entries, err := os.ReadDir(m.Path)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Name, err)
	}
	var nums []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 && e.IsDir() && strconv.Itoa(n) == e.Name() {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	if len(nums) == 0 {
		return nil, fmt.Errorf("model %s: %s has no version folder (1/, 2/, ... each with model.onnx)", m.Name, m.Path)
	}
	p := m.VersionPolicy
	switch {
	case p.All:
	case len(p.Specific) > 0:
		var keep []int
		for _, v := range p.Specific {
			if !slices.Contains(nums, v) {
				return nil, fmt.Errorf("model %s: version_policy.specific names version %d; %s has %v", m.Name, v, m.Path, nums)
			}
			keep = append(keep, v)
		}
		slices.Sort(keep)
		nums = slices.Compact(keep)
	default:
		nums = nums[max(0, len(nums)-max(p.Latest, 1)):]
	}
	defLabels, defFound := m.Labels, false
	if defLabels == "" {
		defLabels = labelsIn(m.Path)
		defFound = defLabels != ""
	}
	var out []ModelVersion
	for _, n := range nums {
		dir := filepath.Join(m.Path, strconv.Itoa(n))
		file := filepath.Join(dir, "model.onnx")
		if _, err := os.Stat(file); err != nil {
			onnx, _ := filepath.Glob(filepath.Join(dir, "*.onnx"))
			if len(onnx) != 1 {
				return nil, fmt.Errorf("model %s version %d: %s holds no model.onnx (nor exactly one .onnx file)", m.Name, n, dir)
			}
			file = onnx[0]
		}
		v := ModelVersion{Version: strconv.Itoa(n), Path: file, Labels: labelsIn(dir), LabelsFound: true}
		if v.Labels == "" {
			v.Labels, v.LabelsFound = defLabels, defFound
		}
		out = append(out, v)
	}
	return out, nil
}

// ReadFile reads a configuration, label or token file: a regular file (a device such as
// /dev/zero, a FIFO or a directory never ends or blocks) of at most max bytes.
func ReadFile(path string, max int64) ([]byte, error) {
	// Stat first: opening a FIFO for reading blocks until a writer opens it.
	if st, err := os.Stat(path); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat() // what was opened: a rename between the two is caught here
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%s has %d bytes, more than the %d allowed", path, st.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s has more than the %d bytes allowed", path, max)
	}
	return b, err
}
