package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

const canary = "aleph-conformance-canary-7f3d"

func fsCases() []Case {
	rd, wr, prot := driverapi.FeatureFSReadIsolation, driverapi.FeatureFSWriteIsolation, driverapi.FeatureProtectedPaths
	return []Case{
		{ID: "fs/workspace-read-write", Level: Must,
			Description: "Inside the workspace the program reads host files, creates, renames and deletes files and directories, and the host sees the result.",
			run:         caseWorkspaceRW},
		{ID: "fs/workspace-unusual-path", Level: Must,
			Description: "A workspace whose path holds spaces, quotes, unicode and shell characters works like any other: the program starts there, reads and writes in it.",
			run:         caseUnusualWorkspace},
		{ID: "fs/write-outside-denied", Level: Must, Feature: wr,
			Description: "Writing a file in a host directory outside the workspace fails and nothing appears there; the same command writes inside the workspace.",
			run: func(ctx context.Context, h *H) error {
				return writeDenied(ctx, h, nil, filepath.Join(h.Out, "x"))
			}},
		{ID: "fs/write-home-denied", Level: Must, Feature: wr,
			Description: "Writing in a directory under the host user's home fails (shell rc files and git hooks are persistence); writing inside the workspace works.",
			run: func(ctx context.Context, h *H) error {
				dir, err := h.homeDir()
				if err != nil {
					return err
				}
				return writeDenied(ctx, h, nil, filepath.Join(dir, ".bashrc"))
			}},
		{ID: "fs/read-outside-denied", Level: Must, Feature: rd,
			Description: "A host file outside the workspace cannot be read; a workspace file can.",
			run: func(ctx context.Context, h *H) error {
				p := filepath.Join(h.Out, "secret.txt")
				if err := writeFile(p, canary+"\n"); err != nil {
					return err
				}
				return readDenied(ctx, h, nil, p)
			}},
		{ID: "fs/home-secrets-invisible", Level: Must, Feature: rd,
			Description: "A credential-like file under the host user's home (~/.ssh style) cannot be read; a workspace file can.",
			run: func(ctx context.Context, h *H) error {
				dir, err := h.homeDir()
				if err != nil {
					return err
				}
				p := filepath.Join(dir, "id_ed25519")
				if err := writeFile(p, canary+"\n"); err != nil {
					return err
				}
				return readDenied(ctx, h, nil, p)
			}},
		{ID: "fs/etc-shadow-invisible", OS: POSIXOnly, OSReason: "/etc/shadow is a POSIX file", Level: Should, Feature: rd,
			Description: "The host's /etc/shadow (password hashes) is not readable inside the sandbox, whoever the driver runs as; a workspace file is.",
			run:         caseShadow},
		{ID: "fs/read-grant", Level: Must, Feature: rd,
			Description: "An fs_read grant makes a directory outside the workspace readable (nested files included) but not writable when write isolation is claimed.",
			run:         caseReadGrant},
		{ID: "fs/read-grant-prefix", Level: Must, Feature: rd,
			Description: "An fs_read grant of DIR does not extend to a sibling DIR-other that shares its string prefix, nor to the grant's parent.",
			run:         caseReadGrantPrefix},
		{ID: "fs/write-grant", Level: Must, Feature: wr,
			Description: "An fs_write grant makes a directory outside the workspace writable, nested directories included.",
			run:         caseWriteGrant},
		{ID: "fs/write-grant-prefix", Level: Must, Feature: wr,
			Description: "An fs_write grant of DIR does not extend to a sibling DIR-other that shares its string prefix, nor to the grant's parent; DIR itself is writable.",
			run:         caseWriteGrantPrefix},
		{ID: "fs/symlink-escape-write-denied", Level: Must, Feature: wr,
			Description: "A symlink in the workspace pointing outside it does not let the program write through it; writing through a symlink that stays inside works.",
			run:         caseSymlinkWrite},
		{ID: "fs/symlink-escape-read-denied", Level: Must, Feature: rd,
			Description: "A symlink in the workspace pointing at a host file outside it does not let the program read the target; a symlink to a workspace file reads.",
			run:         caseSymlinkRead},
		{ID: "fs/symlink-made-inside-denied", Level: Must, Feature: wr,
			Description: "A symlink the program itself creates to a host directory does not let it write there; the symlink creation and writes through an inside link work.",
			run:         caseSymlinkMadeInside},
		{ID: "fs/dotdot-escape-write-denied", Level: Must, Feature: wr,
			Description: "Paths climbing out of the workspace with .. (directly or after re-entering it) cannot be written; a plain workspace write in the same command works.",
			run: func(ctx context.Context, h *H) error {
				return writeDenied(ctx, h, nil, "../out/dotdot", "../ws/../out/dotdot2")
			}},
		{ID: "fs/dotdot-escape-read-denied", Level: Must, Feature: rd,
			Description: "Paths climbing out of the workspace with .. cannot be read.",
			run: func(ctx context.Context, h *H) error {
				if err := writeFile(filepath.Join(h.Out, "s.txt"), canary+"\n"); err != nil {
					return err
				}
				return readDenied(ctx, h, nil, "../out/s.txt")
			}},
		{ID: "fs/protected-dirs-readonly", Level: Must, Feature: prot,
			Description: "An existing .git in the workspace can be read but its files cannot be changed and new entries (.git/hooks/post-checkout) cannot be created; the rest of the workspace stays writable.",
			run:         caseProtectedReadonly},
		{ID: "fs/protected-dirs-not-creatable", Level: Must, Feature: prot,
			Description: "Missing .git, .aleph, .codex and .agents cannot be created in the workspace, as directories or files; other directories can.",
			run:         caseProtectedNotCreatable},
		{ID: "fs/protected-dirs-rename-denied", Level: Must, Feature: prot,
			Description: "An existing protected directory cannot be renamed away or removed (which would let it be recreated writable).",
			run:         caseProtectedRename},
	}
}

// homeDir makes a scratch directory under the host user's home, removed
// when the case ends.
func (h *H) homeDir() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", skipf("no home directory: %v", err)
	}
	dir, err := os.MkdirTemp(home, ".aleph-conformance-")
	if err != nil {
		return "", skipf("cannot create a scratch directory under %s: %v", home, err)
	}
	h.defer_(func() { removeAll(dir) })
	return filepath.EvalSymlinks(dir)
}

// writeDenied: each target (absolute or relative to the workspace) must
// stay uncreated, while ws/inside.txt is written by the same script.
func writeDenied(ctx context.Context, h *H, caps *driverapi.Capabilities, targets ...string) error {
	steps := []string{"write", "inside.txt", "inside\n", sep, "echo", "wrote-inside"}
	for _, t := range targets {
		steps = append(steps, sep, "try", "write", t, "escaped\n")
	}
	o := h.Probe(ctx, caps, steps...)
	if err := ran("write inside", o, "wrote-inside"); err != nil {
		return err
	}
	if readHost(filepath.Join(h.Work, "inside.txt")) != "inside\n" {
		return errors.New("write inside the workspace did not reach the host (positive control)")
	}
	for _, t := range targets {
		abs := t
		if !filepath.IsAbs(t) {
			abs = filepath.Join(h.Work, t)
		}
		// The host's view is what counts: a write that landed in a
		// private, throwaway mount is no escape.
		if err := mustNotExist(abs, "write outside the workspace"); err != nil {
			return err
		}
	}
	return nil
}

// readDenied: each target must not be readable (its canary never shows),
// while a workspace file with the canary is.
func readDenied(ctx context.Context, h *H, caps *driverapi.Capabilities, targets ...string) error {
	if err := writeFile(filepath.Join(h.Work, "mine.txt"), "mine-"+canary+"\n"); err != nil {
		return err
	}
	steps := []string{"read", "mine.txt"}
	for _, t := range targets {
		steps = append(steps, sep, "try", "read", t)
	}
	o := h.Probe(ctx, caps, steps...)
	if err := ran("read inside", o, "mine-"+canary); err != nil {
		return err
	}
	rest := bytes.ReplaceAll(o.Stdout, []byte("mine-"+canary), nil)
	if bytes.Contains(rest, []byte(canary)) {
		return fmt.Errorf("a file outside the workspace was read: %s", o)
	}
	return nil
}

func caseWorkspaceRW(ctx context.Context, h *H) error {
	if err := writeFile(filepath.Join(h.Work, "given.txt"), "from-host\n"); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(h.Work, "gone.txt"), "x"); err != nil {
		return err
	}
	o := h.Probe(ctx, nil, "read", "given.txt", sep, "mkdir", "a/b", sep, "write", "a/b/new.txt", "made\n", sep,
		"mv", "a/b/new.txt", "a/moved.txt", sep, "rm", "gone.txt", sep, "append", "given.txt", "appended\n")
	if err := ok("workspace steps", o); err != nil {
		return err
	}
	if string(o.Stdout) != "from-host\n" {
		return fmt.Errorf("reading a host-made file gave %q", o.Stdout)
	}
	if readHost(filepath.Join(h.Work, "a", "moved.txt")) != "made\n" {
		return errors.New("created+renamed file missing on the host")
	}
	if _, err := os.Stat(filepath.Join(h.Work, "gone.txt")); err == nil {
		return errors.New("deleted file still exists on the host")
	}
	if readHost(filepath.Join(h.Work, "given.txt")) != "from-host\nappended\n" {
		return errors.New("append did not reach the host")
	}
	return nil
}

func caseShadow(ctx context.Context, h *H) error {
	b, err := os.ReadFile("/etc/shadow")
	if err != nil {
		return skipf("the host's /etc/shadow is not readable by the suite: %v", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if len(line) < 4 {
		return skipf("the host's /etc/shadow is empty")
	}
	if err := writeFile(filepath.Join(h.Work, "mine.txt"), "mine-"+canary+"\n"); err != nil {
		return err
	}
	o := h.Probe(ctx, nil, "read", "mine.txt", sep, "try", "read", "/etc/shadow")
	if err := ran("read inside", o, "mine-"+canary); err != nil {
		return err
	}
	if bytes.Contains(o.Stdout, []byte(line)) {
		return errors.New("the host's /etc/shadow was readable")
	}
	return nil
}

func caseReadGrant(ctx context.Context, h *H) error {
	g := filepath.Join(h.Out, "granted")
	if err := writeFile(filepath.Join(g, "deep", "f.txt"), "granted-"+canary+"\n"); err != nil {
		return err
	}
	caps := &driverapi.Capabilities{FSRead: []string{g}, SpawnSubprocess: true}
	o := h.Probe(ctx, caps, "read", filepath.Join(g, "deep", "f.txt"), sep, "try", "write", filepath.Join(g, "w.txt"), "x\n")
	if err := ran("read granted", o, "granted-"+canary); err != nil {
		return err
	}
	if h.Caps.Has(driverapi.FeatureFSWriteIsolation) {
		if err := mustNotExist(filepath.Join(g, "w.txt"), "write to a read-only grant"); err != nil {
			return err
		}
	}
	return nil
}

func caseReadGrantPrefix(ctx context.Context, h *H) error {
	g := filepath.Join(h.Out, "data")
	if err := writeFile(filepath.Join(g, "ok.txt"), "ok-granted\n"); err != nil {
		return err
	}
	sib := filepath.Join(h.Out, "data-other", "s.txt")
	parent := filepath.Join(h.Out, "p.txt")
	for _, p := range []string{sib, parent} {
		if err := writeFile(p, canary+"\n"); err != nil {
			return err
		}
	}
	caps := &driverapi.Capabilities{FSRead: []string{g}, SpawnSubprocess: true}
	o := h.Probe(ctx, caps, "read", filepath.Join(g, "ok.txt"), sep, "try", "read", sib, sep, "try", "read", parent)
	if err := ran("read granted", o, "ok-granted"); err != nil {
		return err
	}
	if bytes.Contains(o.Stdout, []byte(canary)) {
		return fmt.Errorf("a path beside the grant was readable: %s", o)
	}
	return nil
}

func caseWriteGrant(ctx context.Context, h *H) error {
	g := filepath.Join(h.Out, "wgrant")
	if err := os.MkdirAll(g, 0o755); err != nil {
		return err
	}
	caps := &driverapi.Capabilities{FSWrite: []string{g}, SpawnSubprocess: true}
	f := filepath.Join(g, "n", "f.txt")
	o := h.Probe(ctx, caps, "mkdir", filepath.Join(g, "n"), sep, "write", f, "w\n", sep, "read", f)
	if err := ok("write into grant", o); err != nil {
		return err
	}
	if readHost(filepath.Join(g, "n", "f.txt")) != "w\n" {
		return errors.New("write into the fs_write grant did not reach the host")
	}
	return nil
}

func caseWriteGrantPrefix(ctx context.Context, h *H) error {
	g := filepath.Join(h.Out, "w")
	sib := filepath.Join(h.Out, "w-other")
	for _, d := range []string{g, sib} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	caps := &driverapi.Capabilities{FSWrite: []string{g}, SpawnSubprocess: true}
	o := h.Probe(ctx, caps, "write", filepath.Join(g, "f"), "ok\n", sep, "echo", "wrote-grant", sep,
		"try", "write", filepath.Join(sib, "f"), "x\n", sep, "try", "write", filepath.Join(h.Out, "f"), "x\n")
	if err := ran("write into grant", o, "wrote-grant"); err != nil {
		return err
	}
	if readHost(filepath.Join(g, "f")) != "ok\n" {
		return errors.New("write into the grant did not reach the host")
	}
	if err := mustNotExist(filepath.Join(sib, "f"), "write beside the grant"); err != nil {
		return err
	}
	return mustNotExist(filepath.Join(h.Out, "f"), "write to the grant's parent")
}

func caseSymlinkWrite(ctx context.Context, h *H) error {
	if err := os.Mkdir(filepath.Join(h.Work, "real"), 0o755); err != nil {
		return err
	}
	if err := h.symlink(h.Out, filepath.Join(h.Work, "escape")); err != nil {
		return err
	}
	if err := h.symlink("real", filepath.Join(h.Work, "inlink")); err != nil {
		return err
	}
	o := h.Probe(ctx, nil, "write", "inlink/f", "in\n", sep, "echo", "wrote-inside", sep, "try", "write", "escape/f", "x\n")
	if err := ran("write via inside link", o, "wrote-inside"); err != nil {
		return err
	}
	if readHost(filepath.Join(h.Work, "real", "f")) != "in\n" {
		return errors.New("write through an inside symlink did not land (positive control)")
	}
	return mustNotExist(filepath.Join(h.Out, "f"), "write through an escaping symlink")
}

func caseSymlinkRead(ctx context.Context, h *H) error {
	if err := writeFile(filepath.Join(h.Out, "s.txt"), canary+"\n"); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(h.Work, "mine.txt"), "mine-"+canary+"\n"); err != nil {
		return err
	}
	if err := h.symlink(filepath.Join(h.Out, "s.txt"), filepath.Join(h.Work, "escape")); err != nil {
		return err
	}
	if err := h.symlink("mine.txt", filepath.Join(h.Work, "inlink")); err != nil {
		return err
	}
	o := h.Probe(ctx, nil, "read", "inlink", sep, "try", "read", "escape")
	if err := ran("read via inside link", o, "mine-"+canary); err != nil {
		return err
	}
	if bytes.Contains(bytes.ReplaceAll(o.Stdout, []byte("mine-"+canary), nil), []byte(canary)) {
		return errors.New("read through an escaping symlink succeeded")
	}
	return nil
}

func caseSymlinkMadeInside(ctx context.Context, h *H) error {
	// The host's own ability is the gate: where it cannot make symlinks
	// (Windows without the privilege), the case cannot say anything.
	if err := h.symlink("x", filepath.Join(h.Root, "symlink-check")); err != nil {
		return err
	}
	link := []string{"symlink", "real", "l"}
	if !h.suite.progs.posix() {
		// Creating symlinks is a privilege on Windows that a sandboxed
		// program may lack; that alone is no escape and no failure.
		link = append([]string{"try"}, link...)
	}
	o := h.Probe(ctx, nil, append(append([]string{"mkdir", "real", sep}, link...), sep, "write", "l/f", "in\n", sep, "echo", "wrote-inside", sep,
		"try", "symlink", h.Out, "esc", sep, "try", "write", "esc/f", "x\n")...)
	if st, err := os.Lstat(filepath.Join(h.Work, "l")); !h.suite.progs.posix() && o.Err == nil && (err != nil || st.Mode()&os.ModeSymlink == 0) {
		return skipf("the sandboxed program cannot create symlinks on this host: %s", o)
	}
	if err := ran("inside link", o, "wrote-inside"); err != nil {
		return err
	}
	if readHost(filepath.Join(h.Work, "real", "f")) != "in\n" {
		return errors.New("write through the program's own inside symlink did not land (positive control)")
	}
	return mustNotExist(filepath.Join(h.Out, "f"), "write through a program-made escaping symlink")
}

func caseProtectedReadonly(ctx context.Context, h *H) error {
	cfg := filepath.Join(h.Work, ".git", "config")
	if err := writeFile(cfg, "[core]\n"); err != nil {
		return err
	}
	o := h.Probe(ctx, nil, "read", ".git/config", sep, "write", "ok.txt", "ok\n", sep, "echo", "wrote-ok", sep,
		"try", "append", ".git/config", "evil\n", sep,
		"try", "mkdir", ".git/hooks", sep, "try", "write", ".git/hooks/post-checkout", "evil\n", sep,
		"try", "write", ".git/HEAD", "evil\n")
	if err := ran("protected read", o, "[core]"); err != nil {
		return err
	}
	if err := ran("workspace write", o, "wrote-ok"); err != nil {
		return err
	}
	if got := readHost(cfg); got != "[core]\n" {
		return fmt.Errorf(".git/config was changed to %q", got)
	}
	for _, p := range []string{".git/hooks", ".git/HEAD"} {
		if err := mustNotExist(filepath.Join(h.Work, p), "creating inside .git"); err != nil {
			return err
		}
	}
	return nil
}

func caseProtectedNotCreatable(ctx context.Context, h *H) error {
	steps := []string{"mkdir", "other", sep, "echo", "made-other"}
	for _, d := range protectedEntries() {
		steps = append(steps, sep, "try", "mkdir", d, sep, "try", "write", d+"/f", "x\n", sep, "try", "write", d, "x\n")
	}
	o := h.Probe(ctx, nil, steps...)
	if err := ran("mkdir other", o, "made-other"); err != nil {
		return err
	}
	for _, d := range protectedEntries() {
		if err := mustNotExist(filepath.Join(h.Work, d), "creating a protected path"); err != nil {
			return err
		}
	}
	return nil
}

func caseProtectedRename(ctx context.Context, h *H) error {
	cfg := filepath.Join(h.Work, ".git", "config")
	if err := writeFile(cfg, "[core]\n"); err != nil {
		return err
	}
	o := h.Probe(ctx, nil, "write", "ok.txt", "ok\n", sep, "echo", "wrote-ok", sep, "try", "mv", ".git", "moved", sep,
		"try", "rmall", ".git", sep, "try", "mkdir", ".git/hooks", sep, "try", "write", ".git/hooks/pre-commit", "evil\n")
	if err := ran("workspace write", o, "wrote-ok"); err != nil {
		return err
	}
	if readHost(cfg) != "[core]\n" {
		return errors.New(".git/config was moved, removed or changed")
	}
	return mustNotExist(filepath.Join(h.Work, ".git", "hooks"), "recreating .git")
}

func caseUnusualWorkspace(ctx context.Context, h *H) error {
	ws := filepath.Join(h.Root, h.suite.progs.unusualDir)
	if err := os.Mkdir(ws, 0o755); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(ws, "in.txt"), "given\n"); err != nil {
		return err
	}
	h.Work = ws
	o := h.Probe(ctx, nil, "pwd", sep, "read", "in.txt", sep, "write", "out.txt", "made\n")
	if err := ok("probe in an unusual workspace", o); err != nil {
		return err
	}
	wd, rest, _ := strings.Cut(string(o.Stdout), "\n")
	if !h.samePath(wd, ws) || rest != "given\n" {
		return fmt.Errorf("got %q, want %q", o.Stdout, ws+"\ngiven\n")
	}
	if readHost(filepath.Join(ws, "out.txt")) != "made\n" {
		return errors.New("write in the workspace did not reach the host")
	}
	return nil
}

// symlink makes a host symlink; where the host cannot (Windows without the
// symlink privilege or developer mode), the case is skipped, saying so.
func (h *H) symlink(target, link string) error {
	err := os.Symlink(target, link)
	if err != nil && !h.suite.progs.posix() {
		return skipf("this host cannot create symlinks (needs developer mode or the symlink privilege): %v", err)
	}
	return err
}
