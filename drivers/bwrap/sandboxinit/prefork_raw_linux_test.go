//go:build linux && (amd64 || arm64)

package sandboxinit

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// afterForkCalls compiles this package (with -race when race) and
// disassembles the functions matched by pattern: for each, the targets of
// its calls as their relocations name them ("" for an indirect call).
func afterForkCalls(t *testing.T, race bool, pattern string) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			t.Skip("no go tool to compile and disassemble the package with")
		}
	}
	archive := filepath.Join(t.TempDir(), "sandboxinit.a")
	args := []string{"build", "-o", archive}
	if race {
		args = append(args, "-race")
	}
	build := exec.Command(goBin, append(args, ".")...)
	if race {
		build.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	if out, err := build.CombinedOutput(); err != nil {
		if race && (strings.Contains(string(out), "requires cgo") || strings.Contains(string(out), "C compiler")) {
			t.Skipf("no -race build here (it needs cgo and a C compiler): %s", out)
		}
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(goBin, "tool", "objdump", "-s", `sandboxinit\.(`+pattern+`)$`, archive).CombinedOutput()
	if err != nil {
		t.Fatalf("objdump: %v\n%s", err, out)
	}
	calls := map[string][]string{}
	fn := ""
	text := regexp.MustCompile(`^TEXT \S*sandboxinit\.(\w+)\(SB\)`)
	call := regexp.MustCompile(`\s(CALL|BL)\s`)
	target := regexp.MustCompile(`R_CALL\w*:(\S+)`)
	for _, l := range strings.Split(string(out), "\n") {
		if m := text.FindStringSubmatch(l); m != nil {
			fn = m[1]
			calls[fn] = []string{}
			continue
		}
		if fn != "" && call.MatchString(l) {
			c := ""
			if m := target.FindStringSubmatch(l); m != nil {
				c = m[1]
			}
			calls[fn] = append(calls[fn], c)
		}
	}
	return calls
}

// TestForkWaitingCallsNothingSplittable: after the fork, the waiting
// child (and forkCommand's, and a session fork's reaper, served or not, and command) is one thread with a copy of the supervisor's
// memory; a call into the runtime that may grow the stack (a bounds-check
// panic, an allocation, a write barrier, the race detector's or checkptr's
// hooks) throws or deadlocks there. forkWaiting and forkSession may call
// only the fork hooks, the nosplit system-call wrappers and their own
// nosplit helpers, and those helpers call nothing but the wrappers;
// morestack only from their own prologue (before the fork). The control: a function of
// the same file's plan, which allocates, is reported.
func TestForkWaitingCallsNothingSplittable(t *testing.T) {
	allowed := map[string]bool{
		"syscall.runtime_BeforeFork":       true,
		"syscall.runtime_AfterFork":        true,
		"syscall.runtime_AfterForkInChild": true,
		"syscall.RawSyscall":               true,
		"syscall.RawSyscall6":              true,
	}
	own := regexp.MustCompile(`sandboxinit\.(runWaitChild|runReaper|serveReaperGo|reaperFail|waitFail|childAppend)$`)
	for _, race := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "race"}[race], func(t *testing.T) {
			checkAfterFork(t, afterForkCalls(t, race, "forkWaiting|forkSession|runWaitChild|runReaper|serveReaperGo|reaperFail|waitFail|childAppend|newWaitPlan"), allowed, own)
		})
	}
}

// checkAfterFork fails t for every call of forkWaiting and its helpers
// outside allowed and own (own: the helpers themselves).
func checkAfterFork(t *testing.T, calls map[string][]string, allowed map[string]bool, own *regexp.Regexp) {
	for _, fn := range []string{"forkWaiting", "forkSession", "runWaitChild", "runReaper", "serveReaperGo", "reaperFail", "waitFail", "newWaitPlan"} {
		if _, ok := calls[fn]; !ok {
			t.Fatalf("%s not found in the compiled package: %v", fn, calls)
		}
	}
	for fn, targets := range calls {
		if fn == "newWaitPlan" {
			continue
		}
		prologue := 0
		for _, c := range targets {
			switch {
			case allowed[c] || own.MatchString(c):
			case (fn == "forkWaiting" || fn == "forkSession") && strings.HasPrefix(c, "runtime.morestack") && prologue == 0:
				prologue++
			default:
				t.Errorf("%s calls %q (\"\": an indirect call)", fn, c)
			}
		}
	}
	// The control: the check sees what an allocating function calls.
	bad := 0
	for _, c := range calls["newWaitPlan"] {
		if !allowed[c] && !own.MatchString(c) {
			bad++
		}
	}
	if bad == 0 {
		t.Errorf("newWaitPlan: no call outside the allowed set seen: %v", calls["newWaitPlan"])
	}
}
