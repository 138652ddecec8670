package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Each bad input is one clear refusal line (exit 125) naming what is
// wrong; each has an accepted twin beside it.
func TestExecRefusesBadInputs(t *testing.T) {
	drv := cliEnv(t)
	dir := t.TempDir()
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"env name with a space", nil, []string{"--env", "A B=1"}, `"A B" is not a variable name`},
		{"env name starting with a digit", nil, []string{"--env", "1A=1"}, `"1A" is not a variable name`},
		{"env name with a dash", nil, []string{"--env", "A-B=1"}, `"A-B" is not a variable name`},
		{"unknown log level", map[string]string{"ALEPH_SANDBOX_LOG": "garbage"}, nil, `ALEPH_SANDBOX_LOG="garbage": not a log level`},
		{"log file in a missing directory", map[string]string{"ALEPH_SANDBOX_LOG_FILE": filepath.Join(dir, "missing", "x.log")}, nil,
			"its directory " + filepath.Join(dir, "missing") + " does not exist"},
		{"log file that is a directory", map[string]string{"ALEPH_SANDBOX_LOG_FILE": dir}, nil, "ALEPH_SANDBOX_LOG_FILE"},
		{"config that is a device", nil, []string{"--config", os.DevNull}, "configuration is read only from a regular file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			args := append([]string{"exec", "--driver", drv}, c.args...)
			r := cli(t, "", false, append(args, "--", "echo", "ran")...)
			if r.code != 125 || !strings.Contains(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
				t.Fatalf("exit %d stdout %q stderr %q, want one refusal line saying %q", r.code, r.stdout, r.stderr, c.want)
			}
		})
	}
	// Controls: valid names, a known level, a log file in an existing
	// directory.
	logFile := filepath.Join(dir, "cli.log")
	t.Setenv("ALEPH_SANDBOX_LOG", "DEBUG")
	t.Setenv("ALEPH_SANDBOX_LOG_FILE", logFile)
	r := cli(t, "", false, "exec", "--driver", drv, "--env", "_A1=x", "--env", "b=y", "--", "env")
	if r.code != 0 || !strings.Contains(r.stdout, "_A1=x\n") || !strings.Contains(r.stdout, "b=y\n") {
		t.Fatalf("valid names: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if st, err := os.Stat(logFile); err != nil || st.Size() == 0 {
		t.Fatalf("log file not written: %v", err)
	}
}

// A FIFO nobody reads as the log file is refused at once instead of
// hanging the CLI at the open.
func TestLogFileFIFOWithoutReader(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no FIFOs")
	}
	drv := cliEnv(t)
	fifo := mkfifo(t)
	t.Setenv("ALEPH_SANDBOX_LOG_FILE", fifo)
	done := make(chan run, 1)
	go func() { done <- cli(t, "", false, "exec", "--driver", drv, "--", "echo", "ran") }()
	select {
	case r := <-done:
		if r.code != 125 || !strings.Contains(r.stderr, "cannot be opened for writing") {
			t.Fatalf("exit %d stderr %q", r.code, r.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the CLI hangs opening a FIFO without a reader")
	}
}

// Names and text from outside are printed so that a newline or an escape
// sequence in them is seen, not acted on.
func TestControlCharactersInNamesAreQuoted(t *testing.T) {
	cliEnv(t)
	r := cli(t, "", false, "doctor", "--driver", "x\ny\x1b]0;t\x07")
	if !strings.Contains(r.stdout, `driver: "x\ny\x1b]0;t\a"`) || strings.Contains(r.stdout+r.stderr, "\x1b") || strings.Contains(r.stdout, "x\ny") {
		t.Fatalf("doctor printed the name raw: stdout %q stderr %q", r.stdout, r.stderr)
	}
	r = cli(t, "", false, "exec", "--driver", "x\ny\x1b[2J", "--", "echo")
	if r.code != 125 || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, "\x1b") {
		t.Fatalf("exec refusal: exit %d stderr %q", r.code, r.stderr)
	}
	for in, want := range map[string]string{
		"plain name":       "plain name",
		"a\nb":             `"a\nb"`,
		"\x1b]52;c;QQ==\a": `"\x1b]52;c;QQ==\a"`,
		"caf\u00e9":        "caf\u00e9",
		"c1\u009b":         `"c1\u009b"`,
	} {
		if got := shown(in); got != want {
			t.Errorf("shown(%q) = %s, want %s", in, got, want)
		}
	}
	if got := oneLine("a\n b\x1b[2J\u0085c"); got != `a b\x1b[2J c` {
		t.Errorf("oneLine: %q", got)
	}
}

// endless is standard input that never ends (yes | aleph-sandbox exec --stdin).
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	return len(p), nil
}

// --stdin reads a bounded amount: an endless stdin is refused with the
// limit named, not read into memory for ever. Control: a small one
// reaches the child.
func TestExecStdinIsBounded(t *testing.T) {
	drv := cliEnv(t)
	var out, errOut strings.Builder
	code := dispatch(context.Background(), []string{"exec", "--driver", drv, "--stdin", "--", "cat"}, stdio{In: endless{}, Out: &out, Err: &errOut})
	if code != 125 || !strings.Contains(errOut.String(), fmt.Sprintf("larger than %d bytes", driverapi.MaxStdinBytes)) || !strings.Contains(errOut.String(), "-i streams") {
		t.Fatalf("endless stdin: exit %d stderr %q", code, errOut.String())
	}
	if r := cli(t, "hello", false, "exec", "--driver", drv, "--stdin", "--", "cat"); r.code != 0 || r.stdout != "hello" {
		t.Fatalf("control: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
}
