package bwrap

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// targetFacts runs programs that read their own process state through d
// with caps (one command each, none spawns) and returns what must not
// depend on how the command was started: signal mask and dispositions,
// capabilities, no_new_privs, credentials, limits, process group and
// session, parent, environment, directory and descriptors. prepared is
// the runs' Details["prepared"].
func targetFacts(t *testing.T, d *Driver, ws string, caps driverapi.Capabilities) (facts map[string]string, prepared string) {
	t.Helper()
	facts = map[string]string{}
	run := func(program string, args ...string) string {
		t.Helper()
		r := drvRun(t, context.Background(), d, ws, caps, nil, program, args...)
		expectOK(t, r)
		if prepared == "" {
			prepared = r.exit.Details["prepared"]
		} else if prepared != r.exit.Details["prepared"] {
			t.Fatalf("%s: prepared %q, the runs before %q", program, r.exit.Details["prepared"], prepared)
		}
		return r.stdout
	}
	for _, l := range strings.Split(run("/bin/cat", "/proc/self/status"), "\n") {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch {
		case strings.HasPrefix(k, "Sig") && k != "SigQ", strings.HasPrefix(k, "Cap"), k == "ShdPnd",
			k == "NoNewPrivs", k == "Seccomp", k == "Uid", k == "Gid", k == "Groups":
			facts[k] = v
		}
	}
	facts["limits"], facts["nproc"] = splitNproc(t, run("/bin/cat", "/proc/self/limits"))
	stat := run("/bin/cat", "/proc/self/stat")
	f := strings.Fields(stat[strings.LastIndex(stat, ")")+1:])
	if len(f) < 5 {
		t.Fatalf("stat %q", stat)
	}
	pid := strings.Fields(stat)[0]
	facts["ppid"], facts["own group"], facts["session"], facts["tty"] = f[1], strconv.FormatBool(f[2] == pid), f[3], f[4]
	facts["environ"] = run("/bin/cat", "/proc/self/environ")
	facts["cwd"] = run("/bin/readlink", "/proc/self/cwd")
	facts["fds"] = run("/bin/ls", "/proc/self/fd") // ls's own directory is 3
	return facts, prepared
}

// splitNproc takes the RLIMIT_NPROC row out of a /proc/self/limits text.
// Without a pids cgroup the supervisor sets that limit to the pids budget
// plus its own thread count (nprocFor), which the Go runtime varies from
// run to run; nprocClose compares the values the row held.
func splitNproc(t *testing.T, limits string) (rest, nproc string) {
	t.Helper()
	var kept []string
	for _, l := range strings.SplitAfter(limits, "\n") {
		if !strings.HasPrefix(l, "Max processes ") {
			kept = append(kept, l)
			continue
		}
		f := strings.Fields(strings.TrimPrefix(l, "Max processes "))
		if len(f) < 2 {
			t.Fatalf("limits row %q", l)
		}
		nproc = f[0] + " " + f[1]
	}
	if nproc == "" {
		t.Fatalf("no RLIMIT_NPROC row in %q", limits)
	}
	return strings.Join(kept, ""), nproc
}

// nprocClose reports whether two RLIMIT_NPROC rows ("soft hard") are the
// same, or both set to soft == hard within the few threads by which two
// supervisors' counts can differ.
func nprocClose(a, b string) bool {
	if a == b {
		return true
	}
	af, bf := strings.Fields(a), strings.Fields(b)
	if len(af) != 2 || len(bf) != 2 || af[0] != af[1] || bf[0] != bf[1] {
		return false
	}
	x, err1 := strconv.Atoi(af[0])
	y, err2 := strconv.Atoi(bf[0])
	return err1 == nil && err2 == nil && x-y <= nprocThreadSlack && y-x <= nprocThreadSlack
}

// nprocThreadSlack bounds how many threads two Go supervisors' counts may
// differ by: the runtime's sysmon, GC workers and spare Ms come and go.
const nprocThreadSlack = 8

// TestRawForkTargetAsForkExec: the target of a no-spawn profile is exec'd
// by a fork of the supervisor that runs system calls only: a prepared
// sandbox's waiting child, or forkCommand in a sandbox built for it. What
// it inherits is what Go's own fork-and-exec gives a command that may
// spawn (the reference: the supervisor forks it straight): the signal mask
// and dispositions (the supervisor catches every signal; the target must
// have none caught, none blocked), the capability sets, no_new_privs, the
// limits (RLIMIT_NOFILE's soft limit as inherited), a process group of its
// own in the supervisor's session, PID 1 as its parent, the environment,
// the directory and descriptors 0-2 only. The control: the no-spawn
// profile's shell runs and cannot fork, the reference's forks.
func TestRawForkTargetAsForkExec(t *testing.T) {
	ws := newWorkspace(t)
	ref, _ := targetFacts(t, testDriver(t, preparedOpts(preparedOff)), ws, driverapi.Capabilities{SpawnSubprocess: true})
	if ref["SigCgt"] != "0000000000000000" || ref["SigBlk"] != "0000000000000000" || ref["own group"] != "true" ||
		ref["ppid"] != "1" || ref["fds"] != "0\n1\n2\n3\n" || ref["cwd"] != ws+"\n" {
		t.Fatalf("the reference itself: %v", ref)
	}
	modes := []preparedMode{preparedOff}
	if os.Geteuid() == 0 { // prepared sandboxes need a root driver (needPreparable)
		modes = append(modes, preparedAlways)
	}
	for _, mode := range modes {
		d := testDriver(t, preparedOpts(mode))
		got, prepared := targetFacts(t, d, ws, driverapi.Capabilities{})
		if (prepared == "1") != (mode == preparedAlways) {
			t.Fatalf("%s: prepared %q", mode, prepared)
		}
		for k, want := range ref {
			if k == "nproc" && nprocClose(got[k], want) {
				continue
			}
			if got[k] != want {
				t.Errorf("%s: %s %q, a command forked straight has %q", mode, k, got[k], want)
			}
		}
		// The control: the same profile's command is the no-spawn one (it
		// runs, and its fork fails), the reference's forks.
		script := "echo ran; /bin/true && echo spawned"
		if r := drvRun(t, context.Background(), d, ws, driverapi.Capabilities{}, nil, "/bin/sh", "-c", script); r.err != nil || r.stdout != "ran\n" {
			t.Errorf("%s: the no-spawn command: %+v", mode, r)
		}
		if r := drvRun(t, context.Background(), d, ws, driverapi.Capabilities{SpawnSubprocess: true}, nil, "/bin/sh", "-c", script); r.stdout != "ran\nspawned\n" {
			t.Errorf("%s: the command that may spawn: %+v", mode, r)
		}
	}
}

func TestNprocClose(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"unlimited unlimited", "unlimited unlimited", true},
		{"211 211", "213 213", true},
		{"211 211", "219 219", true},
		{"211 211", "220 220", false},
		{"211 211", "unlimited unlimited", false},
		{"211 300", "213 300", false},
		{"211 211", "211 212", false},
	} {
		if got := nprocClose(c.a, c.b); got != c.want {
			t.Errorf("nprocClose(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
