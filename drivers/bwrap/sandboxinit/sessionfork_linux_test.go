//go:build linux

package sandboxinit

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sessionForkHelper (a helper mode) runs the command of args (a spec and
// argv) the way a session supervisor would without a sandbox-init of its
// own (sessionForker), with stdin a pipe it holds and stdout a pipe it
// reads. Every line of the command's output is printed as `OUT line`. At
// the command's line "ready" it acts as the scenario (argv[1] of this
// mode) says:
//
//	caps:    prints `REAPER CapEff CapPrm NoNewPrivs` of the reaper;
//	sleeper: prints `SLEEPERS n` (processes with the marker argument);
//	term:    sends SIGTERM to the reaper;
//	kill:    sends SIGKILL to the reaper;
//
// then closes the command's stdin. At the end: `STATUS exit sig reported
// notrun errno` and `SLEEPERS-AFTER n`.
func sessionForkHelper(args []string) int {
	fail := func(err error) int {
		fmt.Println("ERROR", err)
		return 126
	}
	if len(args) < 1 {
		return fail(fmt.Errorf("no scenario"))
	}
	scenario := args[0]
	spec, argv, err := ParseInitArgs(args[1:])
	if err != nil {
		return fail(err)
	}
	runtime.LockOSThread()
	f, err := newSessionForker(&spec)
	if err != nil {
		return fail(err)
	}
	defer f.close()
	inR, inW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	path := argv[0]
	c, err := f.start(path, argv, []string{"PATH=/usr/bin:/bin"}, "/", [3]int{int(inR.Fd()), int(outW.Fd()), int(outW.Fd())})
	inR.Close()
	outW.Close()
	if err != nil {
		return fail(err)
	}
	if err := c.goAhead(); err != nil {
		return fail(err)
	}
	sc := bufio.NewScanner(outR)
	for sc.Scan() {
		line := sc.Text()
		fmt.Println("OUT", line)
		if line != "ready" {
			continue
		}
		switch scenario {
		case "caps":
			fmt.Println("REAPER", procStatus(c.pid, "CapEff"), procStatus(c.pid, "CapPrm"), procStatus(c.pid, "NoNewPrivs"))
		case "sleeper":
			fmt.Println("SLEEPERS", sleepers())
		case "term":
			_ = c.signal(unix.SIGTERM)
		case "kill":
			_ = c.signal(unix.SIGKILL)
		}
		inW.Close()
	}
	inW.Close()
	r, err := c.wait()
	if err != nil {
		return fail(err)
	}
	sig := 0
	if r.status.Signaled() {
		sig = int(r.status.Signal())
	}
	fmt.Println("STATUS", r.status.ExitStatus(), sig, r.reported, int(r.notRun), int(r.errno))
	fmt.Println("SLEEPERS-AFTER", sleepers())
	return 0
}

// sleeperMarker is the argument of the sleep a command leaves behind.
const sleeperMarker = "9876543"

// sleepers counts the processes running `sleep sleeperMarker`.
func sleepers() int {
	n := 0
	ms, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err == nil && strings.Contains(string(b), "sleep\x00"+sleeperMarker) {
			n++
		}
	}
	return n
}

func procStatus(pid int, field string) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

type sessionForkRun struct {
	out                  []string
	lines                map[string]string
	exit, sig            int
	reported             bool
	notRun, errno        int
	sleepers, sleepAfter int
}

// runSessionFork runs the helper for scenario with spec and the shell
// script, and parses what it printed.
func runSessionFork(t *testing.T, scenario string, spec InitSpec, argv ...string) sessionForkRun {
	t.Helper()
	exe := testExe(t)
	args, err := InitArgs(spec, argv[0], argv[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, append([]string{exe, "session-fork", scenario}, args...))
	got := sessionForkRun{lines: map[string]string{}, sleepers: -1}
	for _, l := range strings.Split(r.stdout, "\n") {
		k, v, _ := strings.Cut(l, " ")
		switch k {
		case "OUT":
			got.out = append(got.out, v)
		case "ERROR":
			t.Fatalf("helper: %s\n%+v", v, r)
		case "STATUS":
			var rep string
			if _, err := fmt.Sscan(v, &got.exit, &got.sig, &rep, &got.notRun, &got.errno); err != nil {
				t.Fatalf("STATUS %q: %v", v, err)
			}
			got.reported = rep == "true"
		case "SLEEPERS":
			got.sleepers, _ = strconv.Atoi(v)
		case "SLEEPERS-AFTER":
			got.sleepAfter, _ = strconv.Atoi(v)
		default:
			got.lines[k] = v
		}
	}
	if !strings.Contains("\n"+r.stdout, "\nSTATUS ") {
		t.Fatalf("no status: %+v", r)
	}
	return got
}

func requireSessionFork(t *testing.T) {
	t.Helper()
	requireSeccomp(t)
	if !rawForkWorks() {
		t.Skip("no raw fork on this architecture or kernel (close_range)")
	}
	// The control for the skip: a PID and mount namespace can be made
	// here (the reaper needs both).
	if err := unix.Unshare(0); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		t.Skip("new PID and mount namespaces need root here (the session supervisor holds CAP_SYS_ADMIN in its sandbox)")
	}
}

// TestSessionForkRunsCommand: the command runs (its output, its exit
// status exact), in a PID namespace of its own whose PID 1 is the reaper
// (the shell is PID 2 there), and its reaper reports.
func TestSessionForkRunsCommand(t *testing.T) {
	requireSessionFork(t)
	got := runSessionFork(t, "", baseSpec(t, SocketUnixOnly), "/bin/sh", "-c", `echo "ran $$ $PPID"; exit 7`)
	if len(got.out) != 1 || got.out[0] != "ran 2 1" {
		t.Fatalf("output %q: want the command as PID 2 under the reaper", got.out)
	}
	if !got.reported || got.exit != 7 || got.sig != 0 || got.notRun != 0 {
		t.Fatalf("status %+v: want exit 7, reported", got)
	}
	// A death by signal is told from an exit status (the raw status).
	got = runSessionFork(t, "", baseSpec(t, SocketUnixOnly), "/bin/sh", "-c", `echo ran; kill -9 $$`)
	if len(got.out) != 1 || !got.reported || got.sig != int(unix.SIGKILL) {
		t.Fatalf("killed by SIGKILL: %+v", got)
	}
}

// TestSessionForkTreeDiesWithCommand: what the command leaves running is
// killed when the command ends (the reaper kills its namespace before it
// reports). The control: the sleeper runs while the command does.
func TestSessionForkTreeDiesWithCommand(t *testing.T) {
	requireSessionFork(t)
	got := runSessionFork(t, "sleeper", baseSpec(t, SocketUnixOnly), "/bin/sh", "-c",
		"sleep "+sleeperMarker+" & echo ready; read x; echo done")
	if got.sleepers != 1 {
		t.Fatalf("control: %d sleepers while the command ran (want 1): %+v", got.sleepers, got)
	}
	if !got.reported || got.exit != 0 || got.sleepAfter != 0 {
		t.Fatalf("after the command: %+v (want no sleeper, status reported)", got)
	}
	if len(got.out) != 2 || got.out[1] != "done" {
		t.Fatalf("output %q", got.out)
	}
}

// TestSessionForkSignals: a signal sent to the reaper reaches the command
// (its trap runs, its exit status is the trap's); SIGKILL to the reaper
// ends the namespace whole, without a status (the supervisor reports the
// command lost), the sleeper included.
func TestSessionForkSignals(t *testing.T) {
	requireSessionFork(t)
	script := "sleep " + sleeperMarker + " & trap 'echo term; exit 3' TERM; echo ready; read x; while :; do :; done"
	got := runSessionFork(t, "term", baseSpec(t, SocketUnixOnly), "/bin/sh", "-c", script)
	if !got.reported || got.exit != 3 || len(got.out) != 2 || got.out[1] != "term" || got.sleepAfter != 0 {
		t.Fatalf("SIGTERM: %+v (want the trap's exit 3, its output, no sleeper)", got)
	}
	got = runSessionFork(t, "kill", baseSpec(t, SocketUnixOnly), "/bin/sh", "-c", script)
	if got.reported || len(got.out) != 1 || got.sleepAfter != 0 {
		t.Fatalf("SIGKILL: %+v (want no status, no sleeper)", got)
	}
}

// TestSessionForkNoSpawn: a command whose profile may not spawn cannot,
// though its reaper could: its program is applied after the clone. The
// command really ran (its output after the refused spawn); the control:
// the same script with spawn allowed spawns. (The fork is refused: the
// shell says it cannot fork and ends.)
func TestSessionForkNoSpawn(t *testing.T) {
	requireSessionFork(t)
	script := `echo ran; /bin/true && echo spawned`
	spec := baseSpec(t, SocketUnixOnly)
	got := runSessionFork(t, "", spec, "/bin/sh", "-c", script)
	if strings.Join(got.out, ",") != "ran,spawned" || got.exit != 0 {
		t.Fatalf("control, spawn allowed: %q, exit %d", got.out, got.exit)
	}
	spec.AllowSpawn = false
	got = runSessionFork(t, "", spec, "/bin/sh", "-c", script)
	joined := strings.Join(got.out, ",")
	if strings.Contains(joined, "spawned") || len(got.out) < 1 || got.out[0] != "ran" || got.exit == 0 {
		t.Fatalf("no-spawn: %q, exit %d (want ran, not spawned, a failure)", got.out, got.exit)
	}
}

// TestSessionForkReaperHoldsNothing: while the command runs, its reaper
// holds no capability and has no_new_privs. The control: the helper that
// cloned it (root) holds capabilities.
func TestSessionForkReaperHoldsNothing(t *testing.T) {
	requireSessionFork(t)
	if own := procStatus(os.Getpid(), "CapEff"); strings.Trim(own, "0") == "" {
		t.Fatalf("control: this process holds no capability (CapEff %s)", own)
	}
	got := runSessionFork(t, "caps", baseSpec(t, SocketUnixOnly), "/bin/sh", "-c", "echo ready; read x; exit 0")
	f := strings.Fields(got.lines["REAPER"])
	if len(f) != 3 || strings.Trim(f[0], "0") != "" || strings.Trim(f[1], "0") != "" || f[2] != "1" {
		t.Fatalf("reaper: CapEff, CapPrm, NoNewPrivs = %q", got.lines["REAPER"])
	}
	if !got.reported || got.exit != 0 {
		t.Fatalf("status: %+v", got)
	}
}

// TestSessionForkExecFails: a program that cannot be executed is reported
// as not run, with its errno, on the command's report socket; the
// control is every test above, whose program ran.
func TestSessionForkExecFails(t *testing.T) {
	requireSessionFork(t)
	got := runSessionFork(t, "", baseSpec(t, SocketUnixOnly), "/nonexistent/program")
	if got.notRun != int(NotRunExec) || got.errno != int(syscall.ENOENT) || !got.reported || got.exit != SandboxInitExitCode {
		t.Fatalf("%+v: want not run at exec, ENOENT", got)
	}
}

// BenchmarkSessionFork: CPU per command of the session fork (a reaper and
// the command, no Go start) against a fresh sandbox-init in a new PID and
// mount namespace running the same command under the same spec (its Go
// start and confinement: what a session supervisor pays per command
// today, less the hand-over and the prepared mode's extra steps), side by
// side, alternating, in one run. /bin/true, no spawn. Reported: CPU per
// command of each (every process, reaped children's rusage) and the ratio.
func BenchmarkSessionFork(b *testing.B) {
	if !SeccompAvailable() || !rawForkWorks() || os.Geteuid() != 0 {
		b.Skip("needs seccomp, a raw fork and root")
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	spec := InitSpec{ReadOnly: []string{"/usr", "/bin", "/lib", "/lib64", "/etc", filepath.Dir(exe)},
		ReadWrite: []string{"/dev"}, SocketMode: SocketUnixOnly}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f, err := newSessionForker(&spec)
	if err != nil {
		b.Fatal(err)
	}
	defer f.close()
	args, err := InitArgs(spec, "/bin/true")
	if err != nil {
		b.Fatal(err)
	}
	argv := append([]string{exe, SandboxInitCommand}, args...)
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer devnull.Close()
	null := int(devnull.Fd())
	cpu := func() time.Duration {
		var ru unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var rawCPU, initCPU time.Duration
	n := 0
	for b.Loop() {
		t := cpu()
		c, err := f.start("/bin/true", []string{"true"}, nil, "/", [3]int{null, null, null})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.goAhead(); err != nil {
			b.Fatal(err)
		}
		r, err := c.wait()
		if err != nil || !r.reported || r.status.ExitStatus() != 0 {
			b.Fatalf("session fork: %+v %v", r, err)
		}
		rawCPU += cpu() - t
		t = cpu()
		pid, err := syscall.ForkExec(exe, argv, &syscall.ProcAttr{
			Env:   []string{helperEnv + "=1"},
			Files: []uintptr{uintptr(null), uintptr(null), uintptr(null)},
			Sys:   &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS, Setsid: true},
		})
		if err != nil {
			b.Fatal(err)
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil || ws.ExitStatus() != 0 {
			b.Fatalf("sandbox-init: %v %v", ws, err)
		}
		initCPU += cpu() - t
		n++
	}
	b.ReportMetric(float64(rawCPU.Microseconds())/float64(n)/1000, "fork_cpu_ms/cmd")
	b.ReportMetric(float64(initCPU.Microseconds())/float64(n)/1000, "init_cpu_ms/cmd")
	b.ReportMetric(float64(rawCPU)/float64(initCPU), "fork_x_init")
}
