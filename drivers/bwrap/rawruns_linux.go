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

// rawRunsCommand is the mode of the driver binary that runs a command
// through bubblewrap alone, with exactly the namespace and mount flags the
// driver would use for it: the baseline `aleph-sandbox bench` measures the
// pipeline against. The CLI starts it as a process of its own instead of
// linking this package, so the host binary carries none of the driver.
// Never a way to run untrusted code: there is no sandbox-init (no Landlock,
// seccomp or rlimits), no cgroup and no output budget.
const rawRunsCommand = "raw-bwrap-runs"

// rawRunsRequest is the first line rawRunsMain reads: the profile request
// the plan is built from and the command to run (its Profile is ignored:
// the plan is built here, from Request).
type rawRunsRequest struct {
	Request driverapi.ProfileRequest `json:"request"`
	Spec    driverapi.RunSpec        `json:"spec"`
}

// rawRunsReply answers one "run" line: how long the run took, measured
// here around the bwrap process alone (the pipe to the caller is not part
// of it), or why it failed.
type rawRunsReply struct {
	Nanoseconds int64  `json:"ns"`
	Error       string `json:"error,omitempty"`
}

// rawRunsMain is `aleph-driver-bwrap raw-bwrap-runs`: the driver's section
// of the configuration in optionsEnv, as for the plugin; a rawRunsRequest
// as the first line of stdin; then, for every further line, one run and one
// rawRunsReply line on stdout, until stdin ends: "run" runs the command
// with the driver's flags, "minimal" in the smallest bwrap sandbox
// (minimalSandboxArgs). The command's own output is discarded.
func rawRunsMain(args []string, stdin io.Reader, stdout io.Writer) int {
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "usage: "+rawRunsCommand+" (the request on stdin)")
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "%s: %v\n", rawRunsCommand, err)
		return 125
	}
	o, err := parseOptions(os.Getenv(optionsEnv))
	if err != nil {
		return fail(err)
	}
	d, err := newDriver(config{Options: o})
	if err != nil {
		return fail(err)
	}
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 64<<10), 2*driverapi.MaxStdinBytes+(1<<20))
	if !in.Scan() {
		return fail(fmt.Errorf("no request on stdin: %v", in.Err()))
	}
	var req rawRunsRequest
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
	plan, err := decodePlan(prof.Data)
	if err != nil {
		return fail(err)
	}
	for in.Scan() {
		start := time.Now()
		var err error
		if in.Text() == "minimal" {
			err = d.minimalRun(ctx, plan.Workspace, spec)
		} else {
			err = d.rawRun(ctx, spec)
		}
		reply := rawRunsReply{Nanoseconds: time.Since(start).Nanoseconds()}
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
	return runReportingStderr(c, spec.Stdin)
}

// runReportingStderr runs c with stdin and returns its failure with the
// first of what it wrote to stderr (bwrap names what it could not do
// there), for the benchmark's error line.
func runReportingStderr(c *exec.Cmd, stdin []byte) error {
	if len(stdin) > 0 {
		c.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	err := c.Run()
	if err != nil && stderr.Len() > 0 {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 512 {
			msg = msg[:512]
		}
		return fmt.Errorf("%w: %s", err, msg)
	}
	return err
}

// minimalRun runs spec once in the smallest bwrap sandbox.
func (d *Driver) minimalRun(ctx context.Context, ws string, spec driverapi.RunSpec) error {
	args := append(minimalSandboxArgs(ws, spec.Cwd, "--clearenv"), spec.Program)
	c := exec.CommandContext(ctx, d.probe().bwrap, append(args, spec.Args...)...)
	c.Env = launchEnv()
	return runReportingStderr(c, spec.Stdin)
}

// minimalSandboxArgs is the smallest bubblewrap sandbox that runs a program
// here (the argv up to and including "--"; the program follows): every
// namespace, the system directories of the read set (as the plan has
// them: merged-/usr hosts link /bin to usr/bin), /proc, /dev and the
// workspace ws, in cwd. It is the floor any bwrap-based sandbox pays per
// command, the "raw minimal bwrap" of the benchmarks. extra goes before the
// mounts.
func minimalSandboxArgs(ws, cwd string, extra ...string) []string {
	args := append([]string{"--unshare-all", "--die-with-parent"}, extra...)
	for _, m := range systemReadSet() {
		if !strings.HasPrefix(m.Dest, "/etc") {
			if m.Kind == mountSymlink {
				args = append(args, "--symlink", m.Src, m.Dest)
			} else {
				args = append(args, "--ro-bind", m.Src, m.Dest)
			}
		}
	}
	return append(args, "--proc", "/proc", "--dev", "/dev", "--bind", ws, ws, "--chdir", cwd, "--")
}
