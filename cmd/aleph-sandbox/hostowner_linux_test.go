//go:build linux

package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestHostOfAnotherUidIsNotSentTheCommand: exec --host checks who serves
// the socket before it sends anything. A listener of another uid at the
// path (one that made the directory in /tmp before the real service
// started, or took the name while none ran) is refused, naming its uid,
// and receives nothing of the command: not its environment. The control:
// the same stand-in run as this user receives the request, environment
// and all.
func TestHostOfAnotherUidIsNotSentTheCommand(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the stand-in as another uid")
	}
	cliEnv(t)
	const other, secret = 65534, "s3cret-token-value"
	base, err := os.MkdirTemp("", "aleph-host-owner-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	// The stand-in is this test binary, where the other uid can run it.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(base, "helper")
	if err := os.WriteFile(helper, self, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		uid  int
	}{{"another uid", other}, {"this user (control)", os.Getuid()}} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(base, strings.ReplaceAll(c.name, " ", "-"))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, c.uid, c.uid); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(dir, "aleph.sock")
			cmd := exec.Command(helper)
			cmd.Env = append(os.Environ(), "ALEPH_CLI_TEST_FAKE_SERVICE="+sock)
			if c.uid != os.Getuid() {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(c.uid), Gid: uint32(c.uid)}}
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			rd := bufio.NewReader(out)
			if line, err := rd.ReadString('\n'); err != nil || line != "ready\n" {
				t.Fatalf("the stand-in: %q %v", line, err)
			}
			r := cli(t, "", false, "exec", "--host", "unix:"+sock, "--env", "TOKEN="+secret, "--", "echo", "hi")
			got, _ := io.ReadAll(rd)
			if c.uid == os.Getuid() {
				if !strings.Contains(string(got), secret) {
					t.Fatalf("the control: the stand-in got %q (exec: %d %q)", got, r.code, r.stderr)
				}
				return
			}
			if strings.Contains(string(got), secret) {
				t.Fatalf("a listener of uid %d was sent the command, its environment included: %.200q", other, got)
			}
			if r.code != 125 || !strings.Contains(r.stderr, "uid 65534") {
				t.Fatalf("exec: %d %q, want 125 naming the listener's uid", r.code, r.stderr)
			}
		})
	}
}
