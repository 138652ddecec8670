//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNoNamespacesExec runs under scripts/test-nonamespaces.sh, where bwrap
// cannot create namespaces: with sandbox.linux.fallback off, exec fails
// with one line naming the fix; with it on ("landlock"), exec -- /bin/echo
// hi works, in the Landlock tier.
func TestNoNamespacesExec(t *testing.T) {
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") != "1" {
		t.Skip("run by scripts/test-nonamespaces.sh (namespaces refused)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	installBinaries(t, bin)
	for _, d := range []string{"ws", "data", "config"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + dir,
		"XDG_DATA_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}
	run := func(extra ...string) (int, string, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "aleph-sandbox"), "exec", "--workspace-root", filepath.Join(dir, "ws"), "--", "/bin/echo", "hi")
		cmd.Env = append(append([]string{}, env...), extra...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		code := 0
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}
	code, out, errOut := run()
	if code == 0 || out != "" {
		t.Fatalf("fallback off: want a refusal, got %d %q %q", code, out, errOut)
	}
	if lines := strings.Split(strings.TrimSpace(errOut), "\n"); len(lines) != 1 {
		t.Fatalf("fallback off: want one line, got %q", errOut)
	}
	for _, want := range []string{`sandbox.linux.fallback = "landlock"`, "kernel.unprivileged_userns_clone"} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("fallback off: the line lacks %q: %q", want, errOut)
		}
	}
	code, out, errOut = run("ALEPH_SANDBOX_SANDBOX__LINUX__FALLBACK=landlock")
	if code != 0 || out != "hi\n" {
		t.Fatalf("fallback on: got %d %q %q", code, out, errOut)
	}
}
