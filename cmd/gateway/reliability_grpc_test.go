package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/imagegate/imagegate/loadtest"
	"github.com/imagegate/imagegate/loadtest/oip"
	"github.com/imagegate/imagegate/loadtest/oipgrpc"
)

// TestReliabilitySIGTERMUnderLoadGRPC is the SIGTERM scenario over gRPC: an open loop of
// ModelInfer calls at 3x capacity on 4 connections, SIGTERM with drain_delay 1s and
// shutdown_timeout 5s. Every call the server accepted is answered (OK, or UNAVAILABLE from
// the gateway: a refusal or the drain's); calls that never reached it (refused connections,
// GOAWAY) are counted apart; a call cut off without the gateway's answer is lost.
func TestReliabilitySIGTERMUnderLoadGRPC(t *testing.T) {
	skipRaceServer(t)
	shared := sharedDir(t)
	article, err := os.ReadFile(filepath.Join(shared, "seed", "rime_5868.json"))
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, shippedConfig(t, map[string]any{"server.shutdown_timeout": "5s", "server.drain_delay": "1s"}))
	g.mu.Lock()
	addr := g.grpc
	g.mu.Unlock()
	model := shippedModel(t)
	capCfg := loadtest.Config{URL: addr, Bodies: []loadtest.Body{{Data: article}}, Concurrency: 50,
		Duration: pick(3*time.Second, 8*time.Second), GRPCConns: 4}
	if err := loadtest.PrepareGRPC(t.Context(), &capCfg, model); err != nil {
		t.Fatal(err)
	}
	capRun, err := loadtest.Run(t.Context(), capCfg)
	if err != nil {
		t.Fatal(err)
	}
	img, err := loadtest.ImageOf(loadtest.Body{Data: article})
	if err != nil {
		t.Fatal(err)
	}
	req, err := oipgrpc.EncodeRequest(model, "", &oip.Request{Inputs: []oip.Input{oip.ImageInput("input", true, img)}})
	if err != nil {
		t.Fatal(err)
	}
	clients := make([]*oipgrpc.Client, 4)
	for i := range clients {
		if clients[i], err = oipgrpc.Dial(addr, oipgrpc.Options{}); err != nil {
			t.Fatal(err)
		}
		defer clients[i].Close()
	}
	rate := 3 * capRun.Summary.Throughput
	var sent, ok, refused, notSent, lost atomic.Int64
	var firstLost atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	go func() {
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			sent.Add(1)
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err := clients[i%len(clients)].InferProto(ctx, req)
				st := status.Convert(err)
				switch {
				case err == nil:
					ok.Add(1)
				case st.Code() == codes.Unavailable && strings.HasPrefix(st.Message(), "gateway:"), st.Code() == codes.Unavailable && strings.Contains(st.Message(), "batcher:"):
					refused.Add(1) // the gateway's own answer
				case st.Code() == codes.Unavailable && (strings.Contains(st.Message(), "connection refused") || strings.Contains(st.Message(), "GOAWAY")):
					notSent.Add(1) // never reached the server
				default:
					lost.Add(1)
					firstLost.CompareAndSwap(nil, fmt.Sprintf("%s %v", time.Now().Format("15:04:05.000"), err))
				}
			})
		}
	}()
	time.Sleep(pick(3*time.Second, 10*time.Second))
	exitAfter, exitErr := sigterm(t, g)
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("SIGTERM over gRPC at %.0f req/s (3x %.1f): %d sent, %d OK, %d refused by the gateway, %d never reached it, %d lost (first: %v); exit %v after %v",
		rate, capRun.Summary.Throughput, sent.Load(), ok.Load(), refused.Load(), notSent.Load(), lost.Load(), firstLost.Load(), exitErr, exitAfter.Round(time.Millisecond))
	addReport("4 sigterm grpc", fmt.Sprintf("## SIGTERM under load over gRPC\n\nAn open loop of ModelInfer calls at 3x capacity on 4 connections; SIGTERM with "+
		"`drain_delay: 1s`, `shutdown_timeout: 5s`.\n\n| offered | sent | OK | UNAVAILABLE from the gateway | never reached it | lost | exit | exit after SIGTERM |\n|---|---|---|---|---|---|---|---|\n"+
		"| %.0f req/s | %d | %d | %d | %d | %d | %v | %v |\n",
		rate, sent.Load(), ok.Load(), refused.Load(), notSent.Load(), lost.Load(), exitCode(exitErr), exitAfter.Round(time.Millisecond)))
	if exitErr != nil {
		t.Errorf("the gateway exited with %v:\n%s", exitErr, g.log())
	}
	if n := lost.Load(); n > 0 {
		t.Errorf("%d calls got no answer from the gateway (first: %v)", n, firstLost.Load())
	}
	if ok.Load() == 0 {
		t.Errorf("no call succeeded")
	}
}
