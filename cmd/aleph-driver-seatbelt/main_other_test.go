//go:build !darwin

package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRefusesOffTarget runs main in a child process: off macOS it must
// print one clear line on stderr, nothing on stdout (the plugin handshake
// channel), and exit 125.
func TestRefusesOffTarget(t *testing.T) {
	if os.Getenv("ALEPH_TEST_RUN_MAIN") == "1" {
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRefusesOffTarget$")
	cmd.Env = append(os.Environ(), "ALEPH_TEST_RUN_MAIN=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 125 {
		t.Fatalf("exit: %v, want status 125", err)
	}
	if stdout.Len() != 0 {
		t.Errorf("wrote to stdout: %q", stdout.String())
	}
	if !strings.Contains(stderr.String(), "runs only on macOS") {
		t.Errorf("stderr %q", stderr.String())
	}
}
