// Command gateway serves ONNX image classifiers over HTTP with dynamic batching.
//
//	gateway -config configs/gateway.yaml [-listen HOST:PORT] [-check]
//	gateway --model_dir=/mnt/models --model_name=NAME [--http_port=8080]   (KServe: kserve.go)
//
// main only wires the components and runs the lifecycle: load and validate the config (-check
// exits here, after loading every model once), create the ONNX Runtime sessions, the batchers
// and the server; serve; on SIGTERM or SIGINT drain (stop accepting, answer everything
// accepted) and stop in reverse order.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/imagegate/imagegate/configs"
	"github.com/imagegate/imagegate/gateway"
	"github.com/imagegate/imagegate/runtime/ort"
)

func main() {
	configPath := flag.String("config", "configs/gateway.yaml", "YAML configuration file")
	listen := flag.String("listen", "", "HOST:PORT to listen on (overrides server.listen)")
	check := flag.Bool("check", false, "validate the configuration and load every model, then exit")
	health := flag.String("healthcheck", "", "GET this URL and exit 0 if it answers 200 (for container health checks)")
	modelDir := addModelDirFlags(flag.CommandLine) // KServe's -model_dir, -model_name, -http_port: kserve.go
	flag.Parse()
	if *health != "" {
		os.Exit(healthcheck(*health))
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	load, source, addr, err := modelDir.loader(*configPath, *listen)
	if err == nil {
		err = run(load, source, addr, *check, log)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run(load func(string) (*configs.Config, error), configPath, listen string, check bool, log *slog.Logger) error {
	start := time.Now()
	cfg, err := load(configPath)
	if err != nil {
		return err
	}
	if listen != "" {
		cfg.Server.Listen = listen
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("-listen: %w", err)
		}
	}
	lib := ort.FindLibrary(cfg.ONNXRuntime.Library)
	if err := ort.Init(lib); err != nil {
		return err
	}
	specs, closeSessions, err := loadModels(cfg)
	if err != nil {
		return err
	}
	drained := true
	defer func() {
		// After a drain that timed out a batch may still be running on a session: the
		// process is exiting, so the sessions are left to it rather than destroyed under
		// a running batch.
		if drained {
			closeSessions()
		}
	}()
	// The server checks each model against its configuration (labels, preprocessing, input
	// size), so -check builds it too, without listening.
	srv, err := gateway.New(cfg.Server, specs, log)
	if err != nil {
		return err
	}
	if check {
		for _, s := range specs {
			fmt.Printf("ok: model %s (%s): %d labels, %d instance(s), max batch %d\n", s.Config.Name, s.Config.Path,
				len(s.Labels), len(s.Runners), s.Config.Batching.MaxBatchSize)
		}
		fmt.Printf("ok: %s is valid (ONNX Runtime %s from %s)\n", configPath, ort.Version(), lib)
		return srv.Shutdown(context.Background())
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		srv.Shutdown(context.Background())
		return fmt.Errorf("cannot listen on %s (server.listen or -listen): %w", cfg.Server.Listen, err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "models", len(specs), "onnxruntime", ort.Version(),
		"startup", time.Since(start).Round(time.Millisecond))

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		log.Info("draining", "signal", s.String())
	case err := <-served:
		if err != nil {
			srv.Shutdown(context.Background())
			return fmt.Errorf("serve: %w", err)
		}
	}
	signal.Stop(sig)
	stopStart := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout.D())
	defer cancel()
	err = srv.Shutdown(ctx)
	ln.Close() // in case the signal came before Serve took the listener
	select {
	case e := <-served:
		if e != nil && !errors.Is(e, net.ErrClosed) {
			err = errors.Join(err, e)
		}
	case <-ctx.Done():
		err = errors.Join(err, errors.New("the server did not stop serving"))
	}
	drained = err == nil
	log.Info("stopped", "drain", time.Since(stopStart).Round(time.Millisecond), "err", err)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}

func healthcheck(url string) int {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "healthcheck:", resp.Status)
		return 1
	}
	return 0
}

// loadModels creates every model's sessions (one per instance) and reads its labels.
func loadModels(cfg *configs.Config) ([]gateway.ModelSpec, func(), error) {
	var sessions []*ort.Session
	closeAll := func() {
		for _, s := range sessions {
			s.Close()
		}
	}
	var specs []gateway.ModelSpec
	for _, m := range cfg.Models {
		labels, err := configs.LoadLabels(m.Labels)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("model %s: labels: %w", m.Name, err)
		}
		shape := []int64{3, int64(m.Input.Height), int64(m.Input.Width)}
		if m.Input.Layout == "NHWC" {
			shape = []int64{int64(m.Input.Height), int64(m.Input.Width), 3}
		}
		spec := gateway.ModelSpec{Config: m, Labels: labels}
		for i := 0; i < m.Runtime.Instances; i++ {
			optimized := m.Runtime.OptimizedModelPath
			if optimized != "" && i > 0 {
				optimized = "" // written once, by the first instance
			}
			s, err := ort.NewSession(ort.SessionConfig{
				ModelPath:          m.Path,
				InputName:          m.Input.Name,
				OutputName:         m.Output.Name,
				InputShape:         shape,
				MaxBatchSize:       m.Batching.MaxBatchSize,
				IntraOp:            m.Runtime.IntraOpThreads,
				InterOp:            m.Runtime.InterOpThreads,
				GraphOptimization:  m.Runtime.GraphOptimization,
				OptimizedModelPath: optimized,
				Provider:           m.Runtime.ExecutionProvider,
			})
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("model %s (models[].path %s): %w", m.Name, m.Path, err)
			}
			sessions = append(sessions, s)
			if m.Input.Type != "" && m.Input.Type != s.InputType() {
				closeAll()
				return nil, nil, fmt.Errorf("model %s: input.type is %s, the model's input %q is %s", m.Name, m.Input.Type, m.Input.Name, s.InputType())
			}
			spec.Runners = append(spec.Runners, s)
		}
		specs = append(specs, spec)
	}
	return specs, closeAll, nil
}
