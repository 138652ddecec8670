package starttrace

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestOffWithoutVariable(t *testing.T) {
	t.Setenv(EnvVar, "")
	tr := FromEnv("cli")
	if tr != nil {
		t.Fatalf("FromEnv with %s unset = %v, want nil", EnvVar, tr)
	}
	// A nil trace marks nothing and does not panic.
	tr.Mark("x")
	tr.Close()
}

func TestMarksAppendWholeLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace")
	t.Setenv(EnvVar, path)
	a, b := FromEnv("cli"), FromEnv("driver")
	if a == nil || b == nil {
		t.Fatal("FromEnv returned nil with the variable set")
	}
	a.Mark("first")
	b.Mark("second\nline")
	a.Close()
	b.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), data)
	}
	for i, want := range []string{"cli first", "driver second line"} {
		f := strings.SplitN(lines[i], " ", 3)
		if len(f) != 3 {
			t.Fatalf("line %q: want TIME PID WHO EVENT", lines[i])
		}
		if _, err := strconv.ParseInt(f[0], 10, 64); err != nil {
			t.Errorf("line %q: time: %v", lines[i], err)
		}
		if f[1] != strconv.Itoa(os.Getpid()) || f[2] != want {
			t.Errorf("line %q: want pid %d and %q", lines[i], os.Getpid(), want)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("trace file mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestUnopenableFileTurnsTracingOff(t *testing.T) {
	t.Setenv(EnvVar, filepath.Join(t.TempDir(), "missing", "trace"))
	if tr := FromEnv("cli"); tr != nil {
		t.Fatal("FromEnv on an unopenable path returned a trace")
	}
}
