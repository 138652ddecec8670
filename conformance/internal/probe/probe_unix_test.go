//go:build unix

package probe

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The set-id bits of a chmod mode reach the file (where the host lets its
// user set them).
func TestChmodSetID(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, "", "chmod", "4755", f); code != 0 {
		t.Fatalf("chmod 4755: %s", errOut)
	}
	st, err := os.Stat(f)
	if err != nil || st.Mode()&os.ModeSetuid == 0 || st.Mode().Perm() != 0o755 {
		t.Errorf("after chmod 4755: %v %v", st, err)
	}
}

func TestUnixgramProbe(t *testing.T) {
	p := filepath.Join(t.TempDir(), "d.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out, errOut, code := run(t, "", "net", "unixgram", p, "tok-1")
	if code != 0 || !strings.Contains(out, "probe-start\nsent:3\n") {
		t.Fatalf("got %q %q %d", out, errOut, code)
	}
	buf := make([]byte, 64)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := c.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "tok-1\n" {
		t.Errorf("received %q %v", buf[:n], err)
	}
}
