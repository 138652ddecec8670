package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// pathCases are about the paths a host hands a driver: where a command may
// start, in what form the workspace and cwd arrive, and what a link in the
// workspace leads to.
func pathCases() []Case {
	return []Case{
		{ID: "protocol/cwd-outside-workspace-refused", Level: Must,
			Description: "A cwd outside the workspace (and every grant) is refused with an InvalidSpecError for cwd, by ProfileFor and by Run, and the command does not run there; the same command with the workspace as its cwd runs.",
			run:         caseCwdOutside},
		{ID: "protocol/non-canonical-paths-refused", Level: Must,
			Description: "A workspace or cwd spelled with a . or .. component, a doubled or trailing separator, or through a symbolic link (one staying inside the workspace, one leading out) is refused with an InvalidSpecError for that field, not resolved: by ProfileFor, and by Run for the cwd, which runs nothing. The canonical paths work.",
			run:         caseNonCanonical},
		{ID: "fs/symlink-dir-escape-read-denied", Level: Must, Feature: driverapi.FeatureFSReadIsolation,
			Description: "Reading a host file outside the workspace through links in the workspace fails: a link to the directory holding it, a relative link climbing out with .., a chain of two links; listing the directory through its link fails too. The same command reads a workspace file.",
			run:         caseSymlinkDirRead},
	}
}

// invalidFor returns an error unless err is an *InvalidSpecError for field.
func invalidFor(what string, err error, field string) error {
	var ise *driverapi.InvalidSpecError
	switch {
	case err == nil:
		return fmt.Errorf("%s: accepted, want an InvalidSpecError for %s", what, field)
	case !errors.As(err, &ise):
		return fmt.Errorf("%s: refused with %T (%v), want an InvalidSpecError for %s", what, err, err, field)
	case ise.Field != field:
		return fmt.Errorf("%s: an InvalidSpecError for %q (%v), want one for %s", what, ise.Field, err, field)
	}
	return nil
}

// ranHere is the file the path cases' command writes in its cwd: where it
// appears, the command ran.
const ranHere = "ran-here.txt"

// cwdCommand is a Run spec under a profile for the workspace whose
// command writes ranHere in its cwd and prints "ran".
func (h *H) cwdCommand(ctx context.Context) (driverapi.RunSpec, error) {
	p, err := h.profile(ctx, h.Driver, defaultCaps(), "", nil)
	if err != nil {
		return driverapi.RunSpec{}, fmt.Errorf("ProfileFor with the canonical workspace: %w", err)
	}
	c, err := h.resolve(h.ProbeCmd(Cmd{}, "write", ranHere, "ran\n", sep, "echo", "ran"))
	if err != nil {
		return driverapi.RunSpec{}, err
	}
	return h.spec(c, p), nil
}

func caseCwdOutside(ctx context.Context, h *H) error {
	_, err := h.Driver.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: defaultCaps(), Workspace: h.Work, Cwd: h.Out})
	if err := invalidFor("ProfileFor with the cwd outside the workspace", err, "cwd"); err != nil {
		return err
	}
	spec, err := h.cwdCommand(ctx)
	if err != nil {
		return err
	}
	outside := spec
	outside.Cwd = h.Out
	o := h.run(ctx, h.Driver, outside, nil)
	if err := invalidFor("Run with the cwd outside the workspace", o.Err, "cwd"); err != nil {
		return fmt.Errorf("%w: %s", err, o)
	}
	if err := mustNotExist(filepath.Join(h.Out, ranHere), "Run with the cwd outside the workspace"); err != nil {
		return err
	}
	// Positive control: the same command, in the workspace.
	o = h.run(ctx, h.Driver, spec, nil)
	if err := ran("the command with the workspace as cwd", o, "ran"); err != nil {
		return err
	}
	if readHost(filepath.Join(h.Work, ranHere)) != "ran\n" {
		return fmt.Errorf("the command with the workspace as cwd did not write %s there (positive control)", ranHere)
	}
	return nil
}

func caseNonCanonical(ctx context.Context, h *H) error {
	sub := filepath.Join(h.Work, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		return err
	}
	s := string(os.PathSeparator)
	type spelling struct{ name, path string }
	workspaces := []spelling{
		{"with a . component", h.Work + s + "."},
		{"with a .. component", sub + s + ".."},
		{"with a trailing separator", h.Work + s},
		{"with a doubled separator", h.Root + s + s + filepath.Base(h.Work)},
	}
	cwds := []spelling{
		{"with a .. component", sub + s + ".."},
		{"climbing out with ..", h.Work + s + ".." + s + filepath.Base(h.Out)},
		{"with a . component", h.Work + s + "." + s + "sub"},
		{"with a trailing separator", sub + s},
		{"with a doubled separator", h.Work + s + s + "sub"},
	}
	// Links: the host resolved them already; a driver that follows one
	// follows whatever a command swapped in since. Where this host cannot
	// make links (Windows without the privilege) the other spellings
	// still say something.
	links := []struct{ target, link string }{
		{h.Work, filepath.Join(h.Root, "wslink")},
		{sub, filepath.Join(h.Work, "inlink")},
		{h.Out, filepath.Join(h.Work, "outlink")},
	}
	for i, l := range links {
		if err := os.Symlink(l.target, l.link); err != nil {
			if h.suite.progs.posix() {
				return err
			}
			break
		}
		switch i {
		case 0:
			workspaces = append(workspaces, spelling{"through a symbolic link", l.link})
		case 1:
			cwds = append(cwds, spelling{"through a symbolic link inside the workspace", l.link})
		case 2:
			cwds = append(cwds, spelling{"through a symbolic link out of the workspace", l.link})
		}
	}
	for _, w := range workspaces {
		_, err := h.Driver.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: defaultCaps(), Workspace: w.path})
		if err := invalidFor(fmt.Sprintf("ProfileFor with the workspace %s (%q)", w.name, w.path), err, "workspace"); err != nil {
			return err
		}
	}
	spec, err := h.cwdCommand(ctx)
	if err != nil {
		return err
	}
	for _, c := range cwds {
		_, err := h.Driver.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: defaultCaps(), Workspace: h.Work, Cwd: c.path})
		if err := invalidFor(fmt.Sprintf("ProfileFor with the cwd %s (%q)", c.name, c.path), err, "cwd"); err != nil {
			return err
		}
		bad := spec
		bad.Cwd = c.path
		o := h.run(ctx, h.Driver, bad, nil)
		if err := invalidFor(fmt.Sprintf("Run with the cwd %s (%q)", c.name, c.path), o.Err, "cwd"); err != nil {
			return fmt.Errorf("%w: %s", err, o)
		}
	}
	for _, d := range []string{h.Work, sub, h.Out} {
		if err := mustNotExist(filepath.Join(d, ranHere), "Run with a cwd that is not canonical"); err != nil {
			return err
		}
	}
	// Positive controls: the canonical spellings of the same directories.
	if _, err := h.Driver.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: defaultCaps(), Workspace: h.Work, Cwd: sub}); err != nil {
		return fmt.Errorf("ProfileFor with the canonical workspace and cwd %q: %w", sub, err)
	}
	spec.Cwd = sub
	o := h.run(ctx, h.Driver, spec, nil)
	if err := ran("the command in the canonical cwd", o, "ran"); err != nil {
		return err
	}
	if readHost(filepath.Join(sub, ranHere)) != "ran\n" {
		return fmt.Errorf("the command with the cwd %s did not write %s there (positive control)", sub, ranHere)
	}
	return nil
}

func caseSymlinkDirRead(ctx context.Context, h *H) error {
	secret := filepath.Join(h.Out, "s.txt")
	if err := writeFile(secret, canary+"\n"); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(h.Work, "mine.txt"), "mine-"+canary+"\n"); err != nil {
		return err
	}
	rel, err := filepath.Rel(h.Work, secret)
	if err != nil {
		return err
	}
	for _, l := range []struct{ target, link string }{
		{h.Out, "outdir"},    // a directory outside
		{rel, "rel"},         // ../out/s.txt
		{"chain2", "chain1"}, // a link to a link to the file
		{secret, "chain2"},
	} {
		if err := h.symlink(l.target, filepath.Join(h.Work, l.link)); err != nil {
			return err
		}
	}
	reads := []string{filepath.Join("outdir", "s.txt"), "rel", "chain1"}
	steps := []string{"read", "mine.txt", sep, "echo", "read-mine"}
	for _, r := range reads {
		steps = append(steps, sep, "try", "read", r)
	}
	steps = append(steps, sep, "try", "ls", "outdir")
	o := h.Probe(ctx, nil, steps...)
	if err := ran("read a workspace file", o, "read-mine"); err != nil {
		return err
	}
	if !bytes.Contains(o.Stdout, []byte("mine-"+canary)) {
		return fmt.Errorf("the workspace file was not read (positive control): %s", o)
	}
	if bytes.Contains(bytes.ReplaceAll(o.Stdout, []byte("mine-"+canary), nil), []byte(canary)) || bytes.Contains(o.Stdout, []byte("s.txt")) {
		return fmt.Errorf("a file outside the workspace was read or listed through a link: %s", o)
	}
	// Not seeing the canary is not enough: an empty file in its place
	// would hide it too. Each read must fail.
	if n := bytes.Count(o.Stderr, []byte("probe: try read: ")); n != len(reads) {
		return fmt.Errorf("%d of the %d reads through links failed, want all: %s", n, len(reads), o)
	}
	if !bytes.Contains(o.Stderr, []byte("probe: try ls: ")) {
		return fmt.Errorf("listing a directory outside the workspace through a link worked: %s", o)
	}
	return nil
}
