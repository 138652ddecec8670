//go:build linux

package bwrap

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// RawRunsCommand is the mode of the driver binary that runs a command
// through bubblewrap alone, with exactly the namespace and mount flags the
// driver would use for it: the baseline `aleph-sandbox bench` measures the
// pipeline against. The CLI starts it as a process of its own instead of
// linking this package, so the host binary carries none of the driver.
// Never a way to run untrusted code: there is no sandbox-init (no Landlock,
// seccomp or rlimits), no cgroup and no output budget.
const RawRunsCommand = "raw-bwrap-runs"

// RawRunsRequest is the first line RawRunsMain reads: the profile request
// the plan is built from and the command to run (its Profile is ignored:
// the plan is built here, from Request).
type RawRunsRequest struct {
	Request driverapi.ProfileRequest `json:"request"`
	Spec    driverapi.RunSpec        `json:"spec"`
	// Minimal runs the smallest bwrap sandbox instead (minimalArgs): the
	// floor of any bwrap-based sandbox, not the driver's flags.
	Minimal bool `json:"minimal,omitempty"`
}

// RawRunsReply answers one "run" line: how long the run took, measured
// here around the bwrap process alone (the pipe to the caller is not part
// of it), or why it failed.
type RawRunsReply struct {
	Nanoseconds int64  `json:"ns"`
	Error       string `json:"error,omitempty"`
}

// RawRunsMain is `aleph-driver-bwrap raw-bwrap-runs`: the driver's section
// of the configuration in OptionsEnv, as for the plugin; a RawRunsRequest
// as the first line of stdin; then, for every further line, one run and one
// RawRunsReply line on stdout, until stdin ends. The command's own output is
// discarded.
func RawRunsMain(args []string, stdin io.Reader, stdout io.Writer) int {
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "usage: "+RawRunsCommand+" (the request on stdin)")
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "%s: %v\n", RawRunsCommand, err)
		return 125
	}
	o, err := ParseOptions(os.Getenv(OptionsEnv))
	if err != nil {
		return fail(err)
	}
	d, err := New(Config{Options: o})
	if err != nil {
		return fail(err)
	}
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 64<<10), 2*driverapi.MaxStdinBytes+(1<<20))
	if !in.Scan() {
		return fail(fmt.Errorf("no request on stdin: %v", in.Err()))
	}
	var req RawRunsRequest
	if err := json.Unmarshal(in.Bytes(), &req); err != nil {
		return fail(fmt.Errorf("request: %w", err))
	}
	ctx := context.Background()
	prof, err := d.ProfileFor(ctx, req.Request)
	if err != nil {
		return fail(err)
	}
	spec := req.Spec
	spec.Profile = prof
	enc := json.NewEncoder(stdout)
	run := func() error { return d.rawRun(ctx, spec) }
	if req.Minimal {
		h := d.probe()
		if h.sandboxErr != nil || h.tier != tierBwrap {
			return fail(fmt.Errorf("raw minimal bwrap: no bwrap sandbox here"))
		}
		args := minimalArgs(req.Request.Workspace, append([]string{spec.Program}, spec.Args...)...)
		run = func() error {
			c := exec.CommandContext(ctx, h.bwrap, args...)
			c.Env = launchEnv()
			if len(spec.Stdin) > 0 {
				c.Stdin = bytes.NewReader(spec.Stdin)
			}
			return c.Run()
		}
	}
	for in.Scan() {
		start := time.Now()
		err := run()
		reply := RawRunsReply{Nanoseconds: time.Since(start).Nanoseconds()}
		if err != nil {
			reply.Error = err.Error()
		}
		if err := enc.Encode(reply); err != nil {
			return fail(err)
		}
	}
	return 0
}

// rawRun runs spec once through rawBwrapCommand.
func (d *Driver) rawRun(ctx context.Context, spec driverapi.RunSpec) error {
	c, release, err := d.rawBwrapCommand(ctx, spec)
	if err != nil {
		return err
	}
	defer release()
	if len(spec.Stdin) > 0 {
		c.Stdin = bytes.NewReader(spec.Stdin)
	}
	return c.Run()
}

// minimalArgs is the smallest bubblewrap sandbox that runs argv in ws
// here: every namespace, the system directories (as the plan has them:
// merged-/usr hosts link /bin to usr/bin), /proc, /dev and the workspace.
// It is the floor any bwrap-based sandbox pays per command.
func minimalArgs(ws string, argv ...string) []string {
	args := []string{"--unshare-all", "--die-with-parent"}
	for _, m := range SystemReadSet() {
		if !strings.HasPrefix(m.Dest, "/etc") {
			if m.Kind == MountSymlink {
				args = append(args, "--symlink", m.Src, m.Dest)
			} else {
				args = append(args, "--ro-bind", m.Src, m.Dest)
			}
		}
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--bind", ws, ws, "--chdir", ws, "--")
	return append(args, argv...)
}
