package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/conformance/internal/probe"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The cases of this file hold every driver to what a hardened driver
// enforces beyond the plain read and write rules: repositories nested in
// the workspace, the whole default protected set, set-id files, the size of
// the private /tmp, and host unix sockets under an allowlist network.

func hardeningCases() []Case {
	prot, wr := driverapi.FeatureProtectedPaths, driverapi.FeatureFSWriteIsolation
	return []Case{
		{ID: "fs/nested-git-readonly", Level: Must, Feature: prot,
			Description: "Every .git below the workspace's top level is protected like the top-level one, since the host's git runs what a repository's config names (core.fsmonitor, hooks) wherever it opens one: in a nested repository sub/.git/config cannot be changed and nothing can be created in sub/.git; a gitfile mod/.git (the \"gitdir: ...\" file of a submodule or worktree) cannot be rewritten; neither can be removed, renamed, replaced by a directory or a symlink, or moved away with the directory holding it. The same command writes sub/file and mod/other (the work trees stay writable) and reads both.",
			run:         caseNestedGit},
		{ID: "fs/protected-default-set", Level: Must, Feature: prot,
			Description: "With ProfileRequest.Protected empty, the driver protects all of driverapi.DefaultProtectedEntries() (" + strings.Join(driverapi.DefaultProtectedEntries(), ", ") + "), not only the original four: each missing entry cannot be created as a directory, a file or a symlink; the existing .claude (a directory) and .envrc (a file) can be read but not changed, removed or renamed; and after the command the host's workspace holds exactly what it held before plus the command's own ok.txt and other/ (no placeholder or mount point left behind).",
			run:         caseProtectedDefaultSet},
		{ID: "fs/no-setid-files", Level: Must, Feature: wr, OS: POSIXOnly, OSReason: "set-user-id and set-group-id bits are POSIX file modes",
			Description: "A command cannot leave a set-user-id or set-group-id file for the host (a setuid copy of a shell is a way up for whoever runs it): modes 4755, 2755 and 6755 given by every route (chmod by path, fchmod on a descriptor, fchmodat, fchmodat2, the mode of openat and creat at creation, an O_TMPFILE file linked in, mknod of a regular file, chown to oneself then chmod; on other POSIX systems chmod, fchmod, open and chown-then-chmod) fail or leave no set-id file in the workspace as the host sees it, while the same routes with mode 0755 work (chmod, fchmod, fchmodat, open, creat and chown-then-chmod must; mknod, O_TMPFILE and fchmodat2 may be refused) and each attempt is shown to have run. Skipped, saying so, where the host's own file system keeps no set-id bits.",
			run:         caseNoSetID},
		{ID: "res/tmpfs-bounded", Level: Must, Feature: driverapi.FeatureMemoryLimit, OS: LinuxOnly, OSReason: "the private /tmp is a memory-backed tmpfs on Linux",
			Description: "Under max_memory_mb=128 the command's /tmp cannot hold 256 MiB (the write fails, ENOSPC, or the command is killed), while 16 MiB written there under the same limit succeed: files in a memory-backed /tmp are memory the limit must cover, whatever enforces it. A sandbox with no writable /tmp at all (the program reports the open refused) has nothing to bound: the case is skipped, saying so.",
			run:         caseTmpfsBounded},
		{ID: "net/allow-hosts-no-unix-sockets", Level: Must, Feature: driverapi.FeatureNetworkViaProxy,
			OS: POSIXOnly, OSReason: "datagram unix sockets are POSIX's",
			Description: "With network allow_hosts a program cannot reach a host unix socket, stream or datagram, in a directory an fs_read grant shows it (a docker- or dbus-style socket is a way around the proxy), while the proxied connection of the same profile works; the same holds under network none (when claimed), and under network all (when claimed) the same probes reach both sockets, showing that they were reachable.",
			run:         caseProxyNoUnixSockets},
	}
}

func caseNestedGit(ctx context.Context, h *H) error {
	const gitfile = "gitdir: ../.git/modules/mod\n"
	cfg := filepath.Join(h.Work, "sub", ".git", "config")
	for p, content := range map[string]string{
		cfg: "[core]\n", filepath.Join(h.Work, "sub", "file"): "old\n",
		filepath.Join(h.Work, ".git", "modules", "mod", "config"): "[core]\n",
		filepath.Join(h.Work, "mod", ".git"):                      gitfile,
	} {
		if err := writeFile(p, content); err != nil {
			return err
		}
	}
	o := h.Probe(ctx, nil, "write", "sub/file", "new\n", sep, "write", "mod/other", "ok\n", sep,
		"read", "sub/.git/config", sep, "read", "mod/.git", sep, "echo", "wrote-worktrees",
		sep, "try", "append", "sub/.git/config", "\tfsmonitor = /bin/evil\n",
		sep, "try", "write", "sub/.git/config", "evil\n",
		sep, "try", "mkdir", "sub/.git/hooks", sep, "try", "write", "sub/.git/hooks/post-checkout", "evil\n",
		sep, "try", "rm", "sub/.git/config", sep, "try", "mv", "sub/.git", "sub/g", sep, "try", "rmall", "sub/.git",
		sep, "try", "mv", "sub", "sub-moved",
		sep, "try", "write", "mod/.git", "gitdir: /tmp/evil\n", sep, "try", "append", "mod/.git", "evil\n",
		sep, "try", "mv", "mod/.git", "mod/gitfile", sep, "try", "rm", "mod/.git", sep, "try", "mkdir", "mod/.git",
		sep, "try", "symlink", h.Out, "mod/.git", sep, "try", "mv", "mod", "mod-moved")
	if err := ran("work tree writes", o, "wrote-worktrees"); err != nil {
		return err
	}
	if !bytes.Contains(o.Stdout, []byte("[core]\n"+gitfile)) {
		return fmt.Errorf("the nested .git/config and the gitfile could not be read (positive control): %s", o)
	}
	if got := readHost(cfg); got != "[core]\n" {
		return fmt.Errorf("the nested repository's sub/.git/config was changed, moved or removed (now %q)", got)
	}
	if st, err := os.Lstat(filepath.Join(h.Work, "mod", ".git")); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("the gitfile mod/.git was removed or replaced (%v)", err)
	}
	if got := readHost(filepath.Join(h.Work, "mod", ".git")); got != gitfile {
		return fmt.Errorf("the gitfile mod/.git was rewritten to %q", got)
	}
	for _, p := range []string{"sub/.git/hooks", "sub/g", "sub-moved", "mod/gitfile", "mod-moved"} {
		if err := mustNotExist(filepath.Join(h.Work, p), "changing a nested .git"); err != nil {
			return err
		}
	}
	if readHost(filepath.Join(h.Work, "sub", "file")) != "new\n" || readHost(filepath.Join(h.Work, "mod", "other")) != "ok\n" {
		return errors.New("the writes in the nested work trees did not reach the host (positive control)")
	}
	return nil
}

// workspaceListing describes every entry under root except the top-level
// names in skip: path, type and mode, size, and the content of small
// files, so that any entry created, removed or changed shows.
func workspaceListing(root string, skip ...string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if top, _, _ := strings.Cut(filepath.ToSlash(rel), "/"); slices.Contains(skip, top) {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		// A directory's size follows its entry count on some file
		// systems (tmpfs): the command's own entries must not count.
		size := fi.Size()
		if fi.IsDir() {
			size = 0
		}
		line := fmt.Sprintf("%s %v %d", filepath.ToSlash(rel), fi.Mode(), size)
		if fi.Mode().IsRegular() && fi.Size() < 1<<16 {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += " " + strconv.Quote(string(b))
		}
		out = append(out, line)
		return nil
	})
	sort.Strings(out)
	return out, err
}

func caseProtectedDefaultSet(ctx context.Context, h *H) error {
	existing := map[string]string{".claude": "dir", ".envrc": "file"}
	entries := driverapi.DefaultProtectedEntries()
	steps := []string{"write", "ok.txt", "ok\n", sep, "mkdir", "other", sep, "echo", "made-other"}
	var missing []string
	for _, e := range entries {
		switch existing[e] {
		case "dir":
			if err := writeFile(filepath.Join(h.Work, e, "settings.json"), "{\"orig\":\""+e+"\"}\n"); err != nil {
				return err
			}
			steps = append(steps, sep, "read", e+"/settings.json",
				sep, "try", "write", e+"/settings.json", "evil\n", sep, "try", "append", e+"/settings.json", "evil\n",
				sep, "try", "write", e+"/new", "evil\n", sep, "try", "mkdir", e+"/commands",
				sep, "try", "rm", e+"/settings.json", sep, "try", "mv", e, e+"-moved", sep, "try", "rmall", e)
		case "file":
			if err := writeFile(filepath.Join(h.Work, e), "orig "+e+"\n"); err != nil {
				return err
			}
			steps = append(steps, sep, "read", e,
				sep, "try", "write", e, "evil\n", sep, "try", "append", e, "evil\n",
				sep, "try", "rm", e, sep, "try", "mv", e, e+"-moved", sep, "try", "mkdir", e)
		default:
			missing = append(missing, e)
			steps = append(steps, sep, "try", "mkdir", e, sep, "try", "write", e+"/f", "x\n", sep, "try", "write", e, "x\n",
				sep, "try", "symlink", h.Out, e)
		}
	}
	if len(missing) == 0 {
		return errors.New("the default protected set has no entry the case leaves missing")
	}
	skip := []string{h.suite.progs.probeName, "ok.txt", "other"}
	before, err := workspaceListing(h.Work, skip...)
	if err != nil {
		return err
	}
	o := h.Probe(ctx, nil, steps...)
	if err := ran("workspace writes", o, "made-other"); err != nil {
		return err
	}
	for e, kind := range existing {
		if !slices.Contains(entries, e) {
			continue
		}
		want := "orig " + e
		if kind == "dir" {
			want = "{\"orig\":\"" + e + "\"}"
		}
		if !bytes.Contains(o.Stdout, []byte(want)) {
			return fmt.Errorf("the existing protected %s could not be read (positive control): %s", e, o)
		}
	}
	if readHost(filepath.Join(h.Work, "ok.txt")) != "ok\n" {
		return errors.New("the workspace write did not reach the host (positive control)")
	}
	if st, err := os.Stat(filepath.Join(h.Work, "other")); err != nil || !st.IsDir() {
		return errors.New("the workspace mkdir did not reach the host (positive control)")
	}
	for _, e := range missing {
		if err := mustNotExist(filepath.Join(h.Work, e), "creating a default protected entry"); err != nil {
			return err
		}
	}
	after, err := workspaceListing(h.Work, skip...)
	if err != nil {
		return err
	}
	if !slices.Equal(before, after) {
		return fmt.Errorf("the workspace changed beyond the command's own writes:\nbefore %q\nafter  %q", before, after)
	}
	return nil
}

func caseNoSetID(ctx context.Context, h *H) error {
	const setID = os.ModeSetuid | os.ModeSetgid
	// The host's own ability is the gate: a file system that drops set-id
	// bits for everyone says nothing about the driver.
	ctl := filepath.Join(h.Root, "setid-check")
	if err := writeFile(ctl, "#!/bin/sh\n"); err != nil {
		return err
	}
	if err := os.Chmod(ctl, 0o755|setID); err != nil {
		return skipf("the suite cannot set set-id bits here: %v", err)
	}
	if st, err := os.Stat(ctl); err != nil || st.Mode()&setID != setID {
		return skipf("the host's file system here keeps no set-id bits (%v)", err)
	}
	// Every route by which a mode reaches a file (by path, by descriptor,
	// at creation, fchmodat2, mknod, after a chown): a filter that forgets
	// one leaves the host a set-id file through it. Each route also makes a
	// plain 0755 file, the positive control that the route itself works
	// where it must.
	routes := probe.SetModeRoutes()
	created := map[string]bool{"open-create": true, "creat": true, "tmpfile": true, "mknod": true}
	// A sandbox may refuse these altogether: mknod of a regular file (a
	// driver allowing FIFOs only), O_TMPFILE (a file system without it),
	// fchmodat2 (a kernel before 6.6).
	optional := map[string]bool{"tmpfile": true, "mknod": true, "fchmodat2": true}
	var steps []string
	for _, r := range routes {
		for _, m := range []string{"0755", "4755", "2755", "6755"} {
			name := r + "-" + m
			if !created[r] {
				if err := writeFile(filepath.Join(h.Work, name), "#!/bin/sh\necho ran\n"); err != nil {
					return err
				}
			}
			steps = append(steps, "try", "setmode", r, m, name, sep)
		}
	}
	o := h.Probe(ctx, nil, append(steps, "echo", "setid-routes-done")...)
	if err := ran("set-id routes", o, "setid-routes-done"); err != nil {
		return err
	}
	for _, r := range routes {
		for _, m := range []string{"0755", "4755", "2755", "6755"} {
			if !bytes.Contains(o.Stdout, []byte("tried:"+r+":"+m+"\n")) {
				return fmt.Errorf("the probe did not try %s with mode %s: %s", r, m, o)
			}
		}
		if optional[r] {
			continue
		}
		st, err := os.Lstat(filepath.Join(h.Work, r+"-0755"))
		if err != nil || !st.Mode().IsRegular() || st.Mode()&0o700 != 0o700 || (!created[r] && st.Mode().Perm() != 0o755) {
			return fmt.Errorf("%s with mode 0755 did not take effect in the workspace (positive control): %v %v; the command: %s", r, st, err, o)
		}
	}
	// Whatever the routes answered, the host's workspace holds no set-id
	// file.
	var bad []string
	err := filepath.WalkDir(h.Work, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if st, err := os.Lstat(p); err == nil && st.Mode()&setID != 0 {
			bad = append(bad, fmt.Sprintf("%s (%v)", filepath.Base(p), st.Mode()))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(bad) > 0 {
		return fmt.Errorf("the host was left set-id files, named ROUTE-MODE after the way they were made: %s", strings.Join(bad, ", "))
	}
	return nil
}

// tmpfsFill writes N MiB to PATH with perl (a driver may enforce the
// memory limit with RLIMIT_AS, under which the Go runtime cannot start)
// and removes it again; print reports a failed write, close a failed
// flush.
const tmpfsFill = `my ($p, $n) = @ARGV; open(my $f, ">", $p) or die "open $p: $!\n"; my $b = "a" x 1048576;
for my $i (1 .. $n) { print {$f} $b or die "write at $i MiB: $!\n" } close($f) or die "close: $!\n"; unlink $p; print "filled:$n\n";`

func caseTmpfsBounded(ctx context.Context, h *H) error {
	// A random name: a driver whose /tmp is the host's leaves it there,
	// and the suite removes it.
	path := "/tmp/aleph-conformance-tmpfs-" + newToken()
	h.defer_(func() { os.Remove(path) })
	caps := &driverapi.Capabilities{MaxMemoryMB: 128}
	fill := func(mb string) Out {
		return h.Exec(ctx, Cmd{Program: h.suite.progs.perl, Args: []string{"-e", tmpfsFill, path, mb}, Caps: caps, Timeout: 40 * time.Second})
	}
	small := fill("16")
	if small.Err == nil && small.Exit.ExitCode != 0 && (bytes.Contains(small.Stderr, []byte("open "+path+": Permission denied")) ||
		bytes.Contains(small.Stderr, []byte("open "+path+": Read-only file system"))) {
		// The program ran (perl reported the open) and the sandbox has
		// no writable /tmp at all (the Landlock tier): there is no tmpfs
		// whose size could pin host memory.
		return skipf("the sandbox has no writable /tmp, so no tmpfs to bound: %s", bytes.TrimSpace(small.Stderr))
	}
	if err := ok("16 MiB into /tmp under 128 MiB", small); err != nil {
		return err
	}
	if !bytes.Contains(small.Stdout, []byte("filled:16")) {
		return fmt.Errorf("16 MiB into /tmp did not complete (positive control): %s", small)
	}
	big := fill("256")
	if big.Err != nil {
		return nil // refused outright is a kill too
	}
	if bytes.Contains(big.Stdout, []byte("filled:256")) || (big.Exit.ExitCode == 0 && big.Exit.Signal == 0) {
		return fmt.Errorf("256 MiB fit into /tmp under max_memory_mb=128: %s", big)
	}
	return nil
}

func caseProxyNoUnixSockets(ctx context.Context, h *H) error {
	t, _, c, err := proxySetup(ctx, h)
	if err != nil {
		return err
	}
	dir := filepath.Join(h.Out, "sockets")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	stream, err := h.listenStream("unix", filepath.Join(dir, "stream.sock"))
	if err != nil {
		return err
	}
	dgram, err := h.listenPacket("unixgram", filepath.Join(dir, "dgram.sock"))
	if err != nil {
		return err
	}
	probe := func(c Cmd) error {
		if _, err := netProbe(ctx, h, stream, [][]string{{"unix", stream.addr}}, c); err != nil {
			return err
		}
		_, err := netProbe(ctx, h, dgram, [][]string{{"unixgram", dgram.addr}}, c)
		return err
	}
	withGrant := func(caps driverapi.Capabilities) *driverapi.Capabilities {
		caps.FSRead = []string{dir}
		return &caps
	}
	unreached := func(mode string) error {
		sleepCtx(ctx, 500*time.Millisecond) // datagrams in flight
		if stream.reached() {
			return fmt.Errorf("with network %s the program connected to a host unix stream socket in a read grant", mode)
		}
		if dgram.reached() {
			return fmt.Errorf("with network %s the program's datagram reached a host unix datagram socket in a read grant", mode)
		}
		return nil
	}
	c.Caps = withGrant(*c.Caps)
	if err := probe(c); err != nil {
		return err
	}
	if err := unreached("allow_hosts"); err != nil {
		return err
	}
	if err := viaProxy(ctx, h, t, c); err != nil {
		return err
	}
	if h.Caps.Has(driverapi.FeatureNetworkNone) {
		if err := probe(Cmd{Caps: withGrant(driverapi.Capabilities{})}); err != nil {
			return err
		}
		if err := unreached("none"); err != nil {
			return err
		}
	}
	if h.Caps.Has(driverapi.FeatureNetworkAll) {
		if err := probe(Cmd{Caps: withGrant(driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}})}); err != nil {
			return err
		}
		if !waitFor(ctx, 2*time.Second, func() bool { return stream.reached() && dgram.reached() }) {
			return fmt.Errorf("with network all the host unix sockets were not reached (positive control): stream %v, datagram %v",
				stream.reached(), dgram.reached())
		}
	}
	return nil
}
