//go:build linux

package bwrap

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// pidGuard says how bwrap is started so that nothing of a sandbox can
// outlive it, whenever it dies.
//
// Why: bwrap clones the sandbox's first process, arms its own parent-death
// signal (--die-with-parent), and only then writes the go-ahead that the
// new process waits for on an eventfd. A driver killed in between takes
// bwrap with it and leaves that process blocked forever: nothing runs in
// it, but it is a process, a set of namespaces and (in a v1 hierarchy) a
// cgroup member that nobody will ever reap. bwrap offers no hook in that
// window, and an eventfd does not report its writer's death.
//
// The guard starts bwrap as PID 1 of a PID namespace of its own. When the
// init of a PID namespace dies, the kernel SIGKILLs every process in it
// (and in the namespaces nested in it), so bwrap's death, however early,
// ends everything it cloned. It costs one namespace per command (tens of
// microseconds).
type pidGuard struct {
	mode string // guardPID, guardUserPID or guardNone
	why  string // for guardNone: why the guard is off
}

const (
	// guardPID: a new PID namespace (the driver has CAP_SYS_ADMIN).
	guardPID = "pid-namespace"
	// guardUserPID: a user namespace mapping only the driver's own uid and
	// gid, owning the new PID namespace. bwrap sees the same ids and the
	// same lack of privilege as without it, and unshares its own user
	// namespace inside as before.
	guardUserPID = "user+pid-namespace"
	// guardNone: bwrap is started directly; the window above stays open.
	guardNone = "none"
)

// choosePIDGuard picks the guard for bwrap at path, before the trial
// sandbox confirms (or refutes) that it works here.
func choosePIDGuard(path string) pidGuard {
	if os.Geteuid() == 0 {
		return pidGuard{mode: guardPID}
	}
	// A setuid bwrap owned by an id the user namespace does not map would
	// lose its setuid there (the kernel ignores it), and with it the
	// namespaces it creates: run such a bwrap unguarded.
	if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSetuid != 0 {
		return pidGuard{mode: guardNone, why: path + " is setuid"}
	}
	return pidGuard{mode: guardUserPID}
}

// apply sets the namespaces of the guard on a process about to start.
// It must not be combined with Pdeathsig: Go's check that the parent is
// still alive (getppid) sees 0 in a new PID namespace and would kill the
// child at once.
func (g pidGuard) apply(a *syscall.SysProcAttr) {
	switch g.mode {
	case guardPID:
		a.Cloneflags |= syscall.CLONE_NEWPID
	case guardUserPID:
		a.Cloneflags |= syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID
		uid, gid := os.Getuid(), os.Getgid()
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		// An unprivileged process may map its gid only with setgroups
		// denied; bwrap denies it in its own user namespace anyway.
		a.GidMappingsEnableSetgroups = false
	}
}

// childHostPID returns the pid, as the driver sees it, of the child of
// process parent that parent knows as nsPID (parent may be PID 1 of the
// guard's namespace, and then reports its children in that namespace).
func childHostPID(parent, nsPID int) (int, error) {
	level := len(nsPIDs(parent)) - 1 // parent's namespace, counted from ours
	if level < 0 {
		return 0, fmt.Errorf("bwrap (pid %d) is gone", parent)
	}
	base := "/proc/" + strconv.Itoa(parent) + "/task/"
	tasks, err := os.ReadDir(base)
	if err != nil {
		return 0, fmt.Errorf("children of bwrap (pid %d): %w", parent, err)
	}
	for _, t := range tasks {
		b, _ := os.ReadFile(base + t.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			c, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if ids := nsPIDs(c); len(ids) > level && ids[level] == nsPID {
				return c, nil
			}
		}
	}
	return 0, fmt.Errorf("bwrap (pid %d) has no child it knows as pid %d", parent, nsPID)
}

// nsPIDs is the NSpid line of /proc/PID/status: the process's pid in each
// PID namespace from ours inwards (nil if it is gone).
func nsPIDs(pid int) []int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "NSpid:")
		if !ok {
			continue
		}
		var ids []int
		for _, f := range strings.Fields(rest) {
			n, err := strconv.Atoi(f)
			if err != nil {
				return nil
			}
			ids = append(ids, n)
		}
		return ids
	}
	return nil
}
