//go:build linux

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// overlayTrialTarget is where the layered-session trial's lower directory
// is bound in its sandbox (under the trial's own /tmp), and the overlay
// mounted over it, as a session's workspace is.
const overlayTrialTarget = "/tmp/aleph-overlay-trial"

// probeSessionOverlay decides whether an unprivileged driver's session
// supervisor can mount a layered session's overlay (the session sandboxes
// already passed probeSessionUser): a trial sandbox built as a layered
// session's is (sessionUserFlags and CAP_DAC_OVERRIDE, the lower bound
// read-only at its target, the layer's directory at layerBindPoint) runs
// the init binary's overlay trial, the supervisor's mountSessionOverlay
// with options, then a write and a removal through the overlay. Without
// it, a kernel that refuses userxattr overlays in a user namespace (before
// 5.11, or an LSM's refusal) failed each layered session's build (closed,
// but untyped) while the capabilities offered layered workspaces. It says
// why not, or "". The throwaway lower, upper and work directories are made
// under parent (the driver's state directory, else the temporary one) and
// removed after. parentFS is parent's file system: the trial says whether
// that one can be an upper (checkUpperFS tries a layer's upper on its own
// file system when it is another).
func probeSessionOverlay(bwrapPath, initBinary, parent string, parentFS fsIdentity, options string, guard pidGuard, procCover []string, cache *probeCache) string {
	id, err := fileIdentity(initBinary)
	if err != nil {
		return "init binary: " + err.Error()
	}
	// The trial's name holds the init binary (its code mounts) and the
	// file system it mounted on, but not the options: a test that breaks
	// them (config.overlayTrialOptions) goes around the cache both ways.
	trial := trialSessionOverlay(guard.mode, id, &parentFS)
	useCache := options == overlayOptionsUserNS
	if useCache && cache.confirmed(trial) {
		cache.used = true
		return ""
	}
	if err := runOverlayTrial(context.Background(), bwrapPath, initBinary, parent, &parentFS, options, guard, procCover); err != nil {
		return "a trial overlay mount in a session sandbox's user namespace failed: " + err.Error()
	}
	if useCache {
		cache.confirm(trial, "")
	}
	return ""
}

// runOverlayTrial makes the trial's directories under parent, runs the
// trial sandbox and checks the write reached the upper directory. With
// wantFS, the directories must be on that file system (the one the trial
// is to speak for): a mount point in between would make it speak for
// another.
func runOverlayTrial(ctx context.Context, bwrapPath, initBinary, parent string, wantFS *fsIdentity, options string, guard pidGuard, procCover []string) (err error) {
	dir, err := os.MkdirTemp(parent, ".overlay-trial-")
	if err != nil {
		return fmt.Errorf("trial directories: %w", err)
	}
	defer func() {
		// overlayfs leaves work/work mode 0000; its owner (this user, the
		// trial namespace's 0) may chmod it, and then remove it.
		_ = os.Chmod(filepath.Join(dir, "layer", "work", "work"), 0o700)
		if rmErr := os.RemoveAll(dir); rmErr != nil && err == nil {
			err = fmt.Errorf("remove the trial directories: %w", rmErr)
		}
	}()
	lower, layer := filepath.Join(dir, "lower"), filepath.Join(dir, "layer")
	for _, p := range []string{lower, layer, filepath.Join(layer, "upper"), filepath.Join(layer, "work")} {
		if err := os.Mkdir(p, 0o700); err != nil {
			return fmt.Errorf("trial directories: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "lower"), []byte("lower\n"), 0o600); err != nil {
		return fmt.Errorf("trial directories: %w", err)
	}
	if wantFS != nil {
		got, err := fsIdentityOf(filepath.Join(layer, "upper"))
		if err != nil {
			return fmt.Errorf("trial directories: %w", err)
		}
		if got != *wantFS {
			return fmt.Errorf("the trial's directories under %s are on another file system than the one to try (a mount point there?)", parent)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	flags := append(sessionUserFlags(), "--cap-add", "CAP_DAC_OVERRIDE")
	binds := []string{"--ro-bind", initBinary, initBinary, "--ro-bind", lower, overlayTrialTarget, "--bind", layer, layerBindPoint}
	prog := []string{initBinary, sandboxinit.SessionUserTrialCommand, sandboxinit.SessionOverlayTrialArg,
		overlayTrialTarget, layerBindPoint, layerBindPoint + "/upper", layerBindPoint + "/work", options}
	if err := trialSandboxRun(ctx, bwrapPath, guard, procCover, flags, binds, prog...); err != nil {
		return err
	}
	// The write went to the upper directory: the overlay was mounted, not
	// a write to something else that happened to be writable.
	if _, err := os.Lstat(filepath.Join(layer, "upper", "written")); err != nil {
		return errors.New("the write through the overlay is not in its upper directory")
	}
	return nil
}
