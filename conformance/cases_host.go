package conformance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The cases of this file plant canaries outside every root a command may
// use, at names drawn afresh for every run, so that no driver can pass by
// hiding a fixed list of paths: a driver that binds the host's root and
// hides only /tmp, the home directories and /etc/shadow fails them.

func hostCases() []Case {
	rd, wr, prot := driverapi.FeatureFSReadIsolation, driverapi.FeatureFSWriteIsolation, driverapi.FeatureProtectedPaths
	return []Case{
		{ID: "fs/host-canaries-unreadable", Level: Must, Feature: rd,
			Description: "Canaries the suite plants at random names outside every allowed root (a fresh directory under /var/tmp, under /opt and /srv where the suite can write, and beside the case's own directory in the temp dir) cannot be read, and neither they nor their parents can be listed; a workspace file can be read.",
			run: func(ctx context.Context, h *H) error {
				cs, err := h.plantHostCanaries()
				if err != nil {
					return err
				}
				return canariesUnreadable(ctx, h, cs)
			}},
		{ID: "fs/host-canaries-unwritable", Level: Must, Feature: wr,
			Description: "In the same random canary directories outside every allowed root, no file can be created and the canary cannot be changed; the same command writes in the workspace.",
			run: func(ctx context.Context, h *H) error {
				cs, err := h.plantHostCanaries()
				if err != nil {
					return err
				}
				return canariesUnwritable(ctx, h, cs)
			}},
		{ID: "fs/host-homes-invisible", Level: Must, Feature: rd, OS: POSIXOnly, OSReason: "home directories are read from /etc/passwd",
			Description: "A canary in every home directory the host has (each existing home in /etc/passwd outside the system directories, /root, every /home/* and /Users/*) and in a fake home the suite makes under /home, cannot be read or listed, nor (with fs_write_isolation) written; as a non-root user only the user's own home can be planted. A workspace file can be read.",
			run:         caseHomes},
		{ID: "fs/protected-existing-readonly", Level: Must, Feature: prot,
			Description: "Every default protected entry that exists in the workspace (.git, .aleph, .codex, .agents, each holding a config file) can be read, but its file cannot be changed or removed, nothing can be created in it, and it cannot be renamed or removed; the rest of the workspace stays writable.",
			run:         caseProtectedExisting},
		{ID: "fs/host-dev-shm-invisible", Level: Must, Feature: rd, OS: LinuxOnly, OSReason: "/dev/shm (POSIX shared memory as files) is Linux's",
			Description: "A file the suite creates in the host's /dev/shm (POSIX shared memory) at a random name cannot be read, is not listed, and nothing can be created beside it in the host's /dev/shm; the program ran.",
			run:         caseDevShm},
	}
}

// protectedEntries are the workspace entries the protected-paths cases
// test: the protocol's default protected set, in one place so that a
// wider default set needs one change here.
func protectedEntries() []string { return driverapi.ProtectedDirs() }

// plant is a directory the suite planted outside every allowed root,
// holding one file whose content is token.
type plant struct {
	dir, file, token string
}

// plantCanary makes a directory named prefix+random in parent with a file
// holding the token; both are open to everyone (0777/0666), so that only
// the sandbox, never the file's mode, can stop the command. It is removed
// when the case ends.
func (h *H) plantCanary(parent, prefix string) (plant, error) {
	tok := newToken()
	dir := filepath.Join(parent, prefix+tok)
	if err := os.Mkdir(dir, 0o777); err != nil {
		return plant{}, err
	}
	h.defer_(func() { removeAll(dir) })
	c := plant{dir: dir, file: filepath.Join(dir, "secret-"+tok), token: "canary-" + tok}
	if err := os.WriteFile(c.file, []byte(c.token+"\n"), 0o666); err != nil {
		return plant{}, err
	}
	// The umask must not narrow what the sandbox could do.
	if err := os.Chmod(dir, 0o777); err != nil {
		return plant{}, err
	}
	return c, os.Chmod(c.file, 0o666)
}

// hostCanaryParents are the host directories that get a canary: beside the
// case's own directory (the workspace's parent) in the temp dir, and on
// POSIX hosts /var/tmp, /opt and /srv.
func (h *H) hostCanaryParents() []string {
	out := []string{filepath.Dir(h.Root)}
	if h.suite.progs.posix() {
		out = append(out, "/var/tmp", "/opt", "/srv")
	}
	return out
}

// plantHostCanaries plants one canary in every parent the suite can write
// to. The temp dir always can; the others count where they exist and are
// writable (as root they usually are).
func (h *H) plantHostCanaries() ([]plant, error) {
	var cs []plant
	for i, p := range h.hostCanaryParents() {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		c, err := h.plantCanary(real, "aleph-conformance-canary-")
		if err != nil {
			if i == 0 {
				return nil, fmt.Errorf("planting a canary beside the case directory: %w", err)
			}
			continue
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// canariesUnreadable: no canary's random part shows in what the command
// printed after trying to read each file and list each directory and its
// parent, while a workspace file with its own token is read.
func canariesUnreadable(ctx context.Context, h *H, cs []plant) error {
	mine := "mine-" + newToken()
	if err := writeFile(filepath.Join(h.Work, "mine.txt"), mine+"\n"); err != nil {
		return err
	}
	steps := []string{"read", "mine.txt"}
	for _, c := range cs {
		steps = append(steps, sep, "try", "read", c.file, sep, "try", "ls", c.dir, sep, "try", "ls", filepath.Dir(c.dir))
	}
	o := h.Probe(ctx, nil, steps...)
	if err := ran("read inside", o, mine); err != nil {
		return err
	}
	for _, c := range cs {
		// The directory's and file's names carry the same random part.
		tok := strings.TrimPrefix(c.token, "canary-")
		if bytes.Contains(o.Stdout, []byte(tok)) {
			return fmt.Errorf("the canary %s outside every allowed root was read or listed", c.dir)
		}
	}
	return nil
}

// canariesUnwritable: the command tries to create a file in each canary
// directory and to change each canary; the host sees neither, while a
// workspace write of the same command lands.
func canariesUnwritable(ctx context.Context, h *H, cs []plant) error {
	steps := []string{"write", "inside.txt", "inside\n", sep, "echo", "wrote-inside"}
	for _, c := range cs {
		steps = append(steps, sep, "try", "write", filepath.Join(c.dir, "new.txt"), "escaped\n",
			sep, "try", "append", c.file, "changed\n", sep, "try", "mkdir", filepath.Join(c.dir, "sub"))
	}
	o := h.Probe(ctx, nil, steps...)
	if err := ran("write inside", o, "wrote-inside"); err != nil {
		return err
	}
	if readHost(filepath.Join(h.Work, "inside.txt")) != "inside\n" {
		return errors.New("write inside the workspace did not reach the host (positive control)")
	}
	for _, c := range cs {
		for _, p := range []string{filepath.Join(c.dir, "new.txt"), filepath.Join(c.dir, "sub")} {
			if err := mustNotExist(p, "writing outside every allowed root"); err != nil {
				return err
			}
		}
		if got := readHost(c.file); got != c.token+"\n" {
			return fmt.Errorf("the canary %s outside every allowed root was changed", c.file)
		}
	}
	return nil
}

// hostHomes lists the host's home directories: existing homes in
// /etc/passwd, /root, and every directory in /home and /Users, canonical,
// without the system directories some service accounts use as their home
// (/, /bin, /usr/sbin, /dev, /nonexistent...), which a driver may show as
// part of the system read set.
func hostHomes() []string {
	var cands []string
	if f, err := os.Open("/etc/passwd"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fs := strings.Split(sc.Text(), ":"); len(fs) >= 7 && !strings.HasPrefix(fs[0], "#") {
				cands = append(cands, fs[5])
			}
		}
		f.Close()
	}
	cands = append(cands, "/root")
	for _, parent := range []string{"/home", "/Users"} {
		if ents, err := os.ReadDir(parent); err == nil {
			for _, e := range ents {
				cands = append(cands, filepath.Join(parent, e.Name()))
			}
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		cands = append(cands, home)
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range cands {
		if !filepath.IsAbs(c) {
			continue
		}
		real, err := filepath.EvalSymlinks(c)
		if err != nil || seen[real] || systemHome(real) {
			continue
		}
		if st, err := os.Stat(real); err != nil || !st.IsDir() {
			continue
		}
		seen[real] = true
		out = append(out, real)
	}
	sort.Strings(out)
	return out
}

// systemHome reports whether a home is one of the system directories that
// service accounts are given as a home and that hold no user data.
func systemHome(p string) bool {
	if p == "/" {
		return true
	}
	for _, root := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/dev",
		"/proc", "/sys", "/run", "/var/run", "/nonexistent", "/System", "/private/var/empty", "/var/empty"} {
		if driverapi.PathWithin(p, root) {
			return true
		}
	}
	return false
}

func caseHomes(ctx context.Context, h *H) error {
	var cs []plant
	for _, home := range hostHomes() {
		// As a non-root user only the user's own home takes a canary.
		if c, err := h.plantCanary(home, ".aleph-conformance-"); err == nil {
			cs = append(cs, c)
		}
	}
	// A fake home at a name no driver can know: a driver that hides the
	// homes it finds in /etc/passwd, or the current user's, fails here.
	for _, parent := range []string{"/home", "/Users"} {
		if st, err := os.Stat(parent); err != nil || !st.IsDir() {
			continue
		}
		fake, err := os.MkdirTemp(parent, "aleph-conformance-home-")
		if err != nil {
			continue
		}
		h.defer_(func() { removeAll(fake) })
		if err := os.Chmod(fake, 0o755); err != nil {
			return err
		}
		c, err := h.plantCanary(fake, ".aleph-conformance-")
		if err != nil {
			return err
		}
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		return skipf("the suite could plant a canary in no home directory (none writable by uid %d)", os.Geteuid())
	}
	if err := canariesUnreadable(ctx, h, cs); err != nil {
		return err
	}
	if h.Caps.Has(driverapi.FeatureFSWriteIsolation) {
		return canariesUnwritable(ctx, h, cs)
	}
	return nil
}

func caseProtectedExisting(ctx context.Context, h *H) error {
	entries := protectedEntries()
	steps := []string{"write", "ok.txt", "ok\n", sep, "echo", "wrote-ok"}
	for _, e := range entries {
		if err := writeFile(filepath.Join(h.Work, e, "config"), "[orig "+e+"]\n"); err != nil {
			return err
		}
		steps = append(steps, sep, "read", e+"/config")
	}
	for _, e := range entries {
		steps = append(steps,
			sep, "try", "append", e+"/config", "evil\n",
			sep, "try", "write", e+"/config", "evil\n",
			sep, "try", "write", e+"/new", "evil\n",
			sep, "try", "mkdir", e+"/hooks",
			sep, "try", "rm", e+"/config",
			sep, "try", "mv", e, e+"-moved",
			sep, "try", "rmall", e)
	}
	o := h.Probe(ctx, nil, steps...)
	if err := ran("workspace write", o, "wrote-ok"); err != nil {
		return err
	}
	for _, e := range entries {
		if err := ran("reading "+e+"/config", o, "[orig "+e+"]"); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if got := readHost(filepath.Join(h.Work, e, "config")); got != "[orig "+e+"]\n" {
			return fmt.Errorf("the existing %s/config was changed, moved or removed (now %q)", e, got)
		}
		for _, p := range []string{e + "/new", e + "/hooks", e + "-moved"} {
			if err := mustNotExist(filepath.Join(h.Work, p), "changing an existing protected entry"); err != nil {
				return err
			}
		}
	}
	if readHost(filepath.Join(h.Work, "ok.txt")) != "ok\n" {
		return errors.New("the workspace write did not reach the host (positive control)")
	}
	return nil
}

func caseDevShm(ctx context.Context, h *H) error {
	c, err := h.plantCanary("/dev/shm", "aleph-conformance-shm-")
	if err != nil {
		return skipf("the suite cannot create a file in the host's /dev/shm: %v", err)
	}
	beside := filepath.Join("/dev/shm", filepath.Base(c.dir)+"-new")
	h.defer_(func() { removeAll(beside) })
	o := h.Probe(ctx, nil, "echo", "alive", sep, "try", "read", c.file, sep, "try", "ls", c.dir, sep, "try", "ls", "/dev/shm",
		sep, "try", "write", beside, "x\n")
	if err := ran("probe", o, "alive"); err != nil {
		return err
	}
	if bytes.Contains(o.Stdout, []byte(strings.TrimPrefix(c.token, "canary-"))) {
		return errors.New("the host's /dev/shm is visible in the sandbox: its file was read or listed")
	}
	return mustNotExist(beside, "writing into the host's /dev/shm")
}
