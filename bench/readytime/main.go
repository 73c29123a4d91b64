// Command readytime measures a server's start-up as Kubernetes sees it: from starting the
// process to the first 200 answer of its readiness URL. It starts the command, polls the URL
// every millisecond (a fresh connection each time, as a probe does), stops the server with
// SIGTERM once ready, and repeats; it prints each run's time and the median, min and max.
//
//	readytime -n 10 -url http://127.0.0.1:18190/v2/health/ready -- bin/gateway -config ...
//
// -before runs a shell command before each start (to empty a cache, say), untimed.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"
)

func main() {
	n := flag.Int("n", 5, "runs")
	url := flag.String("url", "http://127.0.0.1:8080/v2/health/ready", "readiness URL polled until it answers 200")
	timeout := flag.Duration("timeout", 30*time.Second, "give up on a run after this long")
	before := flag.String("before", "", "shell command run before each start, not timed")
	quiet := flag.Bool("q", false, "print only the summary line")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: readytime [flags] -- command [args...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || *n < 1 {
		flag.Usage()
		os.Exit(2)
	}
	var ms []float64
	for i := range *n {
		if *before != "" {
			if out, err := exec.Command("/bin/sh", "-c", *before).CombinedOutput(); err != nil {
				fatal(fmt.Errorf("-before: %w: %s", err, out))
			}
		}
		d, err := once(flag.Args(), *url, *timeout)
		if err != nil {
			fatal(fmt.Errorf("run %d: %w", i+1, err))
		}
		ms = append(ms, float64(d.Microseconds())/1000)
		if !*quiet {
			fmt.Printf("run %d: ready in %.1f ms\n", i+1, ms[i])
		}
	}
	slices.Sort(ms)
	med := ms[len(ms)/2]
	if len(ms)%2 == 0 {
		med = (ms[len(ms)/2-1] + ms[len(ms)/2]) / 2
	}
	fmt.Printf("ready: median %.1f ms, min %.1f, max %.1f, %d runs\n", med, ms[0], ms[len(ms)-1], len(ms))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "readytime:", err)
	os.Exit(1)
}

// once starts the command, waits for the URL's first 200 and stops the command.
func once(args []string, url string, timeout time.Duration) (time.Duration, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	log, err := os.CreateTemp("", "readytime-*.log")
	if err != nil {
		return 0, err
	}
	defer os.Remove(log.Name())
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	exited := make(chan error, 1)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for time.Since(t0) < timeout {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				d := time.Since(t0)
				stop()
				return d, nil
			}
		}
		select {
		case err := <-exited:
			out, _ := os.ReadFile(log.Name())
			return 0, fmt.Errorf("the server exited before it was ready (%v):\n%s", err, out)
		case <-time.After(time.Millisecond):
		}
	}
	stop()
	return 0, fmt.Errorf("not ready within %v", timeout)
}
