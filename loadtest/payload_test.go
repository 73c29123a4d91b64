package loadtest

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestBodyFilesMustBeRegular: a -body or -json-image file that is a FIFO (or a device) is
// refused at once; reading a FIFO that nobody writes blocked the load generator forever, and
// SIGTERM could not stop it.
func TestBodyFilesMustBeRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := LoadBody(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("LoadBody(FIFO): %v", err)
	}
	if _, err := LoadJSONImageBodies([]string{"/dev/zero"}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("LoadJSONImageBodies(/dev/zero): %v", err)
	}
	f := filepath.Join(t.TempDir(), "body.json")
	os.WriteFile(f, []byte(`{"image": ""}`), 0o600)
	if b, err := LoadBody(f); err != nil || string(b.Data) != `{"image": ""}` || b.Name != "body.json" {
		t.Fatalf("LoadBody(regular): %+v %v", b, err)
	}
}
