package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"sigs.k8s.io/yaml"
)

// The container's runtime stage, proven without a Docker engine: scripts/rootfs.sh assembles
// its file set (the Dockerfile's runtime stage is nothing but that set: BuildKit's own parser
// reads it below), and the
// gateway runs from it with an empty environment and only the set's own libraries:
//   - through the set's own dynamic loader with --library-path into the set and the host's
//     loader cache ignored (works as any user);
//   - as root, also chrooted into the set as the Dockerfile's USER with its WORKDIR, ENV,
//     ENTRYPOINT and CMD verbatim: what the container runtime does, less namespaces;
//   - with the KServe ServingRuntime's args (kserve/servingruntime.yaml).
// Each run must serve a real prediction of the default model, answer SERVING to a gRPC health
// check, map no file from outside the set (/proc/PID/maps), and exit 0 on SIGTERM. The test logs every file's size and the total:
// the image's uncompressed size.

const imageBudget = 80_000_000 // bytes: the target for the uncompressed image

type dockerStage struct {
	user, workdir       string
	env                 []string
	entrypoint, command []string
	expose              []string // EXPOSE's ports, as written (8080, 8001/tcp)
}

// runtimeStage parses the Dockerfile with BuildKit's own parser and linter (a lint warning is an
// error), checks that the build stage assembles /rootfs with scripts/rootfs.sh and that the
// runtime stage is FROM scratch with that COPY and metadata only, and returns its settings.
func runtimeStage(t *testing.T) dockerStage {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile: %s", w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, desc, url, msg string, loc []parser.Range) {
		t.Errorf("Dockerfile: lint %s: %s (%v)", rule, msg, loc)
	}})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a build stage and a runtime stage", len(stages))
	}
	build, last := stages[len(stages)-2], stages[len(stages)-1]
	if !slices.ContainsFunc(build.Commands, func(c instructions.Command) bool {
		r, ok := c.(*instructions.RunCommand)
		return ok && strings.Contains(strings.Join(r.CmdLine, " "), "scripts/rootfs.sh /rootfs")
	}) {
		t.Fatalf("Dockerfile: the stage before the last (%s) does not run scripts/rootfs.sh /rootfs", build.Name)
	}
	// The build stage installs the C libraries' -dev packages that scripts/setup.sh installs
	// (gcc's libc6-dev aside: the golang image has it), so a library added there reaches the image.
	setup, err := os.ReadFile(filepath.Join("..", "scripts", "setup.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var buildRuns strings.Builder
	for _, c := range build.Commands {
		if r, ok := c.(*instructions.RunCommand); ok {
			buildRuns.WriteString(strings.Join(r.CmdLine, " ") + " ")
		}
	}
	for _, pkg := range regexp.MustCompile(`\b(lib[a-z0-9.+-]+-dev)\b`).FindAllString(string(setup), -1) {
		if pkg != "libc6-dev" && !regexp.MustCompile(`\s`+regexp.QuoteMeta(pkg)+`\s`).MatchString(buildRuns.String()) {
			t.Errorf("Dockerfile: scripts/setup.sh installs %s, the build stage does not", pkg)
		}
	}
	if last.BaseName != "scratch" {
		t.Fatalf("Dockerfile: the runtime stage is FROM %s, want scratch (its files are the rootfs, nothing else)", last.BaseName)
	}
	var st dockerStage
	copies := 0
	for _, c := range last.Commands {
		switch x := c.(type) {
		case *instructions.CopyCommand:
			if x.From != build.Name || !slices.Equal(x.SourcePaths, []string{"/rootfs/"}) || x.DestPath != "/" {
				t.Fatalf("Dockerfile: runtime stage %q: only COPY --from=%s /rootfs/ / may add files", x.String(), build.Name)
			}
			copies++
		case *instructions.UserCommand:
			st.user = x.User
		case *instructions.WorkdirCommand:
			st.workdir = x.Path
		case *instructions.EnvCommand:
			for _, kv := range x.Env {
				st.env = append(st.env, kv.Key+"="+kv.Value)
			}
		case *instructions.EntrypointCommand:
			if !x.PrependShell {
				st.entrypoint = x.CmdLine
			}
		case *instructions.CmdCommand:
			if !x.PrependShell {
				st.command = x.CmdLine
			}
		case *instructions.ExposeCommand:
			st.expose = append(st.expose, x.Ports...)
		case *instructions.ArgCommand, *instructions.LabelCommand, *instructions.HealthCheckCommand:
		default:
			t.Fatalf("Dockerfile: runtime stage %q: only the rootfs COPY and metadata belong there", c.Name())
		}
	}
	if copies != 1 || st.user == "" || st.workdir == "" || len(st.entrypoint) == 0 {
		t.Fatalf("Dockerfile: the runtime stage needs one rootfs COPY, USER, WORKDIR and an exec-form ENTRYPOINT: %+v", st)
	}
	return st
}

func TestRootfsServesDefaultModel(t *testing.T) {
	stage := runtimeStage(t)
	// The image listens on every interface through the environment, not through CMD's flags,
	// so that a container given its own -config or -model stays reachable.
	for _, l := range []struct{ env, flag, port string }{
		{"IMAGEGATE_LISTEN", "-listen", "8080"},           // HTTP
		{"IMAGEGATE_GRPC_LISTEN", "-grpc-listen", "8001"}, // gRPC (Triton's port; the admin listener holds 8081)
	} {
		if !slices.Contains(stage.env, l.env+"=0.0.0.0:"+l.port) || slices.Contains(stage.command, l.flag) {
			t.Errorf("the runtime stage should set %s=0.0.0.0:%s and no %s in CMD: env %v, cmd %v", l.env, l.port, l.flag, stage.env, stage.command)
		}
		if !slices.ContainsFunc(stage.expose, func(p string) bool { return p == l.port || p == l.port+"/tcp" }) {
			t.Errorf("the runtime stage should EXPOSE %s ($%s), exposes %v", l.port, l.env, stage.expose)
		}
	}
	shared := filepath.Join("..", "..", "shared")
	jpeg, err := os.ReadFile(filepath.Join(shared, "images", "go_video-001_baseline.jpeg"))
	if err != nil {
		t.Skip("../shared (test images) is not beside the checkout:", err)
	}
	ortDir := filepath.Join("..", ".deps", "onnxruntime")
	if lib := os.Getenv("ONNXRUNTIME_LIB"); lib != "" {
		ortDir = filepath.Dir(lib)
	}
	if _, err := os.Stat(filepath.Join(ortDir, "VERSION")); err != nil {
		t.Skip("ONNX Runtime is not installed (scripts/setup-onnxruntime.sh):", err)
	}
	if _, err := exec.LookPath("ldd"); err != nil {
		t.Skip("ldd is not installed:", err)
	}

	// The file set: $ROOTFS (make rootfs made it) or assembled here.
	root := os.Getenv("ROOTFS")
	version := ""
	if root == "" {
		root = filepath.Join(t.TempDir(), "rootfs")
		version = "rootfs-test"
		cmd := exec.Command(filepath.Join("..", "scripts", "rootfs.sh"), root)
		cmd.Env = append(os.Environ(), "VERSION="+version, "ORT_DIR="+ortDir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/rootfs.sh: %v\n%s", err, out)
		}
	}
	root, err = filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	files := listRootfs(t, root)

	// The loader the binary names (PT_INTERP), and the folders holding libraries.
	bin := filepath.Join(root, stage.entrypoint[0])
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(p.Open())
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	f.Close()
	if interp == "" {
		t.Fatalf("%s has no program interpreter: it must be the dynamically linked cgo build", bin)
	}
	loader := filepath.Join(root, interp)
	var libDirs []string
	for _, p := range files {
		if strings.Contains(filepath.Base(p), ".so") && !slices.Contains(libDirs, filepath.Join(root, filepath.Dir(p))) {
			libDirs = append(libDirs, filepath.Join(root, filepath.Dir(p)))
		}
	}
	libPath := strings.Join(libDirs, ":")

	// The closure is complete: the set's loader, confined to the set, resolves every library of
	// the binary and of ONNX Runtime inside it.
	ortLib := ""
	for _, p := range files {
		if strings.HasPrefix(filepath.Base(p), "libonnxruntime.so.") {
			ortLib = filepath.Join(root, p)
		}
	}
	if ortLib == "" {
		t.Fatal("no libonnxruntime.so.* in the file set")
	}
	for _, elfFile := range []string{bin, ortLib} {
		out, err := exec.Command(loader, "--inhibit-cache", "--library-path", libPath, "--list", elfFile).CombinedOutput()
		if err != nil {
			t.Fatalf("%s --list %s: %v\n%s", loader, elfFile, err, out)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.Contains(l, "not found") {
				t.Errorf("%s: %s", elfFile, l)
			}
			if _, p, ok := strings.Cut(l, "=> "); ok {
				p, _, _ = strings.Cut(p, " (")
				if !strings.HasPrefix(p, root+"/") {
					t.Errorf("%s links %s from outside the file set", elfFile, strings.TrimSpace(l))
				}
			}
		}
	}

	labels := strings.Fields(readFile(t, filepath.Join(root, "app", "models", "mobilenet_v3_small", "labels.txt")))
	remap := func(args []string) []string { // image paths -> paths in the set (loader mode)
		r := make([]string, len(args))
		for i, a := range args {
			if strings.HasPrefix(a, "/") {
				a = filepath.Join(root, a)
			}
			r[i] = a
		}
		return r
	}
	// The image's own arguments, then a free loopback port instead of 0.0.0.0:8080 (the last
	// -listen wins), so the test can run beside anything else on this machine.
	imageArgs := append(slices.Clone(stage.entrypoint[1:]), stage.command...)
	imageArgs = append(imageArgs, "-listen", "127.0.0.1:0")

	// The image's environment, its paths into the set (loader mode), and a free loopback port
	// for gRPC instead of 0.0.0.0:8001 (the variable's value, not a flag: the image's way).
	grpcAddr := freeLoopbackAddr(t)
	imageEnv := func(env []string) []string {
		r := slices.Clone(env)
		for i, kv := range r {
			if k, _, _ := strings.Cut(kv, "="); k == "IMAGEGATE_GRPC_LISTEN" {
				r[i] = k + "=" + grpcAddr
			}
		}
		return r
	}
	remapEnv := func(env []string) []string {
		r := imageEnv(env)
		for i, kv := range r {
			if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(v, "/") {
				r[i] = k + "=" + filepath.Join(root, v)
			}
		}
		return r
	}
	t.Run("loader", func(t *testing.T) {
		cmd := exec.Command(loader, append([]string{"--inhibit-cache", "--library-path", libPath, bin}, remap(imageArgs)...)...)
		cmd.Dir = filepath.Join(root, stage.workdir)
		cmd.Env = remapEnv(stage.env) // nothing else, not even PATH (a nil Env would inherit ours)
		g := startRootfsGateway(t, cmd, root)
		g.checkWarmCache(t)
		g.predict(t, jpeg, labels)
		g.checkVersion(t, version)
		g.checkMetrics(t, adapterSeries(t))
		checkGRPCHealth(t, grpcAddr)
		g.stop(t)
	})

	t.Run("chroot", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("chroot needs root")
		}
		uid, gid := parseUser(t, stage.user)
		cmd := exec.Command(stage.entrypoint[0], imageArgs...)
		cmd.Dir = stage.workdir
		cmd.Env = imageEnv(stage.env)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		g := startRootfsGateway(t, cmd, root)
		g.checkWarmCache(t)
		g.predict(t, jpeg, labels)
		g.checkVersion(t, version)
		checkGRPCHealth(t, grpcAddr)
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^Uid:\s+` + strconv.Itoa(int(uid)) + `\s`).Match(st) {
			t.Errorf("the gateway does not run as the image's user %s:\n%s", stage.user, st)
		}
		g.stop(t)
	})

	t.Run("kserve", func(t *testing.T) {
		// KServe's way: the ServingRuntime's args with {{.Name}} filled in, a model directory
		// (the storage initializer's /mnt/models) and a port flag.
		var rt servingRuntime
		if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join("kserve", "servingruntime.yaml"))), &rt); err != nil {
			t.Fatal(err)
		}
		if len(rt.Spec.Containers) != 1 {
			t.Fatal("the ServingRuntime should have one container")
		}
		models := filepath.Join(t.TempDir(), "mnt", "models")
		if err := os.MkdirAll(filepath.Join(models, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"model.onnx", "labels.txt"} {
			if err := os.Symlink(filepath.Join(root, "app", "models", "mobilenet_v3_small", n), filepath.Join(models, "1", n)); err != nil {
				t.Fatal(err)
			}
		}
		var args []string
		for _, a := range rt.Spec.Containers[0].Args {
			var b strings.Builder
			if err := template.Must(template.New("arg").Parse(a)).Execute(&b, struct{ Name string }{"mobilenetv2"}); err != nil {
				t.Fatal(err)
			}
			a = strings.Replace(b.String(), "/mnt/models", models, 1)
			if strings.HasPrefix(a, "--http_port=") {
				a = "--http_port=0" // any free port; the test reads the one it got
			}
			if strings.HasPrefix(a, "--grpc-listen=") {
				a = "--grpc-listen=" + grpcAddr
			}
			args = append(args, a)
		}
		cmd := exec.Command(loader, append([]string{"--inhibit-cache", "--library-path", libPath, bin}, args...)...)
		// A model of KServe's own (its settings are not the default config's: another cache
		// key) gets a writable cache folder, as a pod's emptyDir, not the set's.
		cmd.Env = append(remapEnv(stage.env), "XDG_CACHE_HOME="+t.TempDir())
		g := startRootfsGateway(t, cmd, root)
		if st, body := g.get(t, "/v2/models/mobilenetv2/ready"); st != 200 {
			t.Fatalf("/v2/models/mobilenetv2/ready: %d %s", st, body)
		}
		req, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{
			"name": "input", "shape": []int{1}, "datatype": "BYTES", "data": []string{base64.StdEncoding.EncodeToString(jpeg)},
		}}})
		st, body := g.post(t, "/v2/models/mobilenetv2/infer", "application/json", req)
		var resp struct {
			ModelName string `json:"model_name"`
			Outputs   []struct {
				Shape []int     `json:"shape"`
				Data  []float32 `json:"data"`
			} `json:"outputs"`
		}
		if st != 200 || json.Unmarshal(body, &resp) != nil || resp.ModelName != "mobilenetv2" || len(resp.Outputs) != 1 ||
			!slices.Equal(resp.Outputs[0].Shape, []int{1, len(labels)}) || len(resp.Outputs[0].Data) != len(labels) {
			t.Fatalf("v2 infer: %d %s", st, body)
		}
		checkGRPCHealth(t, grpcAddr)
		g.stop(t)
	})

	r := rootfsRun{root: root, loader: loader, libPath: libPath, bin: bin, version: version, grpcAddr: grpcAddr,
		jpeg: jpeg, labels: labels, stage: stage, imageEnv: imageEnv, remapEnv: remapEnv}
	t.Run("image", func(t *testing.T) { r.image(t) })
	t.Run("kserve-triton", func(t *testing.T) { r.kserveTriton(t) })
}

// listRootfs logs every file of the set with its size and the total, checks that each file
// is one the set may hold, and returns their paths relative to root.
func listRootfs(t *testing.T, root string) []string {
	t.Helper()
	allowed := regexp.MustCompile(`^(app/bin/gateway|app/configs/gateway\.yaml|app/models/[^/]+/(model\.onnx|labels\.txt)|app/cache/imagegate/[0-9a-f]{64}\.(ort|curve\.json)|etc/(passwd|group)|(usr/)?lib(64|32)?/([a-z0-9_]+-linux-gnu[a-z0-9_]*/)?(ld-linux[^/]*|lib[^/]+\.so[.0-9]*)|usr/share/doc/[^/]+/copyright)$`)
	var files []string
	var total int64
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			if dst, _ := os.Readlink(p); strings.Contains(dst, "/") {
				t.Errorf("symlink %s -> %s leaves its folder", rel, dst)
			}
		} else {
			total += info.Size()
			t.Logf("%10d  %s", info.Size(), rel)
		}
		if !allowed.MatchString(rel) {
			t.Errorf("unexpected file in the runtime file set: %s", rel)
		}
		files = append(files, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%10d  total (%.1f MB): the image's uncompressed size", total, float64(total)/1e6)
	if total > imageBudget {
		t.Errorf("the runtime file set is %d bytes, over the %d-byte budget", total, imageBudget)
	}
	for _, must := range []string{"app/bin/gateway", "app/configs/gateway.yaml", "etc/passwd"} {
		if !slices.Contains(files, must) {
			t.Errorf("the file set lacks %s", must)
		}
	}
	return files
}

// ortLibRel is the ONNX Runtime library's path in the set, relative to root.
func ortLibRel(root string) string {
	matches, _ := filepath.Glob(filepath.Join(root, "*", "*", "libonnxruntime.so.*.*"))
	matches2, _ := filepath.Glob(filepath.Join(root, "*", "libonnxruntime.so.*.*"))
	for _, m := range append(matches, matches2...) {
		if rel, err := filepath.Rel(root, m); err == nil {
			return rel
		}
	}
	return "libonnxruntime.so"
}

type rootfsGateway struct {
	cmd    *exec.Cmd
	url    string
	root   string
	done   chan error
	logs   *bytes.Buffer
	logMu  *sync.Mutex
	mapped []string // the files it had mapped once serving
}

// startRootfsGateway starts cmd, waits for its "serving" line and checks that every file it
// has mapped (libraries above all) comes from root.
func startRootfsGateway(t *testing.T, cmd *exec.Cmd, root string) *rootfsGateway {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &rootfsGateway{cmd: cmd, root: root, done: make(chan error, 1), logs: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	addr := make(chan string, 1)
	mu := g.logMu
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`msg=serving addr=(\S+)`)
		for sc.Scan() {
			mu.Lock()
			g.logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		g.done <- cmd.Wait()
		close(addr)
	}()
	logs := func() string { mu.Lock(); defer mu.Unlock(); return g.logs.String() }
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-g.done
		}
	})
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("the gateway exited before serving:\n%s", logs())
		}
		g.url = "http://127.0.0.1:" + a[strings.LastIndexByte(a, ':')+1:] // 127.0.0.1:P or [::]:P
	case <-time.After(60 * time.Second):
		t.Fatalf("the gateway did not start in 60s:\n%s", logs())
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var mapped []string
	for _, l := range strings.Split(string(maps), "\n") {
		fields := strings.Fields(l)
		if len(fields) < 6 || !strings.HasPrefix(fields[5], "/") {
			continue // anonymous, [heap], [stack], [vdso], …
		}
		p := strings.Join(fields[5:], " ")
		if strings.HasPrefix(p, "/dev/") || strings.HasPrefix(p, "/memfd:") {
			continue
		}
		// In a chroot the kernel shows the path inside it.
		if !strings.HasPrefix(p, root+"/") && cmd.SysProcAttr != nil && cmd.SysProcAttr.Chroot != "" {
			p = filepath.Join(root, p)
		}
		if slices.Contains(mapped, p) {
			continue
		}
		mapped = append(mapped, p)
		if !strings.HasPrefix(p, root+"/") {
			t.Errorf("the gateway maps %s, from outside the file set", p)
		}
	}
	// Every library the binary and ONNX Runtime name (DT_NEEDED), and ONNX Runtime itself, is
	// mapped: from the set, as checked above.
	want := []string{"libonnxruntime.so"}
	for _, p := range []string{filepath.Join(root, "app", "bin", "gateway"), filepath.Join(root, ortLibRel(root))} {
		f, err := elf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		libs, err := f.ImportedLibraries()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, libs...)
	}
	for _, w := range want {
		if !slices.ContainsFunc(mapped, func(m string) bool { return strings.HasPrefix(filepath.Base(m), w) }) {
			t.Errorf("the gateway has no %s mapped (mapped: %v)", w, mapped)
		}
	}
	g.mapped = mapped
	return g
}

// checkWarmCache: the default model's session was loaded from the set's cache entry (it stays
// mapped while the session lives), which scripts/rootfs.sh made on this machine, and the log
// says nothing of the cache (a miss would: a warning, the folder being the image's).
func (g *rootfsGateway) checkWarmCache(t *testing.T) {
	t.Helper()
	dir := filepath.Join(g.root, "app", "cache", "imagegate") + "/"
	if !slices.ContainsFunc(g.mapped, func(m string) bool { return strings.HasPrefix(m, dir) }) {
		t.Errorf("the gateway did not load the set's model cache entry (built on another kind of CPU?); mapped: %v", g.mapped)
	}
	g.logMu.Lock()
	defer g.logMu.Unlock()
	if strings.Contains(g.logs.String(), "model cache") {
		t.Errorf("the log mentions the model cache:\n%s", g.logs.String())
	}
}

var rootfsClient = &http.Client{Timeout: 30 * time.Second}

func (g *rootfsGateway) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := rootfsClient.Get(g.url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (g *rootfsGateway) post(t *testing.T, path, ct string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := rootfsClient.Post(g.url+path, ct, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (g *rootfsGateway) predict(t *testing.T, jpeg []byte, labels []string) {
	t.Helper()
	if st, body := g.get(t, "/v2/health/ready"); st != 200 {
		t.Fatalf("/v2/health/ready: %d %s", st, body)
	}
	st, body := g.post(t, "/predict/", "image/jpeg", jpeg)
	var p struct {
		Prediction string `json:"prediction"`
	}
	if st != 200 || json.Unmarshal(body, &p) != nil || !slices.Contains(labels, p.Prediction) {
		t.Fatalf("POST /predict/ with a JPEG: %d %s (labels %v)", st, body, labels)
	}
	t.Logf("prediction of the default model: %s", p.Prediction)
}

func (g *rootfsGateway) checkVersion(t *testing.T, want string) {
	t.Helper()
	_, body := g.get(t, "/v2")
	var meta struct {
		Version string `json:"version"`
	}
	json.Unmarshal(body, &meta)
	if meta.Version == "" || meta.Version == "dev" || want != "" && meta.Version != want {
		t.Errorf("/v2 reports version %q, want the stamped one (%q)", meta.Version, want)
	}
}

// checkMetrics: the gateway exports every series the autoscaling rules read.
func (g *rootfsGateway) checkMetrics(t *testing.T, names []string) {
	t.Helper()
	_, body := g.get(t, "/metrics")
	for _, n := range names {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(n) + `[{ ]`).Match(body) {
			t.Errorf("/metrics has no %s, which the Prometheus Adapter's rules read", n)
		}
	}
}

func (g *rootfsGateway) stop(t *testing.T) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-g.done:
		if err != nil {
			t.Errorf("the gateway did not exit 0 after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the gateway did not exit in 60s after SIGTERM")
	}
}

// freeLoopbackAddr returns 127.0.0.1:PORT with a port free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// checkGRPCHealth asks the standard grpc.health.v1 service at addr for the server's health, as
// Kubernetes' grpc probe does (service ""), until it answers SERVING (the gRPC listener may
// start just after the HTTP one).
func checkGRPCHealth(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gRPC health at %s: %v %v, want SERVING", addr, resp.GetStatus(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func parseUser(t *testing.T, user string) (uint32, uint32) {
	t.Helper()
	u, gs, _ := strings.Cut(user, ":")
	uid, err := strconv.ParseUint(u, 10, 32)
	if err != nil {
		t.Fatalf("Dockerfile USER %q must be numeric (runAsNonRoot checks it)", user)
	}
	if uid == 0 {
		t.Fatal("Dockerfile USER is root")
	}
	gid := uid
	if gs != "" {
		g, err := strconv.ParseUint(gs, 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		gid = g
	}
	return uint32(uid), uint32(gid)
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rootfsRun is what TestRootfsServesDefaultModel's later runs share: the file set, its loader
// and libraries, the image's settings and the request to send.
type rootfsRun struct {
	root, loader, libPath, bin, version, grpcAddr string
	jpeg                                          []byte
	labels                                        []string
	stage                                         dockerStage
	imageEnv, remapEnv                            func([]string) []string
}

// image: make image's archive of this file set, read back as a container engine reads it, and
// run as one runs it: the layer unpacked, the image's own configuration applied.
func (r rootfsRun) image(t *testing.T) {
	root, stage, version, jpeg, labels, grpcAddr, imageEnv := r.root, r.stage, r.version, r.jpeg, r.labels, r.grpcAddr, r.imageEnv
	if os.Geteuid() != 0 {
		t.Skip("running the unpacked image (chroot, its user) needs root")
	}
	img, config := imageArchive(t, root, stage, version)
	unpacked := t.TempDir()
	untar(t, mutate.Extract(img), unpacked)
	c := config.Config
	uid, gid := parseUser(t, c.User)
	args := append(slices.Clone(c.Entrypoint[1:]), c.Cmd...)
	cmd := exec.Command(c.Entrypoint[0], append(args, "-listen", "127.0.0.1:0")...)
	cmd.Dir = c.WorkingDir
	cmd.Env = imageEnv(c.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: unpacked, Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	g := startRootfsGateway(t, cmd, unpacked)
	g.checkWarmCache(t)
	g.predict(t, jpeg, labels)
	g.checkVersion(t, version)
	checkGRPCHealth(t, grpcAddr)
	g.stop(t)
}

// kserveTriton: KServe's Triton runtime's args (servingruntime-triton.yaml), word for word but
// for the ports, over a Triton model repository with a config.pbtxt.
func (r rootfsRun) kserveTriton(t *testing.T) {
	root, loader, libPath, bin, jpeg, labels, grpcAddr, stage, remapEnv := r.root, r.loader, r.libPath, r.bin, r.jpeg, r.labels, r.grpcAddr, r.stage, r.remapEnv
	var rt servingRuntime
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join("kserve", "servingruntime-triton.yaml"))), &rt); err != nil {
		t.Fatal(err)
	}
	models := filepath.Join(t.TempDir(), "mnt", "models")
	if err := os.MkdirAll(filepath.Join(models, "weather", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	for n, dst := range map[string]string{"model.onnx": filepath.Join("1", "model.onnx"), "labels.txt": "labels.txt"} {
		if err := os.Symlink(filepath.Join(root, "app", "models", "mobilenet_v3_small", n), filepath.Join(models, "weather", dst)); err != nil {
			t.Fatal(err)
		}
	}
	pbtxt := "platform: \"onnxruntime_onnx\"\nmax_batch_size: 4\noutput [{ name: \"output\" dims: [11] label_filename: \"labels.txt\" }]\ndynamic_batching {}\n"
	if err := os.WriteFile(filepath.Join(models, "weather", "config.pbtxt"), []byte(pbtxt), 0o644); err != nil {
		t.Fatal(err)
	}
	_, grpcPort, _ := net.SplitHostPort(grpcAddr)
	var args []string
	for _, a := range rt.Spec.Containers[0].Args {
		a = strings.Replace(a, "/mnt/models", models, 1)
		switch {
		case strings.HasPrefix(a, "--http-port="):
			a = "--http-port=0" // any free port; the test reads the one it got
		case strings.HasPrefix(a, "--grpc-port="):
			a = "--grpc-port=" + grpcPort
		}
		args = append(args, a)
	}
	cmd := exec.Command(loader, append([]string{"--inhibit-cache", "--library-path", libPath, bin}, args...)...)
	cmd.Env = append(remapEnv(stage.env), "XDG_CACHE_HOME="+t.TempDir())
	g := startRootfsGateway(t, cmd, root)
	if st, body := g.get(t, "/v2/models/weather/config"); st != 200 || !strings.Contains(string(body), `"max_batch_size":4`) {
		t.Fatalf("/v2/models/weather/config: %d %s", st, body)
	}
	st, body := g.post(t, "/models/weather/predict", "image/jpeg", jpeg)
	if st != 200 || !slices.ContainsFunc(labels, func(l string) bool { return strings.Contains(string(body), `"`+l+`"`) }) {
		t.Fatalf("predict: %d %s", st, body)
	}
	checkGRPCHealth(t, net.JoinHostPort("127.0.0.1", grpcPort))
	g.stop(t)
}
