package bwrap

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// threadFill starts threads until the pids limit (or RLIMIT_NPROC) refuses
// one, reports how many it got, holds them, then ends as argv[1] says:
// "exit" with status 7 while every thread still runs, or "hang" until the
// run's timeout.
const threadFill = `import os, sys, threading, time
ev = threading.Event()
n = 0
try:
    while n < 100000:
        threading.Thread(target=ev.wait, daemon=True).start()
        n += 1
except RuntimeError:
    pass
print("threads", n, flush=True)
time.sleep(0.3)
if sys.argv[1] == "hang":
    time.sleep(60)
os._exit(7)
`

// TestSupervisorOutlivesPidExhaustion: a command that uses up its pids
// budget with threads (a no-spawn command may start threads) leaves its
// supervisor, which shares the budget, able to reap it and report: the
// command's own exit status arrives, or the timeout does, and no Go
// runtime failure of the supervisor's appears. The control is the count:
// the command really started threads up to the limit.
func TestSupervisorOutlivesPidExhaustion(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed: it starts the threads")
	}
	pids := uint64(64)
	d := testDriver(t, options{MaxPids: &pids})
	ws := newWorkspace(t)
	for _, c := range []struct {
		name  string
		spawn bool
		end   string
	}{
		{"no-spawn exits", false, "exit"},
		{"spawn exits", true, "exit"},
		{"no-spawn times out", false, "hang"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i := 0; i < 3; i++ {
				prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{
					Capabilities: driverapi.Capabilities{SpawnSubprocess: c.spawn}, Workspace: ws, Cwd: ws})
				if err != nil {
					t.Fatal(err)
				}
				var out, errb strings.Builder
				timeout := 20 * time.Second
				if c.end == "hang" {
					timeout = 2 * time.Second
				}
				exit, err := d.Run(context.Background(), driverapi.RunSpec{
					Program: "/usr/bin/python3", Args: []string{"-c", threadFill, c.end}, Cwd: ws, Profile: prof,
					Env:     []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "HOME", Value: ws}},
					Timeout: timeout, MaxOutputBytes: 1 << 20, CommandID: t.Name(),
				}, driverapi.Streams{Stdout: &out, Stderr: &errb})
				if err != nil {
					t.Fatalf("run %d: %v", i, err)
				}
				n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(out.String(), "threads ")))
				// Without a pids cgroup (unprivileged) RLIMIT_NPROC counts
				// in the sandbox's user namespace and allows the
				// supervisor's own threads and a headroom on top
				// (sandboxinit.nprocFor): a few more than pids.
				if n < int(pids)/2 || uint64(n) >= pids+32 {
					t.Fatalf("run %d: the command started %q threads, want up to the limit of %d (stderr %.300q)", i, out.String(), pids, errb.String())
				}
				if strings.Contains(errb.String(), "runtime:") || strings.Contains(errb.String(), "goroutine ") {
					t.Fatalf("run %d: the supervisor failed: %.600s", i, errb.String())
				}
				switch {
				case c.end == "exit" && (exit.ExitCode != 7 || exit.TimedOut):
					t.Fatalf("run %d: exit %+v, want the command's status 7 (stderr %.300q)", i, exit, errb.String())
				case c.end == "hang" && !exit.TimedOut:
					t.Fatalf("run %d: exit %+v, want the timeout (stderr %.300q)", i, exit, errb.String())
				}
			}
		})
	}
}
