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

// The cases of this file are ways around protected entries that a
// path-matching sandbox (Seatbelt's subpath rules, NTFS ACLs on paths
// decided before the command) can miss and a mount-based one cannot: moving
// the tree that holds a protected entry to a writable place, spelling
// the entry's name in another letter case on a case-insensitive file
// system, reaching a protected file through a hard link at a workspace
// path, and the spellings Win32 rewrites into a protected name.

func moveCases() []Case {
	prot := driverapi.FeatureProtectedPaths
	return []Case{
		{ID: "fs/protected-roots-not-movable", Level: Must, Feature: prot,
			Description: "The trees that hold protected entries cannot be moved to a writable place (where the entries would no longer be where the rules name them, to be written and moved back): with an fs_write grant G beside the workspace W, both holding .git/config, renaming W into G, G into W, and W/.git into G fail, and both .git/config files are unchanged; the same command renames a file within W and within G and writes into G (positive controls).",
			run:         caseProtectedRootsNotMovable},
		{ID: "fs/protected-name-any-case", Level: Must, Feature: prot,
			Description: "A protected entry stays read-only under every spelling of its name, and a protected name spelled in another letter case is the protected entry where the workspace's file system ignores case (APFS and NTFS by default): writing .git/config, .GIT/config and .Git/config where .git/config exists, and creating .CODEX or .Codex/x where no .codex exists, fail and leave .git/config unchanged and no .codex under any spelling; the same command writes Other.TXT (positive control). Where the file system tells case apart (the suite checks on the host), .GIT and .CODEX are other names, and only .git/config unchanged is required.",
			run:         caseProtectedNameAnyCase},
		{ID: "fs/protected-hardlink-write-denied", Level: Must, Feature: prot,
			Description: "A hard link does not carry a write into a protected file: a rule that matches paths sees a link in the workspace as a workspace path, though it is the protected file. The command tries to link .git/config to cfg-link and to write and append through cfg-link; .git/config on the host is unchanged (the link itself may be refused). The same command links the workspace file a.txt to b.txt and appends through b.txt, and the append shows in a.txt on the host (positive control: hard links work in the sandbox and writes through them reach the file). Skipped, saying so, where the host's own file system makes no hard links.",
			run:         caseProtectedHardlink},
		{ID: "fs/protected-windows-aliases", Level: Must, Feature: prot, OS: WindowsOnly,
			OSReason:    "Win32 path parsing (trailing dots and spaces stripped, :: stream types) is Windows'",
			Description: "The spellings Win32 turns into a protected name are the protected entry, inside the sandbox and in a request: writing .git.\\config, .git \\config and .git::$INDEX_ALLOCATION\\config, and creating .codex. or .codex::$DATA where no .codex exists, leave .git\\config unchanged and no .codex with content; and an fs_write grant spelled W\\.git., W\\.git  or W\\.git::$INDEX_ALLOCATION is either refused by ProfileFor or grants nothing in .git (a write to .git\\config under it fails). The same commands write Other.txt (positive control).",
			run:         caseProtectedWindowsAliases},
	}
}

// caseProtectedWindowsAliases: Win32 strips a trailing dot or space from a
// component and reads "::$INDEX_ALLOCATION" as the directory itself, so
// each spelling below opens the protected entry (the class of
// CVE-2024-24576, where a check on the string misses what the OS opens).
func caseProtectedWindowsAliases(ctx context.Context, h *H) error {
	const orig = "[core]\n"
	cfg := filepath.Join(h.Work, ".git", "config")
	if err := writeFile(cfg, orig); err != nil {
		return err
	}
	aliases := []string{".git.", ".git ", ".git::$INDEX_ALLOCATION"}
	var steps []string
	for _, a := range aliases {
		steps = append(steps, "try", "write", a+`\config`, "evil\n", sep, "try", "append", a+`\config`, "evil\n", sep)
	}
	steps = append(steps, "try", "mkdir", ".codex.", sep, "try", "write", ".codex::$DATA", "x\n", sep, "try", "write", `.codex.\x`, "x\n",
		sep, "write", "Other.txt", "ok\n", sep, "echo", "wrote-other")
	o := h.Probe(ctx, nil, steps...)
	if err := ran("the workspace write", o, "wrote-other"); err != nil {
		return err
	}
	if readHost(filepath.Join(h.Work, "Other.txt")) != "ok\n" {
		return errors.New("the workspace write did not reach the host (positive control)")
	}
	if got := readHost(cfg); got != orig {
		return fmt.Errorf(".git\\config is %q after writes through names Win32 reads as .git, want %q", got, orig)
	}
	ents, err := os.ReadDir(h.Work)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !strings.EqualFold(strings.TrimRight(e.Name(), ". "), ".codex") {
			continue
		}
		// Only a driver's own empty placeholder may be there.
		if sub, err := os.ReadDir(filepath.Join(h.Work, e.Name())); err == nil && len(sub) > 0 {
			return fmt.Errorf("the missing protected .codex was created as %q, holding %d entries", e.Name(), len(sub))
		}
		if e.Type().IsRegular() && readHost(filepath.Join(h.Work, e.Name())) != "" {
			return fmt.Errorf("the missing protected .codex was written as %q", e.Name())
		}
	}
	for _, a := range aliases {
		grant := filepath.Join(h.Work, a)
		o := h.Probe(ctx, &driverapi.Capabilities{FSWrite: []string{grant}},
			"try", "write", `.git\config`, "evil\n", sep, "try", "write", grant+`\config`, "evil\n",
			sep, "write", "Other.txt", "ok\n", sep, "echo", "wrote-other")
		if o.Err != nil && strings.HasPrefix(o.Err.Error(), "ProfileFor: ") {
			continue // refused as it should be
		}
		if err := ran(fmt.Sprintf("with an fs_write grant %q", grant), o, "wrote-other"); err != nil {
			return err
		}
		if got := readHost(cfg); got != orig {
			return fmt.Errorf(".git\\config is %q after a command with the fs_write grant %q, want %q", got, grant, orig)
		}
	}
	return nil
}

func caseProtectedHardlink(ctx context.Context, h *H) error {
	const orig = "[core]\n"
	cfg, a := filepath.Join(h.Work, ".git", "config"), filepath.Join(h.Work, "a.txt")
	if err := writeFile(cfg, orig); err != nil {
		return err
	}
	if err := writeFile(a, "a\n"); err != nil {
		return err
	}
	// The host's own ability is the gate: without hard links the case
	// says nothing about the driver.
	ctl := filepath.Join(h.Root, "link-check")
	if err := writeFile(ctl, "x"); err != nil {
		return err
	}
	if err := os.Link(ctl, ctl+"-2"); err != nil {
		return skipf("the host's file system here makes no hard links: %v", err)
	}
	o := h.Probe(ctx, nil, "link", "a.txt", "b.txt", sep, "append", "b.txt", "more\n",
		sep, "try", "link", ".git/config", "cfg-link", sep, "try", "append", "cfg-link", "\tfsmonitor = evil\n",
		sep, "try", "write", "cfg-link", "evil\n", sep, "echo", "linked")
	if err := ran("hard links in the workspace", o, "linked"); err != nil {
		return err
	}
	if got := readHost(a); got != "a\nmore\n" {
		return fmt.Errorf("the append through the hard link b.txt did not reach a.txt (positive control): a.txt is %q", got)
	}
	if got := readHost(cfg); got != orig {
		return fmt.Errorf(".git/config was changed through a hard link: now %q, was %q", got, orig)
	}
	return nil
}

func caseProtectedRootsNotMovable(ctx context.Context, h *H) error {
	const orig = "[core]\n"
	wsCfg, outCfg := filepath.Join(h.Work, ".git", "config"), filepath.Join(h.Out, ".git", "config")
	for p, c := range map[string]string{wsCfg: orig, outCfg: orig,
		filepath.Join(h.Work, "a"): "a\n", filepath.Join(h.Out, "c"): "c\n"} {
		if err := writeFile(p, c); err != nil {
			return err
		}
	}
	caps := &driverapi.Capabilities{FSWrite: []string{h.Out}}
	wsMoved, outMoved, gitMoved := filepath.Join(h.Out, "ws-moved"), filepath.Join(h.Work, "out-moved"), filepath.Join(h.Out, "git-moved")
	o := h.Probe(ctx, caps,
		"try", "mv", h.Work, wsMoved, sep, "try", "mv", h.Out, outMoved, sep, "try", "mv", filepath.Join(h.Work, ".git"), gitMoved,
		sep, "mv", filepath.Join(h.Work, "a"), filepath.Join(h.Work, "b"), sep, "mv", filepath.Join(h.Out, "c"), filepath.Join(h.Out, "d"),
		sep, "write", filepath.Join(h.Out, "new"), "new\n", sep, "echo", "moved-within")
	if err := ran("renames within the workspace and the grant", o, "moved-within"); err != nil {
		return err
	}
	for _, p := range []string{wsMoved, outMoved, gitMoved} {
		if err := mustNotExist(p, "moving a tree that holds protected entries"); err != nil {
			return err
		}
	}
	for _, c := range []string{wsCfg, outCfg} {
		if got := readHost(c); got != orig {
			return fmt.Errorf("%s is %q after the command, want %q", c, got, orig)
		}
	}
	if readHost(filepath.Join(h.Work, "b")) != "a\n" || readHost(filepath.Join(h.Out, "d")) != "c\n" || readHost(filepath.Join(h.Out, "new")) != "new\n" {
		return errors.New("the renames within the workspace and the grant, or the write into the grant, did not reach the host (positive control)")
	}
	return nil
}

// caseInsensitive reports whether dir's file system folds letter case: a
// file made as one spelling is found under another.
func caseInsensitive(dir string) (bool, error) {
	p := filepath.Join(dir, "CaseCheck.tmp")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		return false, err
	}
	defer os.Remove(p)
	_, err := os.Lstat(filepath.Join(dir, "casecheck.TMP"))
	return err == nil, nil
}

func caseProtectedNameAnyCase(ctx context.Context, h *H) error {
	const orig = "[core]\n"
	cfg := filepath.Join(h.Work, ".git", "config")
	if err := writeFile(cfg, orig); err != nil {
		return err
	}
	folds, err := caseInsensitive(h.Work)
	if err != nil {
		return err
	}
	o := h.Probe(ctx, nil,
		"try", "write", ".git/config", "evil\n", sep, "try", "write", ".GIT/config", "evil\n", sep, "try", "append", ".Git/config", "evil\n", sep, "try", "mkdir", ".GIT/hooks",
		sep, "try", "mkdir", ".CODEX", sep, "try", "write", ".Codex/x", "x\n", sep, "try", "write", ".cOdEx", "x\n",
		sep, "write", "Other.TXT", "ok\n", sep, "echo", "wrote-other")
	if err := ran("the workspace write", o, "wrote-other"); err != nil {
		return err
	}
	if got := readHost(cfg); got != orig {
		return fmt.Errorf(".git/config is %q after writes to other spellings of it, want %q", got, orig)
	}
	if readHost(filepath.Join(h.Work, "Other.TXT")) != "ok\n" {
		return errors.New("the workspace write did not reach the host (positive control)")
	}
	if !folds {
		return nil // .GIT and .CODEX are other names here
	}
	// Each attempt must have been refused (the probe names the path it
	// failed on), and nothing made under any spelling of .codex.
	for _, p := range []string{".GIT/config", ".Git/config", ".GIT/hooks", ".CODEX", ".Codex/x", ".cOdEx"} {
		if !bytes.Contains(o.Stderr, []byte(" "+p+":")) {
			return fmt.Errorf("%s, another spelling of a protected entry on this case-insensitive file system, was not refused: %s", p, o)
		}
	}
	if err := mustNotExist(filepath.Join(h.Work, ".git", "hooks"), "creating .GIT/hooks"); err != nil {
		return err
	}
	ents, err := os.ReadDir(h.Work)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !strings.EqualFold(e.Name(), ".codex") {
			continue
		}
		// Only a driver's own placeholder for the missing entry may be
		// there (an empty stub), never what the command wrote.
		if sub, err := os.ReadDir(filepath.Join(h.Work, e.Name())); err == nil && len(sub) > 0 {
			return fmt.Errorf("the missing protected .codex was created as %s, holding %d entries", e.Name(), len(sub))
		}
		if e.Type().IsRegular() && readHost(filepath.Join(h.Work, e.Name())) != "" {
			return fmt.Errorf("the missing protected .codex was written as %s", e.Name())
		}
	}
	return nil
}
