package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// doctor exits 0 only when the configuration loads and the driver starts
// and answers; it names a driver given by path once; and it suggests
// "make build" only for this project's own drivers.
func TestDoctorExitStatusAndAdvice(t *testing.T) {
	drv := cliEnv(t)
	dir := t.TempDir()

	r := cli(t, "", false, "doctor", "--driver", drv)
	if r.code != 0 || !strings.Contains(r.stdout, "driver: "+drv+"\n") {
		t.Fatalf("working driver: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	broken := filepath.Join(dir, "aleph-driver-thirdparty")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'thirdparty: needs /dev/kvm' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "", false, "doctor", "--driver", broken)
	if r.code != 1 || !strings.Contains(r.stdout, "thirdparty: needs /dev/kvm") || strings.Contains(r.stdout, "make build") ||
		strings.Count(r.stdout, broken) != 2 { // the driver line and the problem, not twice on one line
		t.Fatalf("a driver that cannot start: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	pinned := filepath.Join(dir, "pinned.toml")
	pin := strings.Repeat("ab", 32)
	if err := os.WriteFile(pinned, []byte("[sandbox]\ndriver_sha256 = \""+pin+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "", false, "doctor", "--driver", drv, "--config", pinned)
	if r.code != 1 || !strings.Contains(r.stdout, "pinned "+pin+", the file's is ") || !strings.Contains(r.stdout, "fix: sandbox.driver_sha256 pins another binary") {
		t.Fatalf("a pin that does not match: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A configuration nothing can run with fails doctor, even though the
	// driver (the one named by --driver) answers.
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[sandbox]\nno_such_key = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "", false, "doctor", "--driver", drv, "--config", bad)
	if r.code != 1 || !strings.Contains(r.stdout, "no_such_key") || !strings.Contains(r.stdout, "backend: ") {
		t.Fatalf("a broken configuration: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
