// Command fleet simulates imagegate's fleet on one machine (scripts/fleet.sh runs it; make fleet,
// and its short form in make test):
//
//  1. starts N gateways (bin/gateway) on loopback ports behind HAProxy, which health-checks
//     /v2/health/ready every 250 ms;
//  2. measures the fleet's capacity through HAProxy (closed loop), then drives an open loop at
//     -load (70 %; 50 % with -short) of it with bin/loadtest: the steady phase;
//  3. under the same open loop, restarts the replicas one by one (SIGTERM, wait for the exit,
//     start again on the same port, wait until HAProxy sees it ready, next), -rolls times over;
//  4. measures the load balancer's overhead: one replica directly vs through HAProxy.
//
// It requires zero failed requests and no request without an answer in the steady and rolling
// phases (the load generator's sent = completed = 2xx, HAProxy's own counters without errors,
// every replica exiting 0), reports the p99 during the roll beside the steady p99, and exits 1
// otherwise. It writes fleet.json, fleet.md and every process's log into -out.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type options struct {
	gateway, loadtest, haproxy string
	models                     string
	body, contentType          string
	out                        string
	replicas, rolls            int
	load                       float64
	short                      bool
	drainDelay, shutdown       time.Duration
	capacityC                  int
	lbRetries                  int
	phase, rollPause           time.Duration
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func main() {
	var o options
	flag.StringVar(&o.gateway, "gateway", "bin/gateway", "the gateway binary")
	flag.StringVar(&o.loadtest, "loadtest", "bin/loadtest", "the load generator binary")
	flag.StringVar(&o.haproxy, "haproxy", "haproxy", "HAProxy")
	flag.StringVar(&o.models, "models", "models", "the repository's models folder (the default model)")
	flag.StringVar(&o.body, "body", "../shared/seed/rime_5868.json", "request body (the article's payload)")
	flag.StringVar(&o.contentType, "content-type", "application/json", "its Content-Type")
	flag.StringVar(&o.out, "out", "bin/fleet", "folder for fleet.json, fleet.md and the logs")
	flag.IntVar(&o.replicas, "replicas", 3, "gateways behind HAProxy")
	flag.IntVar(&o.rolls, "rolls", 2, "rolling restarts of the whole fleet")
	flag.Float64Var(&o.load, "load", 0.7, "open-loop rate as a fraction of the measured capacity; -short: 0.5")
	flag.BoolVar(&o.short, "short", false, "short phases (make test)")
	flag.DurationVar(&o.drainDelay, "drain-delay", 2*time.Second, "server.drain_delay of each gateway (HAProxy sees the 503 within 250 ms; the rest is margin for a busy machine)")
	flag.DurationVar(&o.shutdown, "shutdown-timeout", 15*time.Second, "server.shutdown_timeout of each gateway")
	flag.IntVar(&o.capacityC, "capacity-c", 24, "closed-loop clients measuring the capacity")
	flag.IntVar(&o.lbRetries, "lb-retries", 0, "HAProxy's retries of a refused connection on another replica (0: none, as kube-proxy: then only the gateway's drain keeps requests from failing)")
	flag.DurationVar(&o.rollPause, "roll-pause", 2*time.Second, "pause after a replica is back in the pool before the next SIGTERM (Kubernetes' minReadySeconds); -short: 0.5s")
	flag.Parse()
	o.phase = 15 * time.Second
	if o.short {
		o.phase = 4 * time.Second
		if !flagSet("roll-pause") {
			o.rollPause = 500 * time.Millisecond
		}
		// In make test, on a shared machine whose speed can drop between the capacity run and
		// the roll: while one replica restarts the other two carry the load, 75 % of their
		// capacity at 0.5 (105 % at 0.7), so a slower moment queues rather than sheds.
		if !flagSet("load") {
			o.load = 0.5
		}
	}
	rep, err := run(o)
	if rep != nil {
		md := rep.markdown()
		fmt.Print(md)
		os.WriteFile(filepath.Join(o.out, "fleet.md"), []byte(md), 0o644)
		if j, err := json.MarshalIndent(rep, "", "  "); err == nil {
			os.WriteFile(filepath.Join(o.out, "fleet.json"), append(j, '\n'), 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
	if rep != nil && len(rep.Failures) > 0 {
		fmt.Fprintf(os.Stderr, "fleet: FAILED: %s\n", strings.Join(rep.Failures, "; "))
		os.Exit(1)
	}
}

// report is fleet.json.
type report struct {
	Date          string          `json:"date"`
	Replicas      int             `json:"replicas"`
	LBRetries     int             `json:"lb_retries"`
	Rolls         int             `json:"rolls"`
	DrainDelay    string          `json:"drain_delay"`
	DrainNote     string          `json:"drain_note,omitempty"`
	Body          string          `json:"body"`
	CapacityRPS   float64         `json:"capacity_rps"`
	RateRPS       float64         `json:"rate_rps"`
	Steady        *ltResults      `json:"steady"`
	Roll          *ltResults      `json:"roll"`
	SteadyAfter   *ltResults      `json:"steady_after"`
	RollSteps     []rollStep      `json:"roll_steps"`
	HAProxy       map[string]int  `json:"haproxy_counters"`
	Replica       []replicaFigure `json:"replicas_steady"`
	HAProxyCPU    float64         `json:"haproxy_cpu_cores_steady"`
	Overhead      *overhead       `json:"lb_overhead"`
	Failures      []string        `json:"failures"`
	Elapsed       string          `json:"elapsed"`
	OnlineCPUs    int             `json:"cpus"`
	GatewayConfig string          `json:"gateway_config"`
}

type rollStep struct {
	Round, Replica int
	Exit           string  `json:"exit"`
	StopS          float64 `json:"stop_s"`     // SIGTERM to exit
	ReadyS         float64 `json:"ready_s"`    // start to /v2/health/ready 200
	BalancedS      float64 `json:"balanced_s"` // start to UP in HAProxy
}

type replicaFigure struct {
	Name          string  `json:"name"`
	CPUCores      float64 `json:"cpu_cores"`
	VmHWMMiB      float64 `json:"vmhwm_mib"`
	Requests      float64 `json:"requests"`
	MeanQueueLen  float64 `json:"mean_queue_length"`
	MeanQueueWait float64 `json:"mean_queue_wait_ms"`
}

type overhead struct {
	Rounds        int     `json:"rounds"`
	DirectProbeUs float64 `json:"direct_probe_p50_us"`
	LBProbeUs     float64 `json:"lb_probe_p50_us"`
	HAProxyCPUMs  float64 `json:"haproxy_cpu_ms_per_request"`
	DirectP50Ms   float64 `json:"direct_p50_ms"`
	LBP50Ms       float64 `json:"lb_p50_ms"`
	DirectP99Ms   float64 `json:"direct_p99_ms"`
	LBP99Ms       float64 `json:"lb_p99_ms"`
	DirectRPS     float64 `json:"direct_rps"`
	LBRPS         float64 `json:"lb_rps"`
	ThroughputPct float64 `json:"lb_throughput_pct_of_direct"`
}

// ltResults is the part of bin/loadtest's JSON report used here.
type ltResults struct {
	Sent        int            `json:"sent"`
	Completed   int            `json:"completed"`
	OK          int            `json:"ok_2xx"`
	Errors      int            `json:"errors"`
	ErrorKinds  map[string]int `json:"error_kinds"`
	Samples     map[string]any `json:"error_samples"`
	StatusCodes map[string]int `json:"status_codes"`
	DurationS   float64        `json:"duration_s"`
	SentRate    float64        `json:"sent_rate"`
	Throughput  float64        `json:"throughput"`
	Latency     struct {
		P50 float64 `json:"p50"`
		P90 float64 `json:"p90"`
		P99 float64 `json:"p99"`
		Max float64 `json:"max"`
	} `json:"latency_ms"`
}

func run(o options) (*report, error) {
	start := time.Now()
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, err
	}
	for _, p := range []*string{&o.gateway, &o.loadtest, &o.models, &o.body, &o.out} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = abs
	}
	if _, err := os.Stat(o.body); err != nil {
		return nil, fmt.Errorf("request body: %w", err)
	}
	rep := &report{Date: time.Now().UTC().Format(time.RFC3339), Replicas: o.replicas, Rolls: o.rolls, LBRetries: o.lbRetries,
		Body: filepath.Base(o.body), HAProxy: map[string]int{}, OnlineCPUs: cpus()}
	cfgPath, err := writeGatewayConfig(o, rep)
	if err != nil {
		return nil, err
	}
	f := &fleet{o: o, cfg: cfgPath}
	defer f.stopAll()
	if err := f.startAll(); err != nil {
		return rep, err
	}
	fleetURL := fmt.Sprintf("http://127.0.0.1:%d/predict/", f.fleetPort)
	rate, err := f.steadyPhase(rep, fleetURL)
	if err != nil {
		return rep, err
	}
	if err := f.rollPhase(rep, fleetURL, rate); err != nil {
		return rep, err
	}
	// The same open loop again, after the roll: the steady figures' spread on this machine.
	after2, err := f.loadtest("steady-after", fleetURL, "-rate", rate, "-duration", dur(o.phase), "-warmup", "1s")
	if err != nil {
		return rep, err
	}
	rep.SteadyAfter = after2
	rep.Failures = append(rep.Failures, failures("steady after the roll", after2)...)
	// The load balancer's overhead: replica g1 alone, directly and through HAProxy.
	ov, err := f.overhead()
	if err != nil {
		return rep, err
	}
	if rep.RateRPS > 0 {
		ov.HAProxyCPUMs = round2(1000 * rep.HAProxyCPU / rep.Steady.Throughput)
	}
	rep.Overhead = ov
	rep.Elapsed = time.Since(start).Round(time.Second).String()
	return rep, nil
}

// writeGatewayConfig writes the gateways' config (one session and one decoder each: N replicas
// share this machine) into the output folder, without server.drain_delay for a gateway build
// that does not know it (noted in rep), and returns its path.
func writeGatewayConfig(o options, rep *report) (string, error) {
	cfgPath := filepath.Join(o.out, "gateway.yaml")
	cfg := gatewayConfig(o, true)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return "", err
	}
	if out, err := exec.Command(o.gateway, "-config", cfgPath, "-check").CombinedOutput(); err != nil {
		if !strings.Contains(string(out), "drain_delay") {
			return "", fmt.Errorf("gateway -check: %v\n%s", err, out)
		}
		rep.DrainNote = "this gateway build does not know server.drain_delay: it ran without (readiness and listener end together at SIGTERM)"
		cfg = gatewayConfig(o, false)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			return "", err
		}
	} else {
		rep.DrainDelay = o.drainDelay.String()
	}
	rep.GatewayConfig = cfg
	return cfgPath, nil
}

// startAll starts the replicas and HAProxy, and waits until HAProxy balances to every replica.
func (f *fleet) startAll() error {
	for i := 0; i < f.o.replicas; i++ {
		r := &replica{name: fmt.Sprintf("g%d", i+1), logPath: filepath.Join(f.o.out, fmt.Sprintf("g%d.log", i+1))}
		if err := f.start(r); err != nil {
			return err
		}
		f.replicas = append(f.replicas, r)
	}
	if err := f.startHAProxy(); err != nil {
		return err
	}
	for _, r := range f.replicas {
		if err := f.waitBalanced(r.name, true, 30*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// steadyPhase measures the fleet's capacity, then runs the steady phase at -load of it, with
// each replica's figures; it returns the open loop's rate, as loadtest's -rate.
func (f *fleet) steadyPhase(rep *report, fleetURL string) (string, error) {
	o := f.o
	capRes, err := f.loadtest("capacity", fleetURL, "-c", strconv.Itoa(o.capacityC), "-duration", dur(o.phase/2+time.Second), "-warmup", "1s")
	if err != nil {
		return "", err
	}
	if capRes.OK == 0 || capRes.Throughput <= 0 {
		return "", fmt.Errorf("capacity run answered nothing: %+v", capRes)
	}
	rep.CapacityRPS = round1(capRes.Throughput)
	rep.RateRPS = round1(o.load * capRes.Throughput)
	rate := strconv.FormatFloat(rep.RateRPS, 'f', 1, 64)

	before := f.sample()
	stopSampler := f.sampleQueues()
	steady, err := f.loadtest("steady", fleetURL, "-rate", rate, "-duration", dur(o.phase), "-warmup", "1s")
	queues := stopSampler()
	after := f.sample()
	if err != nil {
		return "", err
	}
	rep.Steady = steady
	rep.HAProxyCPU = round2((after.haproxyCPU - before.haproxyCPU) / after.at.Sub(before.at).Seconds())
	for i, r := range f.replicas {
		b, a := before.replicas[i], after.replicas[i]
		fig := replicaFigure{Name: r.name, VmHWMMiB: round1(a.hwm / (1 << 20)), Requests: a.queueWaitCount - b.queueWaitCount,
			CPUCores:     round2((a.cpu - b.cpu) / after.at.Sub(before.at).Seconds()),
			MeanQueueLen: round2(queues[i])}
		if n := a.queueWaitCount - b.queueWaitCount; n > 0 {
			fig.MeanQueueWait = round2(1000 * (a.queueWaitSum - b.queueWaitSum) / n)
		}
		rep.Replica = append(rep.Replica, fig)
	}
	rep.Failures = append(rep.Failures, failures("steady", steady)...)
	return rate, nil
}

// rollPhase runs the rolling restarts under the same open loop; the load stops when the last
// replica is back in the pool. What failed (the load generator's errors, HAProxy's counters, a
// replica's exit) goes to rep.Failures.
func (f *fleet) rollPhase(rep *report, fleetURL, rate string) error {
	o := f.o
	statsBefore, err := f.haproxyStats()
	if err != nil {
		return err
	}
	rollOut := filepath.Join(o.out, "roll.json")
	lt := exec.Command(o.loadtest, "-q", "-rate", rate, "-duration", "30m", "-body", o.body, "-H", "Content-Type: "+o.contentType, "-o", rollOut, fleetURL)
	ltLog, _ := os.Create(filepath.Join(o.out, "roll.txt"))
	lt.Stdout, lt.Stderr = ltLog, ltLog
	if err := lt.Start(); err != nil {
		return err
	}
	ltDone := make(chan error, 1)
	go func() { ltDone <- lt.Wait(); ltLog.Close() }()
	time.Sleep(time.Second)
	rollErr := f.roll(rep)
	time.Sleep(500 * time.Millisecond)
	lt.Process.Signal(os.Interrupt) // stops sending, waits for every answer, writes the report
	select {
	case err := <-ltDone:
		if err != nil {
			return fmt.Errorf("loadtest during the roll: %v", err)
		}
	case <-time.After(2 * time.Minute):
		lt.Process.Kill()
		return errors.New("loadtest did not stop after the roll")
	}
	if rollErr != nil {
		return rollErr
	}
	roll, err := readLoadtest(rollOut)
	if err != nil {
		return err
	}
	rep.Roll = roll
	rep.Failures = append(rep.Failures, failures("roll", roll)...)
	statsAfter, err := f.haproxyStats()
	if err != nil {
		return err
	}
	for k, v := range statsAfter {
		rep.HAProxy[k] = v - statsBefore[k]
	}
	for _, k := range []string{"fleet.hrsp_5xx", "fleet.hrsp_4xx", "fleet.eresp", "fleet.srv_abrt", "fleet.econ"} {
		if rep.HAProxy[k] != 0 {
			rep.Failures = append(rep.Failures, fmt.Sprintf("roll: HAProxy counted %s = %d", k, rep.HAProxy[k]))
		}
	}
	for _, s := range rep.RollSteps {
		if s.Exit != "0" {
			rep.Failures = append(rep.Failures, fmt.Sprintf("roll %d: %s exited %s after SIGTERM", s.Round, f.replicas[s.Replica].name, s.Exit))
		}
	}
	return nil
}

func gatewayConfig(o options, drain bool) string {
	d := ""
	if drain {
		d = fmt.Sprintf("  drain_delay: %s\n", o.drainDelay)
	}
	m := filepath.Join(o.models, "mobilenet_v3_small")
	return fmt.Sprintf(`# The fleet's replicas: one ONNX Runtime session and one decoder each (they share this machine).
server:
%s  shutdown_timeout: %s
  decode_workers: 1
  admin_listen: "off" # three replicas on one host: no admin API (the default port would clash)
models:
  - name: mobilenet_v3_small
    path: %s/model.onnx
    labels: %s/labels.txt
    input: {name: input, width: 224, height: 224}
    output: {name: output}
    preprocess: {resize: 256, crop: 224, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}
    batching: {max_batch_size: 4, max_queue_delay: 2ms, max_queue_size: 256}
    runtime: {instances: 1, intra_op_threads: 1, inter_op_threads: 1}
`, d, o.shutdown, m, m)
}

// failures lists what makes a phase fail: anything but every request sent answered 2xx.
func failures(phase string, r *ltResults) []string {
	var f []string
	if r.Sent == 0 {
		f = append(f, phase+": no request sent")
	}
	if r.Completed != r.Sent {
		f = append(f, fmt.Sprintf("%s: %d requests sent, %d answered", phase, r.Sent, r.Completed))
	}
	if r.OK != r.Completed || r.Errors != 0 {
		f = append(f, fmt.Sprintf("%s: %d of %d answers not 2xx (errors %v %v, status codes %v)", phase, r.Completed-r.OK, r.Completed, r.ErrorKinds, r.Samples, r.StatusCodes))
	}
	return f
}

type replica struct {
	name    string
	port    int
	logPath string
	cmd     *exec.Cmd
	done    chan error
}

type fleet struct {
	o                                options
	cfg                              string
	replicas                         []*replica
	haproxy                          *exec.Cmd
	haproxyDone                      chan error
	fleetPort, singlePort, statsPort int
	haproxyCfg                       string
}

var client = &http.Client{Timeout: 5 * time.Second}

// start starts r (on its port, or a free one the first time) and waits until it is ready.
func (f *fleet) start(r *replica) error {
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(f.o.gateway, "-config", f.cfg, "-listen", fmt.Sprintf("127.0.0.1:%d", r.port))
	// The fleet measures HTTP through HAProxy: no gRPC listener, whose default port (8001) the
	// replicas would contend for (a build without gRPC ignores the variable).
	cmd.Env = append(os.Environ(), "IMAGEGATE_GRPC_LISTEN=off")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	cmd.Stdout = logf
	if err := cmd.Start(); err != nil {
		return err
	}
	r.cmd, r.done = cmd, make(chan error, 1)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`msg=serving addr=\S+:(\d+)`)
		sent := false
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if m := re.FindStringSubmatch(sc.Text()); m != nil && !sent {
				addr <- m[1]
				sent = true
			}
		}
		r.done <- cmd.Wait()
		logf.Close()
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			return fmt.Errorf("%s exited before serving (log: %s)", r.name, r.logPath)
		}
		r.port, _ = strconv.Atoi(a)
	case <-time.After(60 * time.Second):
		return fmt.Errorf("%s did not start in 60s (log: %s)", r.name, r.logPath)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/v2/health/ready", r.port))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready in 30s", r.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for the exit; it returns the exit status as text.
func (f *fleet) stop(r *replica) string {
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.done:
		var ee *exec.ExitError
		switch {
		case err == nil:
			return "0"
		case errors.As(err, &ee):
			return ee.String()
		default:
			return err.Error()
		}
	case <-time.After(f.o.drainDelay + f.o.shutdown + 10*time.Second):
		r.cmd.Process.Kill()
		<-r.done
		return "killed: no exit after drain_delay + shutdown_timeout + 10s"
	}
}

func (f *fleet) stopAll() {
	for _, r := range f.replicas {
		if r.cmd != nil && r.cmd.ProcessState == nil {
			f.stop(r)
		}
	}
	if f.haproxy != nil && f.haproxy.ProcessState == nil {
		f.haproxy.Process.Signal(syscall.SIGUSR1) // soft stop
		select {
		case <-f.haproxyDone:
		case <-time.After(5 * time.Second):
			f.haproxy.Process.Kill()
			<-f.haproxyDone
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (f *fleet) startHAProxy() error {
	var err error
	for _, p := range []*int{&f.fleetPort, &f.singlePort, &f.statsPort} {
		if *p, err = freePort(); err != nil {
			return err
		}
	}
	var servers strings.Builder
	for _, r := range f.replicas {
		fmt.Fprintf(&servers, "    server %s 127.0.0.1:%d\n", r.name, r.port)
	}
	// Health checks every 250 ms: one 503 from /v2/health/ready (or a refused connection)
	// takes a replica out of the pool (fall 1), two 200s bring it back (rise 2). timeout check
	// 2s: without it the check's timeout is inter (250 ms), and a replica slowed by a busy
	// machine, still serving, would be taken out, all of them at once in the worst case. retries + redispatch move a request whose
	// connection could not be made to another replica (nothing was sent yet, so it is safe for
	// a POST); HAProxy does not resend a request a server has received.
	redispatch := "    option redispatch 1\n"
	if f.o.lbRetries == 0 {
		redispatch = ""
	}
	f.haproxyCfg = fmt.Sprintf(`# written by deploy/cmd/fleet
global
    maxconn 4096
    nbthread 1

defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 30s
    timeout check 2s
    retries %d
%s
frontend fleet
    bind 127.0.0.1:%d
    default_backend fleet

frontend single
    bind 127.0.0.1:%d
    default_backend single

backend fleet
    balance leastconn
    option httpchk GET /v2/health/ready
    http-check expect status 200
    default-server check inter 250ms fall 1 rise 2
%s
backend single
    option httpchk GET /v2/health/ready
    http-check expect status 200
    server %s 127.0.0.1:%d check inter 250ms fall 1 rise 2

listen stats
    bind 127.0.0.1:%d
    stats enable
    stats uri /stats
`, f.o.lbRetries, redispatch, f.fleetPort, f.singlePort, servers.String(), f.replicas[0].name, f.replicas[0].port, f.statsPort)
	path := filepath.Join(f.o.out, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(f.haproxyCfg), 0o644); err != nil {
		return err
	}
	if out, err := exec.Command(f.o.haproxy, "-c", "-q", "-f", path).CombinedOutput(); err != nil {
		return fmt.Errorf("haproxy -c: %v\n%s", err, out)
	}
	logf, err := os.Create(filepath.Join(f.o.out, "haproxy.log"))
	if err != nil {
		return err
	}
	f.haproxy = exec.Command(f.o.haproxy, "-db", "-f", path)
	f.haproxy.Stdout, f.haproxy.Stderr = logf, logf
	if err := f.haproxy.Start(); err != nil {
		return err
	}
	f.haproxyDone = make(chan error, 1)
	go func() { f.haproxyDone <- f.haproxy.Wait(); logf.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := f.haproxyStats(); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("haproxy's stats page did not answer in 10s (haproxy.log)")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// haproxyStats reads HAProxy's CSV statistics: "proxy.field" for the fleet frontend and
// backend counters, "proxy/server.status" as 1 when UP.
func (f *fleet) haproxyStats() (map[string]int, error) {
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/stats;csv", f.statsPort))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	rd := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(body, []byte("# "))))
	rd.FieldsPerRecord = -1
	rows, err := rd.ReadAll()
	if err != nil || len(rows) < 2 {
		return nil, fmt.Errorf("haproxy stats: %v", err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	out := map[string]int{}
	get := func(row []string, k string) int {
		i, ok := col[k]
		if !ok || i >= len(row) {
			return 0
		}
		n, _ := strconv.Atoi(row[i])
		return n
	}
	for _, row := range rows[1:] {
		if len(row) < 2 {
			continue
		}
		px, sv := row[0], row[1]
		switch {
		case px == "fleet" && (sv == "FRONTEND" || sv == "BACKEND"):
			for _, k := range []string{"req_tot", "hrsp_2xx", "hrsp_4xx", "hrsp_5xx", "ereq", "eresp", "econ", "wretr", "wredis", "cli_abrt", "srv_abrt"} {
				if _, ok := col[k]; ok {
					out["fleet."+k] = max(out["fleet."+k], get(row, k))
				}
			}
		case sv != "FRONTEND" && sv != "BACKEND":
			if strings.HasPrefix(row[col["status"]], "UP") {
				out[px+"/"+sv+".status"] = 1
			}
		}
	}
	return out, nil
}

// waitBalanced waits until HAProxy's fleet backend has the replica UP (or not).
func (f *fleet) waitBalanced(name string, up bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := f.haproxyStats()
		if err == nil && (st["fleet/"+name+".status"] == 1) == up {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("HAProxy did not see %s %s in %s", name, map[bool]string{true: "UP", false: "DOWN"}[up], timeout)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (f *fleet) roll(rep *report) error {
	for round := 1; round <= f.o.rolls; round++ {
		for i, r := range f.replicas {
			t0 := time.Now()
			exit := f.stop(r)
			stopped := time.Since(t0)
			t1 := time.Now()
			if err := f.start(r); err != nil {
				return fmt.Errorf("roll %d: restarting %s: %w", round, r.name, err)
			}
			ready := time.Since(t1)
			if err := f.waitBalanced(r.name, true, 30*time.Second); err != nil {
				return fmt.Errorf("roll %d: %w", round, err)
			}
			rep.RollSteps = append(rep.RollSteps, rollStep{Round: round, Replica: i, Exit: exit,
				StopS: round2(stopped.Seconds()), ReadyS: round2(ready.Seconds()), BalancedS: round2(time.Since(t1).Seconds())})
			time.Sleep(f.o.rollPause)
		}
	}
	return nil
}

func (f *fleet) loadtest(name, url string, args ...string) (*ltResults, error) {
	out := filepath.Join(f.o.out, name+".json")
	all := append([]string{"-q", "-body", f.o.body, "-H", "Content-Type: " + f.o.contentType, "-o", out}, args...)
	all = append(all, url)
	text, err := exec.Command(f.o.loadtest, all...).CombinedOutput()
	os.WriteFile(filepath.Join(f.o.out, name+".txt"), text, 0o644)
	if err != nil {
		return nil, fmt.Errorf("loadtest %s: %v\n%s", name, err, text)
	}
	return readLoadtest(out)
}

// loadtestGET runs bin/loadtest with plain GETs (no body).
func (f *fleet) loadtestGET(name, url string, args ...string) (*ltResults, error) {
	out := filepath.Join(f.o.out, name+".json")
	all := append(append([]string{"-q", "-o", out}, args...), url)
	text, err := exec.Command(f.o.loadtest, all...).CombinedOutput()
	os.WriteFile(filepath.Join(f.o.out, name+".txt"), text, 0o644)
	if err != nil {
		return nil, fmt.Errorf("loadtest %s: %v\n%s", name, err, text)
	}
	return readLoadtest(out)
}

func readLoadtest(path string) (*ltResults, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep struct {
		Results ltResults `json:"results"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r := rep.Results
	r.SentRate, r.Throughput = round1(r.SentRate), round1(r.Throughput)
	return &r, nil
}

// overhead: replica g1 alone, directly and through HAProxy, alternating; medians.
func (f *fleet) overhead() (*overhead, error) {
	rounds := 3
	d := 5 * time.Second
	if f.o.short {
		rounds, d = 1, 3*time.Second
	}
	direct := fmt.Sprintf("http://127.0.0.1:%d/predict/", f.replicas[0].port)
	lb := fmt.Sprintf("http://127.0.0.1:%d/predict/", f.singlePort)
	var dp50, lp50, dp99, lp99, drps, lrps []float64
	for i := 0; i < rounds; i++ {
		for _, t := range []struct {
			url      string
			p50, p99 *[]float64
			rps      *[]float64
		}{{direct, &dp50, &dp99, &drps}, {lb, &lp50, &lp99, &lrps}} {
			// One client: latency without queueing, so the difference is the proxy's.
			seq, err := f.loadtest(fmt.Sprintf("overhead-c1-%d", i), t.url, "-c", "1", "-duration", dur(d), "-warmup", "5")
			if err != nil {
				return nil, err
			}
			// Eight clients: throughput of one replica.
			par, err := f.loadtest(fmt.Sprintf("overhead-c8-%d", i), t.url, "-c", "8", "-duration", dur(d), "-warmup", "1s")
			if err != nil {
				return nil, err
			}
			*t.p50 = append(*t.p50, seq.Latency.P50)
			*t.p99 = append(*t.p99, seq.Latency.P99)
			*t.rps = append(*t.rps, par.Throughput)
		}
	}
	// A request that costs the gateway nearly nothing shows the proxy's own latency.
	var dprobe, lprobe []float64
	for i := 0; i < rounds; i++ {
		for _, t := range []struct {
			url string
			p50 *[]float64
		}{{strings.TrimSuffix(direct, "predict/") + "v2/health/live", &dprobe}, {strings.TrimSuffix(lb, "predict/") + "v2/health/live", &lprobe}} {
			r, err := f.loadtestGET(fmt.Sprintf("overhead-probe-%d", i), t.url, "-c", "1", "-duration", dur(d/2), "-warmup", "50")
			if err != nil {
				return nil, err
			}
			*t.p50 = append(*t.p50, 1000*r.Latency.P50)
		}
	}
	o := &overhead{Rounds: rounds, DirectProbeUs: math.Round(median(dprobe)), LBProbeUs: math.Round(median(lprobe)), DirectP50Ms: round2(median(dp50)), LBP50Ms: round2(median(lp50)),
		DirectP99Ms: round2(median(dp99)), LBP99Ms: round2(median(lp99)), DirectRPS: round1(median(drps)), LBRPS: round1(median(lrps))}
	if o.DirectRPS > 0 {
		o.ThroughputPct = round1(100 * o.LBRPS / o.DirectRPS)
	}
	return o, nil
}

type procSample struct {
	cpu, hwm                     float64
	queueWaitSum, queueWaitCount float64
}

type sample struct {
	at         time.Time
	replicas   []procSample
	haproxyCPU float64
}

func (f *fleet) sample() sample {
	s := sample{at: time.Now(), haproxyCPU: procCPU(f.haproxy.Process.Pid)}
	for _, r := range f.replicas {
		p := procSample{cpu: procCPU(r.cmd.Process.Pid), hwm: procHWM(r.cmd.Process.Pid)}
		m := scrape(r.port)
		p.queueWaitSum, p.queueWaitCount = m["gateway_queue_wait_seconds_sum"], m["gateway_queue_wait_seconds_count"]
		s.replicas = append(s.replicas, p)
	}
	return s
}

// sampleQueues samples every replica's gateway_queue_length every 250 ms until stopped and
// returns the means.
func (f *fleet) sampleQueues() func() []float64 {
	ctx, cancel := context.WithCancel(context.Background())
	sums := make([]float64, len(f.replicas))
	n := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				for i, r := range f.replicas {
					sums[i] += scrape(r.port)["gateway_queue_length"]
				}
				n++
			}
		}
	}()
	return func() []float64 {
		cancel()
		wg.Wait()
		for i := range sums {
			if n > 0 {
				sums[i] /= float64(n)
			}
		}
		return sums
	}
}

// scrape sums each metric's samples over their labels.
func scrape(port int) map[string]float64 {
	out := map[string]float64{}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(l, ' ')
		if sp < 0 {
			continue
		}
		name := l[:sp]
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		v, err := strconv.ParseFloat(l[sp+1:], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out
}

// procCPU is a process's user+system CPU time in seconds.
func procCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(fields[11], 64)
	k, _ := strconv.ParseFloat(fields[12], 64)
	return (u + k) / 100 // USER_HZ
}

// procHWM is a process's peak resident set size (VmHWM) in bytes.
func procHWM(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}

func cpus() int {
	data, _ := os.ReadFile("/sys/fs/cgroup/cpu.max")
	if q, p, ok := strings.Cut(strings.TrimSpace(string(data)), " "); ok && q != "max" {
		qf, _ := strconv.ParseFloat(q, 64)
		pf, _ := strconv.ParseFloat(p, 64)
		if pf > 0 {
			return int(math.Ceil(qf / pf))
		}
	}
	n := 0
	data, _ = os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "processor") {
			n++
		}
	}
	return n
}

func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Fleet: %d gateways behind HAProxy, %d rolling restarts under load (%s, %d CPUs)\n\n", r.Replicas, r.Rolls, r.Date, r.OnlineCPUs)
	fmt.Fprintf(&b, "HAProxy retries a refused connection on another replica: %d times.\n", r.LBRetries)
	if r.DrainNote != "" {
		fmt.Fprintf(&b, "Note: %s.\n\n", r.DrainNote)
	} else if r.DrainDelay != "" {
		fmt.Fprintf(&b, "Each gateway: server.drain_delay %s; HAProxy checks /v2/health/ready every 250 ms.\n\n", r.DrainDelay)
	}
	fmt.Fprintf(&b, "Capacity through HAProxy (closed loop): %.1f req/s of %s; open loop at %.1f req/s.\n\n", r.CapacityRPS, r.Body, r.RateRPS)
	b.WriteString("| phase | sent | answered | 2xx | failed | sent rate | p50 ms | p90 ms | p99 ms | max ms |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range []struct {
		name string
		r    *ltResults
	}{{"steady", r.Steady}, {"during the rolling restarts", r.Roll}, {"steady, after the roll", r.SteadyAfter}} {
		if p.r == nil {
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f |\n", p.name, p.r.Sent, p.r.Completed, p.r.OK,
			p.r.Completed-p.r.OK+p.r.Sent-p.r.Completed, p.r.SentRate, p.r.Latency.P50, p.r.Latency.P90, p.r.Latency.P99, p.r.Latency.Max)
	}
	if len(r.RollSteps) > 0 {
		var stop, ready, bal []float64
		for _, s := range r.RollSteps {
			stop, ready, bal = append(stop, s.StopS), append(ready, s.ReadyS), append(bal, s.BalancedS)
		}
		fmt.Fprintf(&b, "\n%d restarts: SIGTERM to exit median %.2f s (max %.2f), start to ready median %.2f s, start to back in HAProxy's pool median %.2f s (max %.2f).\n",
			len(r.RollSteps), median(stop), slices.Max(stop), median(ready), median(bal), slices.Max(bal))
		if r.Steady != nil && r.Roll != nil {
			fmt.Fprintf(&b, "p99 during the roll %.1f ms beside the steady p99 %.1f ms (%.1f ms after the roll).\n", r.Roll.Latency.P99, r.Steady.Latency.P99, r.SteadyAfter.Latency.P99)
		}
	}
	if len(r.HAProxy) > 0 {
		keys := make([]string, 0, len(r.HAProxy))
		for k := range r.HAProxy {
			if strings.HasPrefix(k, "fleet.") {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", strings.TrimPrefix(k, "fleet."), r.HAProxy[k]))
		}
		fmt.Fprintf(&b, "HAProxy's counters over the roll: %s.\n", strings.Join(parts, ", "))
	}
	if len(r.Replica) > 0 {
		b.WriteString("\nSteady phase, per replica:\n\n| replica | requests | CPU (cores) | peak RSS (VmHWM) MiB | mean queue length | mean queue wait ms |\n|---|---|---|---|---|---|\n")
		for _, x := range r.Replica {
			fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.1f | %.2f | %.2f |\n", x.Name, x.Requests, x.CPUCores, x.VmHWMMiB, x.MeanQueueLen, x.MeanQueueWait)
		}
		fmt.Fprintf(&b, "| HAProxy | | %.2f | | | |\n", r.HAProxyCPU)
	}
	if o := r.Overhead; o != nil {
		fmt.Fprintf(&b, "\nLoad balancer overhead, one replica directly vs through HAProxy (median of %d alternating rounds):\n\n", o.Rounds)
		b.WriteString("| path | GET /v2/health/live p50 µs, 1 client | predict p50 ms, 1 client | predict p99 ms, 1 client | predict req/s, 8 clients |\n|---|---|---|---|---|\n")
		fmt.Fprintf(&b, "| direct | %.0f | %.2f | %.2f | %.1f |\n| through HAProxy | %.0f | %.2f | %.2f | %.1f |\n",
			o.DirectProbeUs, o.DirectP50Ms, o.DirectP99Ms, o.DirectRPS, o.LBProbeUs, o.LBP50Ms, o.LBP99Ms, o.LBRPS)
		fmt.Fprintf(&b, "\nHAProxy adds %.0f µs to a request that costs the gateway nothing, %+.2f ms at the median to a prediction (within this machine's noise), keeps %.1f %% of the direct throughput, and spent %.2f ms of CPU per proxied prediction in the steady phase.\n",
			o.LBProbeUs-o.DirectProbeUs, o.LBP50Ms-o.DirectP50Ms, o.ThroughputPct, o.HAProxyCPUMs)
	}
	if len(r.Failures) == 0 {
		fmt.Fprintf(&b, "\nResult: zero failed requests, every request answered (elapsed %s).\n", r.Elapsed)
	} else {
		fmt.Fprintf(&b, "\nResult: FAILED: %s\n", strings.Join(r.Failures, "; "))
	}
	return b.String()
}

func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func round1(x float64) float64   { return math.Round(x*10) / 10 }
func round2(x float64) float64   { return math.Round(x*100) / 100 }
func dur(d time.Duration) string { return d.String() }
