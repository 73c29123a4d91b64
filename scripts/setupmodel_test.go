package scripts

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// scripts/setup-model.sh, the step of scripts/setup.sh that fetches the classifier `make run`
// serves: offline (its public home out of reach: here a proxy on a closed port, as a machine
// behind a firewall sees it) it says so plainly and succeeds, fetching nothing; from
// ../shared (--from, as a mirror) it lays the model out verified.

// setupModel runs scripts/setup-model.sh with args and the extra environment.
func setupModel(t *testing.T, env []string, args ...string) run {
	t.Helper()
	cmd := exec.Command("./setup-model.sh", args...)
	cmd.Env = append(os.Environ(), "IMAGEGATE_MODEL_SOURCE=")
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := run{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// offline is an environment in which no HTTPS request leaves the machine.
var offline = []string{"https_proxy=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9", "ALL_PROXY=http://127.0.0.1:9", "no_proxy=", "NO_PROXY="}

func TestSetupModelOffline(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl (scripts/setup.sh installs it):", err)
	}
	models := t.TempDir()
	r := setupModel(t, offline, "--models-dir", models)
	if r.code != 0 {
		t.Fatalf("offline, setup must go on: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, s := range []string{"OFFLINE", "cannot be fetched", "models/mobilenet_v3_small", "random", "means nothing", "scripts/get-model.sh [--from SOURCE] " + int8Name} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("the offline message does not say %q:\n%s", s, r.stdout)
		}
	}
	if ents, _ := os.ReadDir(models); len(ents) != 0 {
		t.Errorf("offline, %s holds %v", models, ents)
	}
}

func TestSetupModelFromShared(t *testing.T) {
	shared := sharedModelDir(t)
	models := t.TempDir()
	// --from works offline: the source is the one asked for, no probe of the public home.
	r := setupModel(t, offline, "--from", shared, "--models-dir", models)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	checkLaidOut(t, models, shared)
	// Present: verified in place, also offline and without a source.
	r = setupModel(t, offline, "--models-dir", models)
	if r.code != 0 || strings.Count(r.stdout, "present and verified") != 2 || strings.Contains(r.stdout, "OFFLINE") {
		t.Fatalf("second run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A source that does not hold it fails: the user asked for that source.
	r = setupModel(t, nil, "--from", t.TempDir(), "--models-dir", t.TempDir())
	if r.code == 0 || !strings.Contains(r.stderr, "cannot fetch") {
		t.Errorf("an empty --from: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestSetupRunsSetupModel: scripts/setup.sh (which installs packages, so it is not run here)
// hands its --from to setup-model.sh in its default mode, and fetches no model in test mode.
func TestSetupRunsSetupModel(t *testing.T) {
	b, err := os.ReadFile("setup.sh")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !regexp.MustCompile(`(?m)^if \[ \$mode = run \]; then\n  scripts/setup-model.sh "\$\{model_args\[@\]\}"\nfi\n?$`).MatchString(s) ||
		!strings.Contains(s, `--from) [ $# -ge 2 ] || { echo "setup: --from needs a source" >&2; exit 2; }; model_args=(--from "$2")`) {
		t.Errorf("setup.sh does not run scripts/setup-model.sh with its --from in run mode")
	}
	// The argument parsing alone, with the installing steps cut off.
	head, _, _ := strings.Cut(s, "pkgs=(")
	for _, c := range []struct {
		args []string
		ok   bool
	}{{[]string{"test"}, true}, {[]string{"--from", "x"}, true}, {[]string{"--from=x", "test"}, true}, {[]string{"bogus"}, false}, {[]string{"--from"}, false}} {
		cmd := exec.Command("bash", append([]string{"-c", head + "\necho mode=$mode from=${model_args[*]}", "setup.sh"}, c.args...)...)
		out, err := cmd.CombinedOutput()
		if (err == nil) != c.ok {
			t.Errorf("setup.sh %q: %v\n%s", c.args, err, out)
		}
	}
}
