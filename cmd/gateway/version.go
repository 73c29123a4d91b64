package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"golang.org/x/sys/cpu"

	"github.com/imagegate/imagegate/gateway"
	"github.com/imagegate/imagegate/preprocess"
	"github.com/imagegate/imagegate/runtime/ort"
)

// printVersion writes -version: the build, Go, ONNX Runtime (loaded as the server would load
// it, without a configuration: $ONNXRUNTIME_LIB, then .deps/onnxruntime/) and what this CPU
// makes the gateway use.
func printVersion(w io.Writer) {
	fmt.Fprintf(w, "imagegate %s\n", gateway.Version)
	goLine := runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				fmt.Fprintf(w, "revision:          %s\n", s.Value)
			case "GOEXPERIMENT", "GOAMD64":
				goLine += " " + s.Key + "=" + s.Value
			}
		}
	}
	fmt.Fprintf(w, "go:                %s\n", goLine)
	lib := ort.FindLibrary("")
	if err := ort.Init(lib); err != nil {
		fmt.Fprintf(w, "onnxruntime:       not loaded: %v\n", err)
	} else {
		fmt.Fprintf(w, "onnxruntime:       %s (%s)\n", ort.Version(), lib)
	}
	fmt.Fprintf(w, "cpu features:      %s\n", cpuFeatures())
	fmt.Fprintf(w, "resampler kernels: %s\n", preprocess.ResamplerKernels())
	rewrite := "does not apply with hardswish_rewrite auto (it pays on x86-64 CPUs with AVX-512)"
	if ort.HardSwishRewritePays() {
		rewrite = "applies with hardswish_rewrite auto (x86-64 with AVX-512)"
	}
	fmt.Fprintf(w, "hardswish rewrite: %s\n", rewrite)
}

// cpuFeatures lists the features of this CPU that the gateway's code paths or ONNX Runtime's
// kernels choose by.
func cpuFeatures() string {
	var f []string
	switch runtime.GOARCH {
	case "amd64":
		for _, x := range []struct {
			name string
			has  bool
		}{{"AVX2", cpu.X86.HasAVX2}, {"FMA", cpu.X86.HasFMA}, {"AVX-512F", cpu.X86.HasAVX512F},
			{"AVX-512BW", cpu.X86.HasAVX512BW}, {"AVX-512 VNNI", cpu.X86.HasAVX512VNNI}, {"AVX-VNNI", cpu.X86.HasAVXVNNI}} {
			if x.has {
				f = append(f, x.name)
			}
		}
	case "arm64":
		for _, x := range []struct {
			name string
			has  bool
		}{{"ASIMD", cpu.ARM64.HasASIMD}, {"ASIMDDP", cpu.ARM64.HasASIMDDP}, {"SVE", cpu.ARM64.HasSVE}} {
			if x.has {
				f = append(f, x.name)
			}
		}
	}
	if len(f) == 0 {
		return "none of those the gateway looks for"
	}
	return strings.Join(f, " ")
}
