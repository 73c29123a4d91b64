// Command readytime measures a server's start-up as Kubernetes sees it: from starting the
// process to the first 200 answer of its readiness URL. It starts the command, polls the URL
// every millisecond (a fresh connection each time, as a probe does), stops the server with
// SIGTERM once ready, and repeats; it prints each run's time and the median, min and max.
//
//	readytime -n 10 -url http://127.0.0.1:18190/v2/health/ready -- bin/gateway -config ...
//
// -before runs a shell command before each start (to empty a cache, say), untimed.
//
// On Linux it also reads, at the moment the server is ready, the CPU time its processes' threads
// have used (/proc/PID/task/*/schedstat; the server runs in a session of its own, workers
// included) and their minor page faults (/proc/PID/stat): on a busy machine these vary less
// than the wall time, and fresh pages are much of a start's cost on virtual machines. A worker
// that has exited is not counted.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	var ms, cpus, faults []float64
	for i := range *n {
		if *before != "" {
			if out, err := exec.Command("/bin/sh", "-c", *before).CombinedOutput(); err != nil {
				fatal(fmt.Errorf("-before: %w: %s", err, out))
			}
		}
		r, err := once(flag.Args(), *url, *timeout)
		if err != nil {
			fatal(fmt.Errorf("run %d: %w", i+1, err))
		}
		ms = append(ms, float64(r.wall.Microseconds())/1000)
		line := fmt.Sprintf("run %d: ready in %.1f ms", i+1, ms[i])
		if r.cpu > 0 {
			cpus = append(cpus, float64(r.cpu.Microseconds())/1000)
			faults = append(faults, float64(r.faults))
			line += fmt.Sprintf(", %.1f ms CPU, %d minor faults", cpus[i], r.faults)
		}
		if !*quiet {
			fmt.Println(line)
		}
	}
	fmt.Printf("ready: median %.1f ms, min %.1f, max %.1f, %d runs", median(ms), slices.Min(ms), slices.Max(ms), len(ms))
	if len(cpus) == len(ms) {
		fmt.Printf("; CPU median %.1f ms; minor faults median %.0f", median(cpus), median(faults))
	}
	fmt.Println()
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

type result struct {
	wall, cpu time.Duration
	faults    int64
}

// usage reads the CPU time (its threads' schedstat, in ns) and minor faults of the processes in
// the session the server leads (itself, and the workers a server of several processes forks);
// zeros where /proc does not say.
func usage(sid int) (cpu time.Duration, faults int64) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state ppid pgrp session … minflt (the 8th)
		if len(f) < 8 || f[3] != strconv.Itoa(sid) {
			continue
		}
		n, _ := strconv.ParseInt(f[7], 10, 64)
		faults += n
		tasks, _ := filepath.Glob(filepath.Join(filepath.Dir(st), "task", "*", "schedstat"))
		for _, t := range tasks {
			if b, err := os.ReadFile(t); err == nil {
				if f := strings.Fields(string(b)); len(f) > 0 {
					ns, _ := strconv.ParseInt(f[0], 10, 64)
					cpu += time.Duration(ns)
				}
			}
		}
	}
	return cpu, faults
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "readytime:", err)
	os.Exit(1)
}

// once starts the command, waits for the URL's first 200 and stops the command.
func once(args []string, url string, timeout time.Duration) (result, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	log, err := os.CreateTemp("", "readytime-*.log")
	if err != nil {
		return result{}, err
	}
	defer os.Remove(log.Name())
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	exited := make(chan error, 1)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, err
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
				r := result{wall: time.Since(t0)}
				r.cpu, r.faults = usage(cmd.Process.Pid)
				stop()
				return r, nil
			}
		}
		select {
		case err := <-exited:
			out, _ := os.ReadFile(log.Name())
			return result{}, fmt.Errorf("the server exited before it was ready (%v):\n%s", err, out)
		case <-time.After(time.Millisecond):
		}
	}
	stop()
	return result{}, fmt.Errorf("not ready within %v", timeout)
}
