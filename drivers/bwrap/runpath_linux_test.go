//go:build linux

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The driver runs a command through one of three starters (runpath_linux.go):
// a sandbox built for it, a prepared sandbox handed the command, or the
// Landlock tier. The caller cannot tell which ran its command from the
// Exit: the same command gives the same exit code, signal, timeout,
// output counts, truncation, stdin, refused process starts and usage on
// each. TestRunPathParity runs one table through every path this host
// offers and fails on the first field one path reports differently.

// runPath is one of the driver's exec paths, as a test drives it.
type runPath struct {
	name string
	d    *Driver
	// took says whether an Exit's details show that this path ran it.
	took func(driverapi.Exit) bool
}

// runPaths are the exec paths this host offers; each path it cannot
// offer is named in skipped with the reason.
func runPaths(t *testing.T) (paths []runPath, skipped []string) {
	t.Helper()
	direct := func(e driverapi.Exit) bool { return e.Details["tier"] == tierBwrap && e.Details["prepared"] != "1" }
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") != "" {
		skipped = append(skipped, "direct and prepared: bwrap cannot create namespaces here (ALEPH_TEST_NO_NAMESPACES)")
	} else {
		paths = append(paths, runPath{name: "direct", d: testDriver(t, options{Prepared: preparedOff}), took: direct})
		if d := testDriver(t, options{Prepared: preparedAlways}); d.poolMode() != preparedOff {
			paths = append(paths, runPath{name: "prepared", d: d, took: func(e driverapi.Exit) bool {
				return e.Details["tier"] == tierBwrap && e.Details["prepared"] == "1"
			}})
		} else {
			skipped = append(skipped, "prepared: "+preparedOffWhy(d.probe()))
		}
	}
	if landlockABI() < minTierLandlockABI || !seccompAvailable() {
		skipped = append(skipped, fmt.Sprintf("tier: needs Landlock ABI >= %d and seccomp (ABI %d here)", minTierLandlockABI, landlockABI()))
	} else {
		paths = append(paths, runPath{name: "tier", d: tierDriver(t, options{}), took: func(e driverapi.Exit) bool {
			return e.Details["tier"] == tierLandlock
		}})
	}
	return paths, skipped
}

// exitShape is what a caller reads of a run, without what varies by
// nature (durations, the amount of CPU used).
type exitShape struct {
	Err            string // "" or the kind of error
	ExitCode       int32
	Signal         int32
	TimedOut       bool
	StdoutBytes    int64
	StderrBytes    int64
	Truncated      bool
	Stdout, Stderr string // what reached the streams (a prefix when long)
	SpawnRefused   int64
	UsagePresent   bool
	OOMKilled      bool
}

// parityCase is one command of the table.
type parityCase struct {
	name    string
	spawn   bool
	memMB   uint64
	program string
	args    []string
	stdin   string
	stream  bool // RunStream with stdin from the stream
	timeout time.Duration
	// cancel cancels the run's context once the command has written.
	cancel bool
	maxOut int64
	want   exitShape
	// onTier replaces want in the Landlock tier, where the tier states
	// that it does not give something (a streamed run).
	onTier *exitShape
}

func TestRunPathParity(t *testing.T) {
	paths, skipped := runPaths(t)
	for _, s := range skipped {
		t.Logf("not run here: %s", s)
	}
	if len(paths) == 0 {
		t.Skip("no exec path of the driver can run here")
	}
	if len(paths) < 2 {
		t.Logf("one path only (%s): its results are checked against the table, not against another path", paths[0].name)
	}
	sh := "/bin/sh"
	cases := []parityCase{
		{name: "exit status and output", spawn: true, program: sh, args: []string{"-c", "printf out; printf errr >&2; exit 3"},
			want: exitShape{ExitCode: 3, StdoutBytes: 3, StderrBytes: 4, Stdout: "out", Stderr: "errr", UsagePresent: true}},
		{name: "death by a signal", spawn: true, program: sh, args: []string{"-c", "printf x; kill -TERM $$"},
			want: exitShape{ExitCode: 143, Signal: 15, StdoutBytes: 1, Stdout: "x", UsagePresent: true}},
		{name: "exit 128+N is no signal", spawn: true, program: sh, args: []string{"-c", "exit 137"},
			want: exitShape{ExitCode: 137, UsagePresent: true}},
		{name: "timeout", spawn: true, program: sh, args: []string{"-c", "printf started; exec sleep 60"}, timeout: 2 * time.Second,
			want: exitShape{ExitCode: 137, Signal: 9, TimedOut: true, StdoutBytes: 7, Stdout: "started", UsagePresent: true}},
		{name: "cancelled", spawn: true, program: sh, args: []string{"-c", "printf started; exec sleep 60"}, cancel: true,
			want: exitShape{Err: context.Canceled.Error()}},
		{name: "output over budget", spawn: true, program: sh, args: []string{"-c", "head -c 200000 /dev/zero; head -c 50000 /dev/zero >&2"}, maxOut: 4096,
			want: exitShape{StdoutBytes: 200000, StderrBytes: 50000, Truncated: true,
				Stdout: strings.Repeat("\x00", 2048), Stderr: strings.Repeat("\x00", 2048), UsagePresent: true}},
		{name: "stdin delivered", program: "/bin/cat", stdin: "to the command\n",
			want: exitShape{StdoutBytes: 15, Stdout: "to the command\n", UsagePresent: true}},
		{name: "no stdin reads end of file", program: "/bin/cat",
			want: exitShape{UsagePresent: true}},
		{name: "streamed stdin", program: "/bin/cat", stdin: "streamed\n", stream: true,
			want:   exitShape{StdoutBytes: 9, Stdout: "streamed\n", UsagePresent: true},
			onTier: &exitShape{Err: "unavailable " + driverapi.FeatureStdinStream}},
		{name: "process start refused", program: sh, args: []string{"-c", "/bin/true; printf after"},
			// dash reports the refused fork on stderr and gives up (2).
			want: exitShape{ExitCode: 2, SpawnRefused: 1, UsagePresent: true}},
		{name: "program not found", program: "/no/such/program",
			want: exitShape{Err: "invalid program"}},
		{name: "killed for memory", spawn: true, memMB: 64, program: "/usr/bin/python3",
			args: []string{"-c", "import os\nf = os.memfd_create('fill')\nfor _ in range(256): os.write(f, bytes(1 << 20))"},
			want: exitShape{ExitCode: 137, Signal: 9, OOMKilled: true, UsagePresent: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := map[string]exitShape{}
			for _, p := range paths {
				want := c.want
				if p.name == "tier" && c.onTier != nil {
					want = *c.onTier
				}
				shape, exit := runShape(t, p, c)
				// Stderr of a refused fork is the shell's message: its
				// wording is dash's, its presence the same everywhere.
				if c.name == "process start refused" && shape.StderrBytes > 0 {
					shape.StderrBytes, shape.Stderr = -1, ""
					want.StderrBytes = -1
				}
				if c.memMB > 0 && !hasFeature(t, p.d, driverapi.FeatureMemoryLimit) {
					// Where no memory cgroup is writable every path
					// refuses the limit alike.
					want = exitShape{Err: "unavailable " + driverapi.FeatureMemoryLimit}
				}
				if shape.Err == "" && !p.took(exit) {
					t.Errorf("%s: the command did not take this path (details %v)", p.name, exit.Details)
				}
				if shape != want {
					t.Errorf("%s: got  %+v\n          want %+v", p.name, shape, want)
				}
				got[p.name] = shape
			}
			t.Logf("%v", got)
		})
	}
}

// runShape runs c through p and reduces the outcome to its shape.
func runShape(t *testing.T, p runPath, c parityCase) (exitShape, driverapi.Exit) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ws := newWorkspace(t)
	caps := driverapi.Capabilities{SpawnSubprocess: c.spawn, MaxMemoryMB: c.memMB}
	prof, err := p.d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws})
	if err != nil {
		var un *driverapi.UnavailableError
		if errors.As(err, &un) {
			return exitShape{Err: "unavailable " + un.Feature}, driverapi.Exit{}
		}
		t.Fatalf("%s: profile: %v", p.name, err)
	}
	timeout := c.timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	maxOut := c.maxOut
	if maxOut == 0 {
		maxOut = 1 << 20
	}
	spec := driverapi.RunSpec{Program: c.program, Args: c.args, Env: pathEnv(), Cwd: ws, Profile: prof,
		Timeout: timeout, MaxOutputBytes: maxOut, CommandID: t.Name() + "/" + p.name}
	var out, errb lockedBuf
	streams := driverapi.Streams{Stdout: &out, Stderr: &errb}
	if c.cancel {
		go func() {
			for !strings.Contains(out.String(), "started") && ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
		}()
	}
	var exit driverapi.Exit
	if c.stream {
		exit, err = p.d.RunStream(ctx, spec, driverapi.StreamInput{Stdin: strings.NewReader(c.stdin)}, streams)
	} else {
		spec.Stdin = []byte(c.stdin)
		exit, err = p.d.Run(ctx, spec, streams)
	}
	if err != nil {
		var inv *driverapi.InvalidSpecError
		var un *driverapi.UnavailableError
		switch {
		case errors.As(err, &inv):
			return exitShape{Err: "invalid " + inv.Field}, exit
		case errors.As(err, &un):
			return exitShape{Err: "unavailable " + un.Feature}, exit
		}
		return exitShape{Err: err.Error()}, exit
	}
	prefix := func(b []byte) string {
		if len(b) > 4096 {
			b = b[:4096]
		}
		return string(b)
	}
	return exitShape{
		ExitCode: exit.ExitCode, Signal: exit.Signal, TimedOut: exit.TimedOut,
		StdoutBytes: exit.StdoutBytes, StderrBytes: exit.StderrBytes, Truncated: exit.Truncated,
		Stdout: prefix([]byte(out.String())), Stderr: prefix([]byte(errb.String())),
		SpawnRefused: exit.SpawnRefused, UsagePresent: exit.Usage.MaxRSSKB > 0, OOMKilled: exit.OOMKilled,
	}, exit
}

// hasFeature says whether d claims feature f.
func hasFeature(t *testing.T, d *Driver, f string) bool {
	t.Helper()
	hc, err := d.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return hc.Has(f)
}
