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

// preforkTooLarge (a helper mode) starts a waiting child for the spec in
// args, hands it a command whose environment does not fit the shared
// mapping and abandons it, as the supervisor does before it forks a child
// for the command. It prints RESULT ok when the hand-over said the
// command is too large, the child is gone (reaped: no child is left) and
// the mapping is unmapped.
func preforkTooLarge(args []string) int {
	spec, argv, err := ParseInitArgs(args)
	if err != nil {
		return result(err)
	}
	runtime.LockOSThread()
	pre, err := startPreforked(&spec)
	if err != nil {
		return result(err)
	}
	if !pre.ready() {
		pre.abandon()
		return result(errors.New("the waiting child is not ready"))
	}
	big := "X=" + strings.Repeat("x", waitRegionBytes)
	err = pre.start(argv[0], argv, []string{big}, "/", 0)
	if !errors.Is(err, errCommandTooLarge) {
		pre.abandon()
		return result(fmt.Errorf("start: %w", err))
	}
	pre.abandon()
	var ws unix.WaitStatus
	if _, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); !errors.Is(err, unix.ECHILD) {
		return result(fmt.Errorf("a child is left: %v", err))
	}
	if pre.region != nil || pre.sock != -1 {
		return result(errors.New("the mapping or the socket is left"))
	}
	fmt.Println("abandoned", pre.pid)
	return result(nil)
}

// TestPreforkedTooLargeAbandoned: a command that does not fit the shared
// mapping is refused at the hand-over, before the child is woken, and the
// waiting child is killed and reaped, its socket and mapping released:
// the supervisor then forks a child for the command, which gets the
// kernel's E2BIG, as one built for it does. The control: the same helper
// path runs a command that fits (TestPreforkedNprocWithinHardLimit).
func TestPreforkedTooLargeAbandoned(t *testing.T) {
	requireSeccomp(t)
	if !rawForkWorks() {
		t.Skip("no raw fork on this architecture or kernel (close_range)")
	}
	exe := testExe(t)
	args, err := InitArgs(baseSpec(t, SocketUnixOnly), exe, "probe", "rlimits")
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, append([]string{exe, "prefork-too-large"}, args...))
	if got := r.result(t); got != "ok" || !strings.Contains(r.stdout, "abandoned ") {
		t.Fatalf("%s: %+v", got, r)
	}
}
