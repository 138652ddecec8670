package gitimport

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
)

// hostRef is the host's current value of ref ("" when absent).
func (r *importRun) hostRef(ref string) (string, error) {
	out, err := r.host.run(r.ctx, nil, "rev-parse", "-q", "--verify", ref)
	if err != nil {
		var ge *GitError
		if errors.As(err, &ge) && ge.exitCode() == 1 {
			return "", nil
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// setRef moves ref to new if it is still old ("" : must not exist): the
// old value makes the update atomic against a concurrent change on the
// host. moved is false when the host's ref was not old any more.
func (r *importRun) setRef(ref, new, old string) (moved bool, err error) {
	expect := old
	if expect == "" {
		expect = zeroID
	}
	_, err = r.host.run(r.ctx, nil, "update-ref", "-m", "aleph-sandbox: import from session "+r.req.Session, "--", ref, new, expect)
	if err == nil {
		return true, nil
	}
	// A ref the host moved meanwhile is a conflict; any other failure
	// (a stale lock, a full disk) is the host's, an error.
	if hv, herr := r.hostRef(ref); herr == nil && hv != old {
		return false, nil
	}
	return false, err
}

// conflict keeps the session's commit under its session ref and reports
// ref as not moved.
func (r *importRun) conflict(p *refPlan, reason string) error {
	sr := r.sessionRef(p.ref)
	if _, err := r.host.run(r.ctx, nil, "update-ref", "-m", "aleph-sandbox: kept from session "+r.req.Session, "--", sr, p.new); err != nil {
		return fmt.Errorf("keeping the session's %s under %s: %w", p.ref, sr, err)
	}
	r.res.Conflicts = append(r.res.Conflicts, layer.RefConflict{Ref: p.ref, SessionRef: sr, Reason: reason})
	return nil
}

func (r *importRun) updateRef(p *refPlan) error {
	if p.detached {
		if _, err := r.host.run(r.ctx, nil, "update-ref", "-m", "aleph-sandbox: kept from session "+r.req.Session, "--", p.ref, p.new); err != nil {
			return err
		}
		r.res.Updated = append(r.res.Updated, layer.RefUpdate{Ref: p.ref, New: p.new})
		return nil
	}
	hv, err := r.hostRef(p.ref)
	if err != nil {
		return err
	}
	switch {
	case p.tag && p.base != "":
		// Tags are never moved.
		return r.conflict(p, ConflictTagNotMoved)
	case p.base == "" && hv == p.new:
		return nil // already there
	case p.base == "" && hv != "":
		return r.conflict(p, ConflictExistsOnHost)
	case p.base == "":
		moved, err := r.setRef(p.ref, p.new, "")
		if err != nil {
			return err
		}
		if !moved {
			return r.conflict(p, ConflictExistsOnHost)
		}
		r.res.Updated = append(r.res.Updated, layer.RefUpdate{Ref: p.ref, New: p.new})
		return nil
	case hv != p.base:
		return r.conflict(p, ConflictHostMoved)
	}
	ff, err := r.host.test(r.ctx, "merge-base", "--is-ancestor", p.base, p.new)
	if err != nil {
		return err
	}
	if !ff {
		return r.conflict(p, ConflictNotFastForward)
	}
	moved, err := r.setRef(p.ref, p.new, p.base)
	if err != nil {
		return err
	}
	if !moved {
		return r.conflict(p, ConflictHostMoved)
	}
	r.res.Updated = append(r.res.Updated, layer.RefUpdate{Ref: p.ref, Old: p.base, New: p.new})
	return nil
}

// resetIndex: when the branch the host's HEAD names was moved, the host's
// index is set to the new commit's tree (git reset --mixed, the working
// tree untouched: Apply writes it), so that git status shows only the
// session's uncommitted changes. An index holding changes staged on the
// host is left alone (and said so): resetting it would drop them.
func (r *importRun) resetIndex(base layer.GitBase) error {
	out, err := r.host.run(r.ctx, nil, "symbolic-ref", "-q", "HEAD")
	if err != nil {
		return nil // detached or unreadable HEAD: nothing to reset
	}
	head := strings.TrimSpace(string(out))
	for _, u := range r.res.Updated {
		if u.Ref != head {
			continue
		}
		old := u.Old
		if old == "" {
			old = emptyTree
		}
		clean, err := r.host.test(r.ctx, "diff-index", "--cached", "--quiet", old, "--")
		if err != nil {
			return err
		}
		if !clean {
			r.refuse("HEAD", ReasonIndexNotReset, fmt.Sprintf("the host's index holds changes staged since %s; it was not reset to %s (run `git reset --mixed` to do it)", shortID(u.Old), shortID(u.New)))
			return nil
		}
		if _, err := r.host.run(r.ctx, nil, "read-tree", u.New); err != nil {
			return err
		}
		r.res.IndexReset = true
	}
	return nil
}

func shortID(s string) string {
	if s == "" {
		return "the empty tree"
	}
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
