//go:build linux

package sandboxinit

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// preforkNproc (a helper mode) starts a waiting child for the spec in
// args, as a prepared sandbox's supervisor does, with this process's hard
// RLIMIT_NPROC at args' limit (lowered to it; -1: as it is, or 1<<22 when
// unlimited), hands it the command with the RLIMIT_NPROC the supervisor
// computes for spec.RlimitNproc (0: the hard limit) and exits with the
// child's status. The child's output is this process's.
func preforkNproc(args []string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "prefork-nproc:", err)
		return 126
	}
	spec, argv, err := ParseInitArgs(args)
	if err != nil {
		return fail(err)
	}
	runtime.LockOSThread()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
		return fail(err)
	}
	if lim.Max == unix.RLIM_INFINITY {
		lim.Max = 1 << 22
	}
	lim.Cur = min(lim.Cur, lim.Max)
	if err := syscall.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
		return fail(err)
	}
	if spec.RlimitNproc == 0 {
		spec.RlimitNproc = lim.Max
	}
	pre, err := startPreforked(&spec)
	if err != nil {
		return fail(err)
	}
	if !pre.ready() {
		pre.abandon()
		return fail(fmt.Errorf("the waiting child is not ready"))
	}
	nproc, err := nprocFor(spec.RlimitNproc)
	if err != nil {
		pre.abandon()
		return fail(err)
	}
	env := []string{helperEnv + "=1", "GORACE=atexit_sleep_ms=0"}
	if err := pre.start(argv[0], argv, env, "/", nproc); err != nil {
		pre.abandon()
		return fail(err)
	}
	var ws unix.WaitStatus
	for {
		if _, err := unix.Wait4(pre.pid, &ws, 0, nil); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if ws.Signaled() {
		return fail(fmt.Errorf("the child: %v", ws.Signal()))
	}
	return ws.ExitStatus()
}

// TestPreforkedNprocWithinHardLimit: the waiting child holds no
// capability, so it cannot raise a hard limit; RLIMIT_NPROC for the
// command (the limit plus the supervisor's own tasks) is set as every other
// limit is, at most the hard limit the supervisor has, as the plain
// sandbox-init sets it. A limit above the hard one ran nothing (the
// child's setrlimit failed); the command now runs at the hard limit. The
// control: a limit below it is applied as asked, plus the supervisor's
// tasks.
func TestPreforkedNprocWithinHardLimit(t *testing.T) {
	requireSeccomp(t)
	if !rawForkWorks() {
		t.Skip("no raw fork on this architecture or kernel (close_range)")
	}
	exe := testExe(t)
	nproc := func(limit uint64) (string, probeRun) {
		spec := baseSpec(t, SocketUnixOnly)
		spec.RlimitNproc = limit
		args, err := InitArgs(spec, exe, "probe", "rlimits")
		if err != nil {
			t.Fatal(err)
		}
		r := run(t, append([]string{exe, "prefork-nproc"}, args...))
		if r.result(t) != "ok" {
			t.Fatalf("rlimits probe: %+v", r)
		}
		for _, l := range strings.Split(r.stdout, "\n") {
			if v, ok := strings.CutPrefix(l, "NPROC "); ok {
				return v, r
			}
		}
		t.Fatalf("no NPROC line: %+v", r)
		return "", r
	}
	// At the hard limit: limit plus tasks is above it.
	got, r := nproc(0)
	f := strings.Fields(got)
	if len(f) != 2 || f[0] != f[1] {
		t.Fatalf("NPROC %q: %+v", got, r)
	}
	hard, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil || hard < 1000 {
		t.Fatalf("NPROC %q: %v", got, err)
	}
	// The control, below it: applied, with the supervisor's tasks on top.
	got, r = nproc(hard / 2)
	f = strings.Fields(got)
	v, err := strconv.ParseUint(f[0], 10, 64)
	if len(f) != 2 || f[0] != f[1] || err != nil || v <= hard/2 || v >= hard {
		t.Fatalf("control: NPROC %q for a limit of %d under a hard limit of %d: %+v", got, hard/2, hard, r)
	}
}
