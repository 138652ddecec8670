package gitimport

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
)

// emptyTree is the id of git's empty tree (the base of an unborn branch).
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// refPlan is one ref the session changed.
type refPlan struct {
	ref      string
	base     string // its value in the base; "" when the session created it
	new      string
	tag      bool
	detached bool // HEAD detached at a commit of the session's
	need     []oid
	ok       bool
}

// item is an object the walk reaches, with the type the object linking
// to it says it has and its path (for trees and blobs).
type item struct {
	id   oid
	want objType
	path string
}

// submoduleItem is a gitlink or a .gitmodules blob met in a new tree.
type submoduleItem struct {
	path string
	mode string
	id   oid
}

func (r *importRun) importRefs(base layer.GitBase) error {
	s := &r.sess
	names := map[string]bool{}
	for n := range base.Refs {
		names[n] = true
	}
	for n := range s.loose {
		names[n] = true
	}
	for n := range s.packed {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)

	var plans []*refPlan
	for _, name := range sorted {
		if s.refused[name] || (!strings.HasPrefix(name, "refs/heads/") && !strings.HasPrefix(name, "refs/tags/")) {
			continue
		}
		bv := base.Refs[name]
		v, ok := s.value(name, bv, bv != "" && r.hostHasLoose(name))
		if !ok {
			if bv != "" {
				r.refuse(name, ReasonRefNotDeleted, "the session deleted it; it is kept on the host")
			}
			continue
		}
		if v != bv {
			plans = append(plans, &refPlan{ref: name, base: bv, new: v, tag: strings.HasPrefix(name, "refs/tags/")})
		}
	}
	if s.head != "" && s.head != base.Head {
		was := base.Head
		if was == "" {
			was = "nothing"
		}
		if strings.HasPrefix(s.head, "ref: ") {
			r.refuse("HEAD", ReasonHeadNotSwitched, fmt.Sprintf("the session switched HEAD to %s; the host's HEAD still names %s", s.head[5:], strings.TrimPrefix(was, "ref: ")))
		} else if headCommit(base) != s.head {
			sr := r.sessionRef("HEAD")
			r.refuse("HEAD", ReasonHeadNotSwitched, fmt.Sprintf("the session detached HEAD at %s; the host's HEAD still names %s; the commit is kept under %s", s.head, strings.TrimPrefix(was, "ref: "), sr))
			plans = append(plans, &refPlan{ref: sr, new: s.head, detached: true})
		}
	}

	// Objects: what each ref needs that the host lacks. The session's
	// loose objects are asked about in one batch first: they are most
	// of what a session adds, and the walk then rarely waits on the host.
	if len(plans) > 0 && len(r.loose) > 0 {
		ids := make([]oid, 0, len(r.loose))
		for id := range r.loose {
			ids = append(ids, id)
		}
		if err := r.askHostIDs(ids); err != nil {
			return err
		}
	}
	for _, p := range plans {
		reason, detail, err := r.walk(p, base)
		if err != nil {
			return err
		}
		if reason != "" {
			r.refuse(p.ref, reason, detail)
			continue
		}
		p.ok = true
	}
	if err := r.writeObjects(plans); err != nil {
		return err
	}
	defer func() {
		for _, k := range r.keeps {
			_ = os.Remove(k)
		}
	}()
	for _, p := range plans {
		if p.ok {
			if err := r.updateRef(p); err != nil {
				return err
			}
		}
	}
	return r.resetIndex(base)
}

func headCommit(base layer.GitBase) string {
	if ref, ok := strings.CutPrefix(base.Head, "ref: "); ok {
		return base.Refs[ref]
	}
	return base.Head
}

func (r *importRun) hostHasLoose(ref string) bool {
	fi, err := os.Lstat(filepath.Join(r.host.gitDir, filepath.FromSlash(ref)))
	return err == nil && fi.Mode().IsRegular()
}

// sessionRef is layer.SessionRef, or, when the session's name cannot stand
// in a ref, the same under a name made from its hash.
func (r *importRun) sessionRef(branch string) string {
	sr := layer.SessionRef(r.req.Session, branch)
	if CheckRefFormat(sr) == nil && !strings.Contains(r.req.Session, "/") && r.req.Session != "" {
		return sr
	}
	h := sha1.Sum([]byte(r.req.Session))
	return layer.SessionRef("session-"+hex.EncodeToString(h[:6]), branch)
}

// walk finds the objects p needs that the host does not have, all of them
// read and verified, and judges them: every one present, no submodule
// brought in.
func (r *importRun) walk(p *refPlan, base layer.GitBase) (reason, detail string, err error) {
	tip, _ := parseOID(p.new)
	want := objCommit
	if p.tag {
		want = 0
	}
	// Breadth first, each level's ids asked of the host in one batch:
	// one round trip to the host's cat-file per level, not per object.
	frontier := []item{{tip, want, ""}}
	seen := map[oid]bool{}
	var subs []submoduleItem
	var stack []item // the next level
	for len(frontier) > 0 {
		var level []item
		for _, it := range frontier {
			if !seen[it.id] {
				seen[it.id] = true
				level = append(level, it)
			}
		}
		frontier = nil
		if err := r.askHost(level); err != nil {
			return "", "", err
		}
		stack = stack[:0]
		for _, it := range level {
			if r.hostHas[it.id] {
				continue
			}
			o, err := r.get(it.id)
			var eo *errObject
			switch {
			case errors.Is(err, errMissing):
				return ReasonMissingObjects, fmt.Sprintf("object %s%s is neither in the session's repository nor in the host's", it.id, pathNote(it.path)), nil
			case errors.As(err, &eo):
				return ReasonInvalidObject, fmt.Sprintf("object %s%s: %s", it.id, pathNote(it.path), eo.msg), nil
			case err != nil:
				return "", "", err
			}
			if it.want != 0 && o.typ != it.want {
				return ReasonInvalidObject, fmt.Sprintf("object %s%s is a %s where a %s is expected", it.id, pathNote(it.path), o.typ, it.want), nil
			}
			p.need = append(p.need, it.id)
			switch o.typ {
			case objCommit:
				tree, parents, err := commitLinks(o.data)
				if err != nil {
					return ReasonInvalidObject, fmt.Sprintf("commit %s: %v", it.id, err), nil
				}
				stack = append(stack, item{tree, objTree, ""})
				for _, pa := range parents {
					stack = append(stack, item{pa, objCommit, ""})
				}
			case objTag:
				target, typ, err := tagTarget(o.data)
				if err != nil {
					return ReasonInvalidObject, fmt.Sprintf("tag %s: %v", it.id, err), nil
				}
				stack = append(stack, item{target, typ, ""})
			case objTree:
				entries, err := parseTree(o.data)
				if err != nil {
					return ReasonInvalidObject, fmt.Sprintf("tree %s: %v", it.id, err), nil
				}
				for _, e := range entries {
					path := e.name
					if it.path != "" {
						path = it.path + "/" + e.name
					}
					switch {
					case e.mode == "160000":
						// A gitlink names a commit of another repository:
						// not an object of this one, never fetched.
						subs = append(subs, submoduleItem{path, e.mode, e.id})
					case e.mode == "40000":
						stack = append(stack, item{e.id, objTree, path})
					default:
						if isGitmodules(e.name) {
							subs = append(subs, submoduleItem{path, e.mode, e.id})
						}
						stack = append(stack, item{e.id, objBlob, path})
					}
				}
			}
		}
		frontier = append(frontier, stack...)
	}
	for _, sm := range subs {
		same, err := r.hostHasEntry(sm, p, base)
		if err != nil {
			return "", "", err
		}
		if !same {
			what := "a gitlink (submodule) at " + sm.path
			if sm.mode != "160000" {
				what = "a changed " + sm.path
			}
			return ReasonSubmodule, "the session's commits add " + what + ": submodules are not imported in this version", nil
		}
	}
	return "", "", nil
}

// askHost learns whether the host has each object of a level of the walk
// not asked about before, in one batch.
func (r *importRun) askHost(level []item) error {
	ids := make([]oid, 0, len(level))
	for _, it := range level {
		ids = append(ids, it.id)
	}
	return r.askHostIDs(ids)
}

func (r *importRun) askHostIDs(ids []oid) error {
	if r.hostHas == nil {
		r.hostHas = map[oid]bool{}
	}
	var ask []oid
	for _, id := range ids {
		if _, known := r.hostHas[id]; !known {
			ask = append(ask, id)
		}
	}
	if len(ask) == 0 {
		return nil
	}
	has, err := r.cat.hasMany(ask)
	if err != nil {
		return err
	}
	for i, id := range ask {
		r.hostHas[id] = has[i]
	}
	return nil
}

func pathNote(p string) string {
	if p == "" {
		return ""
	}
	return " (" + p + ")"
}

// isGitmodules matches the names git itself takes for .gitmodules on a
// case-insensitive or NTFS file system.
func isGitmodules(name string) bool {
	n := strings.ToLower(strings.TrimRight(name, ". "))
	return n == ".gitmodules" || strings.HasPrefix(n, "gitmod~")
}

// hostHasEntry reports whether the same gitlink or .gitmodules was already
// at that path in what the host had: the branch's base commit or the
// host's HEAD at the base (then the session did not add it).
func (r *importRun) hostHasEntry(sm submoduleItem, p *refPlan, base layer.GitBase) (bool, error) {
	var commits []string
	if p.base != "" {
		commits = append(commits, p.base)
	}
	if h := headCommit(base); h != "" && h != p.base {
		commits = append(commits, h)
	}
	for _, c := range commits {
		out, err := r.host.run(r.ctx, nil, "ls-tree", "-z", "--full-tree", c, "--", sm.path)
		if err != nil {
			var ge *GitError
			if errors.As(err, &ge) && ge.exitCode() > 0 {
				continue // the base commit is gone from the host: not the same
			}
			return false, err
		}
		for _, e := range bytes.Split(out, []byte{0}) {
			meta, path, ok := bytes.Cut(e, []byte{'\t'})
			f := strings.Fields(string(meta))
			if ok && string(path) == sm.path && len(f) == 3 && strings.TrimLeft(f[0], "0") == strings.TrimLeft(sm.mode, "0") && f[2] == sm.id.String() {
				return true, nil
			}
		}
	}
	return false, nil
}

// writeObjects hands the objects the accepted refs need to the host's
// `git index-pack --stdin --strict`, as one pack of whole objects: the
// host's git checks each (fsck) and that everything they link to is there,
// as it does for a fetch. When it refuses the lot, each ref is tried on
// its own so that one bad ref does not stop the others.
func (r *importRun) writeObjects(plans []*refPlan) error {
	var ok []*refPlan
	for _, p := range plans {
		if p.ok {
			ok = append(ok, p)
		}
	}
	ids := unionNeed(ok)
	if len(ids) == 0 {
		return nil
	}
	msg, err := r.indexPack(ids)
	if err != nil {
		return err
	}
	if msg == "" {
		r.res.Objects += len(ids)
		return nil
	}
	if len(ok) == 1 {
		ok[0].ok = false
		r.refuse(ok[0].ref, ReasonFsck, msg)
		return nil
	}
	for _, p := range ok {
		ids := unionNeed([]*refPlan{p})
		if len(ids) == 0 {
			continue
		}
		msg, err := r.indexPack(ids)
		if err != nil {
			return err
		}
		if msg != "" {
			p.ok = false
			r.refuse(p.ref, ReasonFsck, msg)
			continue
		}
		r.res.Objects += len(ids)
	}
	return nil
}

func unionNeed(plans []*refPlan) []oid {
	seen := map[oid]bool{}
	var ids []oid
	for _, p := range plans {
		for _, id := range p.need {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// indexPack streams ids as a pack into the host's index-pack; a refusal by
// the host's checks comes back as msg (err is for the host failing).
func (r *importRun) indexPack(ids []oid) (msg string, err error) {
	pr, pw := io.Pipe()
	go func() {
		w, err := newPackWriter(pw, len(ids))
		for i := 0; err == nil && i < len(ids); i++ {
			err = w.add(r.cache[ids[i]])
		}
		if err == nil {
			err = w.finish()
		}
		pw.CloseWithError(err)
	}()
	out, err := r.host.run(r.ctx, pr, "index-pack", "--stdin", "--strict", "--keep=aleph-sandbox import")
	_ = pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		var ge *GitError
		if errors.As(err, &ge) && ge.exitCode() > 0 && r.ctx.Err() == nil {
			return trimForMessage2(ge.Stderr), nil
		}
		return "", err
	}
	// The pack is kept (.keep) until the refs name its objects, so that a
	// concurrent gc cannot prune them in between; then the keep goes.
	if h, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "keep\t"); ok && isHex(h, 40) {
		r.keeps = append(r.keeps, filepath.Join(r.host.gitDir, "objects", "pack", "pack-"+h+".keep"))
	}
	return "", nil
}

func trimForMessage2(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 1000 {
		return s[:1000] + "..."
	}
	return s
}
