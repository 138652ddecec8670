//go:build linux

package bwrap

import (
	"context"
	"os"
	"strconv"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// Session sandboxes of an unprivileged driver: bwrap's flags, and the trial
// that decides whether they are used. The design and its security are
// written where they are enforced, in sandboxinit/sessionuser_linux.go.

// sessionUserFlags are the flags an unprivileged driver's session
// sandbox gets in place of --disable-userns: bwrap's user namespace
// explicitly (--unshare-all only tries it), the sandbox as its uid and gid
// 0, so that bwrap makes no second, nested namespace and the supervisor
// keeps its capabilities over the mount namespace, and CAP_SETFCAP beside
// the hand-over's two, which the supervisor needs to map that uid 0 into
// each command's user namespace.
func sessionUserFlags() []string {
	return []string{
		"--unshare-user", "--uid", "0", "--gid", "0",
		"--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP", "--cap-add", "CAP_SETFCAP",
	}
}

// probeSessionUser decides whether an unprivileged driver's session
// sandboxes can give each command a user namespace of its own: a trial
// sandbox with sessionUserFlags() runs the init binary's
// SessionUserTrialCommand, which starts a child the way a session
// supervisor starts a command's sandbox-init and has it mount in its own
// mount namespace. bwrap refusing the flags, or the kernel or a security
// module refusing the nested namespace or the mount (some LSM profiles
// take capabilities from bwrap's children), leaves every command with a
// sandbox of its own, as before.
func probeSessionUser(bwrapPath, initBinary string, guard pidGuard, procCover []string, cache *probeCache, seccomp, oneCommand bool) (bool, string) {
	if os.Geteuid() == 0 {
		return false, "root: the session sandbox's own user namespace holds its mounts"
	}
	if !seccomp {
		// Without --disable-userns (sessionUserFlags), the commands' seccomp
		// filter is what keeps them from making user namespaces of their own.
		return false, "seccomp filters cannot be installed here, and a session sandbox goes without bwrap's --disable-userns"
	}
	if oneCommand {
		// Its host asks for no session sandbox (the one-shot CLI), and
		// the trial would be on its path where the probe cache is off.
		return false, "this driver process runs one command (session_sandbox = \"always\" tries it all the same)"
	}
	if fi, err := os.Stat(bwrapPath); err == nil && fi.Mode()&os.ModeSetuid != 0 {
		return false, bwrapPath + " is setuid"
	}
	id, err := fileIdentity(initBinary)
	if err != nil {
		return false, "init binary: " + err.Error()
	}
	trial := trialSessionUser(guard.mode, id)
	if cache.confirmed(trial) {
		cache.used = true
		return true, ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prog := []string{initBinary, sandboxinit.SessionUserTrialCommand, strconv.Itoa(os.Getuid()), strconv.Itoa(os.Getgid())}
	if err := trialSandboxRun(ctx, bwrapPath, guard, procCover, sessionUserFlags(), []string{"--ro-bind", initBinary, initBinary}, prog...); err != nil {
		return false, "a command's user namespace in a trial session sandbox failed: " + err.Error()
	}
	cache.confirm(trial, "")
	return true, ""
}
