package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// TestProcessConfigSection: [sandbox.processes] reaches the table's limits
// as written, keys not set keep the defaults, and the loader refuses an
// unknown key or a bad value by its full name.
func TestProcessConfigSection(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	dir := t.TempDir()
	load := func(body string) (Config, error) {
		p := filepath.Join(dir, "c.toml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return LoadConfig(p, WithSection(ProcessSchema(), func(b []byte) error { _, err := ParseProcessConfig(b); return err }))
	}
	cfg, err := load("[sandbox.processes]\nmax_per_session = 2\nmax_lifetime_seconds = 90\n")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := ProcessConfigOf(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := defaultProcessLimits()
	want.PerSession, want.MaxLifetime = 2, 90*time.Second
	if got := pc.Limits(); got != want {
		t.Fatalf("limits %+v, want %+v", got, want)
	}
	// The table takes them as given.
	if got := NewProcessTable(nil, pc.Limits()).Limits(); got != want {
		t.Fatalf("table limits %+v, want %+v", got, want)
	}
	for body, key := range map[string]string{
		"[sandbox.processes]\nmax_per_sesion = 2\n":          "sandbox.processes.max_per_sesion",
		"[sandbox.processes]\nmax_total = 0\n":               "sandbox.processes.max_total",
		"[sandbox.processes]\nring_bytes = \"big\"\n":        "sandbox.processes.ring_bytes",
		"[sandbox.processes]\nmax_lifetime_seconds = -5\n":   "sandbox.processes.max_lifetime_seconds",
		"[sandbox.processes]\nstdin_bytes = 1099511627776\n": "sandbox.processes.stdin_bytes",
	} {
		_, err := load(body)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != key {
			t.Errorf("%q: %v, want a ConfigError on %s", body, err, key)
		}
	}
	// The defaults are the table's when nothing is configured.
	if got := NewProcessTable(nil, ProcessLimits{}).Limits(); got != defaultProcessLimits() {
		t.Fatalf("zero limits %+v, defaults %+v", got, defaultProcessLimits())
	}
}

// TestStdinPipeOpenedAndBounded: Opened fires at the first Read (not at a
// write), a writer past the bound waits, and CloseRead releases it.
func TestStdinPipeOpenedAndBounded(t *testing.T) {
	p := NewStdinPipe(4)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if n, err := p.Write(ctx, []byte("abcdef")); n != 4 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write past the bound: %d %v", n, err)
	}
	if p.Buffered() != 4 {
		t.Fatalf("buffered %d", p.Buffered())
	}
	select {
	case <-p.Opened():
		t.Fatal("opened before any read")
	default:
	}
	buf := make([]byte, 8)
	if n, err := p.Read(buf); n != 4 || err != nil {
		t.Fatalf("read %d %v", n, err)
	}
	select {
	case <-p.Opened():
	default:
		t.Fatal("not opened after a read")
	}
	if n, err := p.Write(context.Background(), []byte("wxyz")); n != 4 || err != nil {
		t.Fatalf("write once read: %d %v", n, err)
	}
	done := make(chan error, 1)
	go func() { _, err := p.Write(context.Background(), []byte("more")); done <- err }()
	p.CloseRead()
	if err := <-done; !errors.Is(err, ErrProcessEnded) {
		t.Fatalf("a waiting writer after CloseRead: %v", err)
	}
}

// TestProcessStats: the counts of started and ended processes by outcome,
// and what the rings hold.
func TestProcessStats(t *testing.T) {
	_, pt := newProcTable(t, &streamDriver{}, ProcessLimits{})
	if st := pt.Stats(); st.Started != 0 || st.Running != 0 || len(st.Exited) != 0 {
		t.Fatalf("fresh table %+v", st)
	}
	a, err := pt.Start(context.Background(), Command{SessionID: "a", Program: "prog"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := pt.Start(context.Background(), Command{SessionID: "b", Program: "prog"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pt.Write(context.Background(), a, []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, pt, a, "got:one\n")
	st := pt.Stats()
	if st.Started != 2 || st.Running != 2 || st.Held != 2 || st.OutputBytes != int64(len("got:one\n")) {
		t.Fatalf("two running %+v", st)
	}
	pt.ForgetSession("a")
	st = pt.Stats()
	if st.Started != 2 || st.Running != 1 || st.Held != 1 || st.Exited[ProcessKilled] != 1 {
		t.Fatalf("after forgetting one %+v", st)
	}
	// One that ends by itself (stdin closed) is ok, and leaves the table
	// when waited for.
	_ = pt.CloseStdin(b)
	if _, err := pt.Wait(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	st = pt.Stats()
	if st.Running != 0 || st.Held != 0 || st.Exited[ProcessOK] != 1 || st.Exited[ProcessKilled] != 1 || st.OutputBytes != 0 {
		t.Fatalf("after both ended %+v", st)
	}
}

// TestProcessOutcome: how a run's end is counted. A cancelled run counts
// as killed when the cancellation ended it (the driver's error, or an exit
// by a signal), not when it had exited by itself just before (a backstop
// or a forgotten session firing as the run returned).
func TestProcessOutcome(t *testing.T) {
	exit := func(code, sig int32) *Output {
		return &Output{Exit: driverapi.Exit{ExitCode: code, Signal: sig}}
	}
	cases := []struct {
		name      string
		r         ProcessResult
		cancelled bool
		want      string
	}{
		{"own exit", ProcessResult{Output: exit(3, 0)}, false, ProcessOK},
		{"killed through the driver", ProcessResult{Output: exit(137, 9)}, false, ProcessOK},
		{"cancelled, the driver's error", ProcessResult{Err: context.Canceled}, true, ProcessKilled},
		{"cancelled, killed by a signal", ProcessResult{Output: exit(137, 9)}, true, ProcessKilled},
		{"cancelled as it exited by itself", ProcessResult{Output: exit(0, 0)}, true, ProcessOK},
		{"timed out", ProcessResult{Output: &Output{Exit: driverapi.Exit{ExitCode: 124, TimedOut: true}}}, true, ProcessTimedOut},
		{"denied", ProcessResult{Err: &DeniedError{}}, true, ProcessDenied},
		{"signalled during the approval", ProcessResult{Err: fmt.Errorf("SIGKILL: %w", ErrSignalBeforeStart)}, false, ProcessKilled},
		{"error", ProcessResult{Err: errors.New("no sandbox")}, false, ProcessError},
	}
	for _, c := range cases {
		if got := processOutcome(c.r, c.cancelled); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
