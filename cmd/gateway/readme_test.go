package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"image/jpeg"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The README's quickstart, run as a reader runs it: every command of its ```sh blocks, in
// order, in a copy of the checkout's scripts/get-model.sh, Makefile and bin/gateway, and each
// output block compared with what the command before it printed. Three things differ from a
// reader's terminal, and only these: scripts/get-model.sh fetches from ../shared/models (its
// IMAGEGATE_MODEL_SOURCE) since tests run offline; the server that `make run` would start is
// started from the command `make -n run` prints, on a free port (127.0.0.1:8080 in the
// commands is rewritten to it) and without the admin port; and the photo the commands send is
// scikit-image's coffee picture from ../shared/images, as JPEG.

type mdBlock struct {
	lang, text string
}

// fencedBlocks returns the fenced code blocks of the section that starts with heading.
func fencedBlocks(t *testing.T, doc, heading string) []mdBlock {
	t.Helper()
	var blocks []mdBlock
	in, fenced := false, false
	var cur mdBlock
	var body strings.Builder
	for line := range strings.Lines(doc) {
		line = strings.TrimRight(line, "\n")
		if !fenced && strings.HasPrefix(line, "## ") {
			if in {
				break
			}
			in = strings.HasPrefix(line, heading)
			continue
		}
		if !in {
			continue
		}
		if strings.HasPrefix(line, "```") {
			if fenced {
				cur.text = body.String()
				blocks = append(blocks, cur)
			} else {
				cur = mdBlock{lang: strings.TrimPrefix(line, "```")}
				body.Reset()
			}
			fenced = !fenced
			continue
		}
		if fenced {
			body.WriteString(line + "\n")
		}
	}
	if !in {
		t.Fatalf("no section %q", heading)
	}
	return blocks
}

// commands splits a shell block into commands: comment and blank lines dropped, lines ending
// in a backslash joined.
func commands(block string) []string {
	var out []string
	var cur string
	for _, line := range strings.Split(block, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if c, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur += c + " "
			continue
		}
		out = append(out, cur+trimmed)
		cur = ""
	}
	return out
}

// startGatewayIn starts bin/gateway with args in dir and waits for its "serving" log line.
func startGatewayIn(t *testing.T, dir string, args ...string) *gateway {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gateway{t: t, cmd: cmd, logs: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`msg=serving addr=(\S+)`)
		for sc.Scan() {
			g.mu.Lock()
			g.logs.WriteString(sc.Text() + "\n")
			g.mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		g.done <- cmd.Wait()
		close(addr)
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-g.done
		}
	})
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("%s exited before serving:\n%s", strings.Join(args, " "), g.log())
		}
		g.url = "http://" + a
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start in 60s:\n%s", strings.Join(args, " "), g.log())
	}
	return g
}

// sameOutput compares a command's output with the README's: as JSON values when both are
// JSON, else as text.
func sameOutput(got, want string) bool {
	var g, w any
	if json.Unmarshal([]byte(got), &g) == nil && json.Unmarshal([]byte(want), &w) == nil {
		return reflect.DeepEqual(g, w)
	}
	return strings.TrimSpace(got) == strings.TrimSpace(want)
}

func TestReadmeQuickstart(t *testing.T) {
	shared := sharedDir(t)
	ortLib(t)
	for _, tool := range []string{"bash", "curl", "make", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the quickstart needs %s (scripts/setup.sh installs it): %v", tool, err)
		}
	}
	root := repoRoot(t)
	blocks := fencedBlocks(t, readDoc(t, "README.md"), "## Quickstart")

	// The checkout's pieces the commands use, and the photo they send.
	box := t.TempDir()
	os.MkdirAll(filepath.Join(box, "scripts"), 0o755)
	os.MkdirAll(filepath.Join(box, "bin"), 0o755)
	for _, f := range []string{"scripts/get-model.sh", "Makefile"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(box, f), b, 0o755)
	}
	bin, err := filepath.Abs(gatewayBin(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(box, "bin", "gateway")); err != nil {
		t.Fatal(err)
	}
	var shell strings.Builder
	for _, b := range blocks {
		if b.lang == "sh" {
			shell.WriteString(b.text)
		}
	}
	photo := regexp.MustCompile(`@(\S+\.jpe?g)`).FindStringSubmatch(shell.String())
	if photo == nil {
		t.Fatal("the quickstart sends no JPEG (`curl ... @photo.jpg`)")
	}
	f, err := os.Open(filepath.Join(shared, "images", "skimage_coffee.png"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var jpg bytes.Buffer
	jpeg.Encode(&jpg, img, &jpeg.Options{Quality: 90})
	os.WriteFile(filepath.Join(box, photo[1]), jpg.Bytes(), 0o644)

	run := func(cmd string, env ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, "bash", "-c", cmd)
		c.Dir = box
		c.Env = append(os.Environ(), env...)
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		if err := c.Run(); err != nil {
			t.Fatalf("%s: %v\n%s%s", cmd, err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	var g *gateway
	var last, lastCmd string
	served, fetched, compared := false, false, 0
	for _, b := range blocks {
		if b.lang != "sh" {
			if lastCmd == "" {
				t.Fatalf("an output block follows no command:\n%s", b.text)
			}
			if !sameOutput(last, b.text) {
				t.Errorf("%s\nprinted:\n%s\nthe README says:\n%s", lastCmd, last, b.text)
			}
			compared++
			lastCmd = ""
			continue
		}
		for _, cmd := range commands(b.text) {
			last, lastCmd = "", cmd
			switch {
			case strings.HasPrefix(cmd, "scripts/get-model.sh "):
				words, _, _ := strings.Cut(cmd, " #") // a comment after the command
				fields := strings.Fields(words)
				name := fields[len(fields)-1]
				src := filepath.Join(shared, "models", name)
				if _, err := os.Stat(src); err != nil {
					t.Fatalf("%s: the test fetches the model offline from ../shared/models/%s, which is absent: the quickstart must use a model ../shared has", cmd, name)
				}
				last = run(cmd, "IMAGEGATE_MODEL_SOURCE="+src)
				fetched = true
			case strings.HasPrefix(cmd, "make run"):
				var line string
				for l := range strings.Lines(run("make -n " + strings.TrimPrefix(cmd, "make "))) {
					if strings.HasPrefix(l, "bin/gateway ") {
						line = strings.TrimSpace(l)
					}
				}
				if line == "" {
					t.Fatalf("make -n %s prints no bin/gateway command", cmd)
				}
				if g != nil {
					t.Fatalf("%s: a second server", cmd)
				}
				args := append(strings.Fields(line), "-listen", "127.0.0.1:0", "-admin-listen", "off")
				g = startGatewayIn(t, box, args...)
				served = true
			default:
				if strings.Contains(cmd, "127.0.0.1:8080") {
					if g == nil {
						t.Fatalf("%s: no server was started before it", cmd)
					}
					cmd = strings.ReplaceAll(cmd, "http://127.0.0.1:8080", g.url)
				}
				last = run(cmd)
			}
		}
	}
	if !fetched || !served || compared < 2 {
		t.Fatalf("the quickstart fetched a model: %v, started a server: %v, showed %d outputs; it must do all three (two outputs at least)", fetched, served, compared)
	}
	// Nothing but the laid-out model was left beside it.
	ents, _ := os.ReadDir(filepath.Join(box, "models"))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("scripts/get-model.sh left %s behind", e.Name())
		}
	}
}

// TestReadmePerformanceTable: the README's performance table is the one bench/readme.sh takes
// from docs/benchmarks.md (make bench writes both), so that a new report makes the README
// follow and neither can be edited alone.
func TestReadmePerformanceTable(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bench/readme.sh needs bash")
	}
	root := repoRoot(t)
	out, err := exec.Command(filepath.Join(root, "bench", "readme.sh")).Output()
	if err != nil {
		t.Fatalf("bench/readme.sh: %v", err)
	}
	const begin, end = "<!-- make bench: generated from docs/benchmarks.md by bench/readme.sh -->\n", "<!-- end of make bench -->"
	readme := readDoc(t, "README.md")
	i, j := strings.Index(readme, begin), strings.Index(readme, end)
	if i < 0 || j < i {
		t.Fatal("README.md has no make bench markers around its performance table")
	}
	if got, want := readme[i+len(begin):j], string(out); got != want {
		t.Errorf("README.md's performance table is not docs/benchmarks.md's (run bench/readme.sh -update):\n--- README.md\n%s--- bench/readme.sh\n%s", got, want)
	}
	if !strings.Contains(string(out), "| **imagegate, shipped config") {
		t.Errorf("the generated table has no row of the shipped configuration:\n%s", out)
	}
}
