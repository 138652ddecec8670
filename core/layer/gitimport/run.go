package gitimport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
)

type entKind int

const (
	kindAbsent entKind = iota
	kindFile
	kindDir
	kindWhiteout
	kindSymlink
	kindOther
)

func (k entKind) String() string {
	return [...]string{"absent", "a regular file", "a directory", "deleted (whiteout)", "a symlink", "a device, FIFO or socket"}[k]
}

const zeroID = "0000000000000000000000000000000000000000"

// importRun is one Import.
type importRun struct {
	ctx context.Context
	req layer.GitImportRequest
	lim Limits
	res layer.GitImportResult

	upper *upperDir
	host  *hostGit
	cat   *catFile

	sha256 string // why the session's repository looks SHA-256, if it does

	loose map[oid]string // loose object -> its fan-out directory
	packs []*pack
	files []*os.File

	cache     map[oid]object
	bad       map[oid]string // objects refused, with the reason
	total     int64          // bytes held in cache
	resolving map[oid]bool   // ref-deltas being resolved (cycle guard)

	hostHas map[oid]bool // what the host's cat-file said

	sess  sessionRefs
	keeps []string // .keep files of the packs written
}

func (r *importRun) close() {
	if r.cat != nil {
		r.cat.close()
	}
	for _, f := range r.files {
		_ = f.Close()
	}
	if r.upper != nil {
		r.upper.Close()
	}
}

func (r *importRun) refuse(path, reason, detail string) {
	r.res.Refused = append(r.res.Refused, layer.Refusal{Path: path, Reason: reason, Detail: detail})
}

func (r *importRun) run(im *Importer) error {
	ws := r.req.Workspace
	if ws == "" || !filepath.IsAbs(ws) {
		return fmt.Errorf("git import: the workspace %q is not an absolute path", ws)
	}
	up, kind, err := openUpperRoot(r.req.UpperGit)
	if err != nil {
		return err
	}
	switch kind {
	case kindAbsent:
		return nil // the session did not touch .git
	case kindWhiteout:
		r.refuse(".git", ReasonRepositoryDeleted, "the session deleted the repository; the host's is kept")
		return nil
	case kindDir:
		r.upper = up
	default:
		r.refuse(".git", ReasonSessionGitNotDirectory, "the session's .git is "+kind.String()+"; nothing of it is imported")
		return nil
	}

	// The host repository.
	gd := filepath.Join(ws, ".git")
	fi, err := os.Lstat(gd)
	hostExists := true
	switch {
	case errors.Is(err, os.ErrNotExist):
		hostExists = false
	case err != nil:
		return fmt.Errorf("looking at the host repository: %w", err)
	case !fi.IsDir():
		r.refuse(".git", ReasonHostGitNotDirectory, "the host's .git is not a directory (a worktree's gitfile or a symlink): importing into it is not supported")
		return nil
	}
	if !hostExists && r.req.Base.Exists {
		r.refuse(".git", ReasonHostRepositoryMissing, "the host's repository was removed since the session started")
		return nil
	}
	bin, err := im.gitBin()
	if err != nil {
		return err
	}

	if err := r.readRefs(); err != nil {
		return err
	}
	if err := r.listObjects(); err != nil {
		return err
	}
	if r.sha256 != "" {
		r.refuse(".git", ReasonSHA256, r.sha256+": SHA-256 repositories are not imported in this version")
		return nil
	}

	base := r.req.Base
	if !hostExists {
		if r.sess.head == "" && len(r.sess.loose) == 0 && len(r.sess.packed) == 0 {
			return nil // no repository made in the session either
		}
		branch := ""
		if b, ok := strings.CutPrefix(r.sess.head, "ref: refs/heads/"); ok && CheckRefFormat("refs/heads/"+b) == nil {
			branch = b
		}
		if err := r.initHost(bin, ws, branch); err != nil {
			return err
		}
		r.res.CreatedRepository = true
		r.host = newHostGit(bin, gd, ws)
		if base, err = snapshot(r.ctx, r.host); err != nil {
			return err
		}
	}
	r.host = newHostGit(bin, gd, ws)
	r.noteControlFiles(gd)
	if r.cat, err = r.host.catFile(r.ctx); err != nil {
		return err
	}
	return r.importRefs(base)
}

// initHost makes the host repository with the host git's defaults.
func (r *importRun) initHost(bin, ws, branch string) error {
	args := []string{"init", "-q"}
	if branch != "" {
		args = append(args, "--initial-branch="+branch)
	}
	args = append(args, "--", ws)
	// No GIT_DIR: git init makes ws/.git itself.
	h := newHostGit(bin, "", ws)
	var env []string
	for _, e := range h.env {
		if !strings.HasPrefix(e, "GIT_DIR=") {
			env = append(env, e)
		}
	}
	h.env = env
	c := h.command(r.ctx, args...)
	c.Dir = ws
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Run(); err != nil {
		return &GitError{Args: args, Stderr: errb.String(), Err: err}
	}
	return nil
}

// noteControlFiles lists what the session wrote in .git that git would
// take as configuration or programs: never read, never imported, reported
// so that the user knows (a config byte-identical to the host's, as git
// init makes it, and hooks' .sample files, which never run, are not).
func (r *importRun) noteControlFiles(hostGitDir string) {
	note := func(p, detail string) { r.refuse(".git/"+p, ReasonGitControlNotImported, detail) }
	present := func(d *upperDir, n string) bool {
		k := d.kind(n)
		return k != kindAbsent && k != kindWhiteout
	}
	if present(r.upper, "config") {
		b, k, err := r.upper.read("config", 1<<20)
		host, herr := os.ReadFile(filepath.Join(hostGitDir, "config"))
		if err != nil || k != kindFile || herr != nil || !bytes.Equal(b, host) {
			note("config", "the session's git config is never read nor imported: only objects and refs are")
		}
	}
	for _, n := range []string{"config.worktree", "commondir", "gitdir", "modules", "worktrees"} {
		if present(r.upper, n) {
			note(n, "never read nor imported: only objects and refs are")
		}
	}
	if hooks, k := r.upper.sub("hooks"); k == kindDir {
		names, _ := hooks.names(r.lim.MaxEntries)
		for _, n := range names {
			if !strings.HasSuffix(n, ".sample") && present(hooks, n) {
				note("hooks/"+n, "hooks the session wrote never run and are never imported")
			}
		}
		hooks.Close()
	} else if k != kindAbsent && k != kindWhiteout {
		note("hooks", "hooks the session wrote never run and are never imported")
	}
	if info, k := r.upper.sub("info"); k == kindDir {
		if present(info, "attributes") {
			note("info/attributes", "never read nor imported: attributes could name filters")
		}
		info.Close()
	}
	if objs, k := r.upper.sub("objects"); k == kindDir {
		defer objs.Close()
		if info, k := objs.sub("info"); k == kindDir {
			defer info.Close()
			for _, n := range []string{"alternates", "http-alternates"} {
				if present(info, n) {
					note("objects/info/"+n, "never read: objects are taken from the session's own objects only")
				}
			}
		}
	}
}

// sessionRefs is what the upper layer says of refs and HEAD.
type sessionRefs struct {
	head          string            // HEAD as written by the session; "" when untouched
	loose         map[string]string // loose refs the session wrote
	looseDeleted  map[string]bool   // loose refs (or directories of refs) it deleted
	hidden        []string          // prefixes ("refs/heads/x/") under which the lower is hidden
	packed        map[string]string
	packedPresent bool
	refused       map[string]bool // refs refused for their name or value
}

func (s *sessionRefs) deletedLoose(ref string) bool {
	if s.looseDeleted[ref] {
		return true
	}
	for _, p := range s.hidden {
		if strings.HasPrefix(ref, p) {
			return true
		}
	}
	return false
}

// value is the session's value of ref (present false: the session has
// no such ref), judged from the upper layer over the base.
func (s *sessionRefs) value(ref, base string, hostLoose bool) (string, bool) {
	if v, ok := s.loose[ref]; ok {
		return v, true
	}
	del := s.deletedLoose(ref)
	if !del && base != "" && hostLoose {
		return base, true // the host's loose file, untouched by the session
	}
	if s.packedPresent {
		v, ok := s.packed[ref]
		return v, ok
	}
	if del {
		// git deletes a ref from packed-refs too; packed-refs untouched
		// means the ref was loose only, and is gone.
		return "", false
	}
	return base, base != ""
}

func (r *importRun) readRefs() error {
	s := &r.sess
	s.loose, s.looseDeleted, s.packed, s.refused = map[string]string{}, map[string]bool{}, map[string]string{}, map[string]bool{}
	// HEAD.
	b, k, err := r.upper.read("HEAD", r.lim.MaxRefFile)
	var eo *errObject
	switch {
	case errors.As(err, &eo):
		r.refuse("HEAD", ReasonInvalidRefValue, eo.msg)
	case err != nil:
		return err
	case k == kindFile:
		v := strings.TrimSuffix(string(b), "\n")
		switch {
		case isHex(v, 40):
			s.head = strings.ToLower(v)
		case isHex(v, 64):
			r.sha256 = "HEAD holds a 64-digit object id"
		case strings.HasPrefix(v, "ref: ") && CheckRefFormat(v[5:]) == nil && strings.HasPrefix(v[5:], "refs/heads/"):
			s.head = v
		default:
			r.refuse("HEAD", ReasonInvalidRefValue, fmt.Sprintf("HEAD holds %q, neither a branch nor a commit id", trimForMessage(v)))
		}
	case k == kindAbsent:
	default:
		r.refuse("HEAD", ReasonInvalidRefValue, "the session's HEAD is "+k.String()+"; it is not read")
	}

	// Loose refs.
	refs, k := r.upper.sub("refs")
	switch k {
	case kindDir:
		defer refs.Close()
		if refs.opaque() {
			s.hidden = append(s.hidden, "refs/")
		}
		count := 0
		for _, top := range []string{"heads", "tags"} {
			d, k := refs.sub(top)
			prefix := "refs/" + top + "/"
			switch k {
			case kindDir:
				err := r.readRefDir(d, prefix, 0, &count)
				d.Close()
				if err != nil {
					return err
				}
			case kindWhiteout:
				s.hidden = append(s.hidden, prefix)
			case kindAbsent:
			default:
				r.refuse(strings.TrimSuffix(prefix, "/"), ReasonInvalidRefValue, "is "+k.String()+"; it is not read")
			}
		}
	case kindWhiteout:
		s.hidden = append(s.hidden, "refs/")
	case kindAbsent:
	default:
		r.refuse("refs", ReasonInvalidRefValue, "is "+k.String()+"; it is not read")
	}

	// packed-refs: when the session rewrote it, it is whole in the upper.
	b, k, err = r.upper.read("packed-refs", r.lim.MaxPackedRefs)
	switch {
	case errors.As(err, &eo):
		r.refuse("packed-refs", ReasonInvalidRefValue, eo.msg)
	case err != nil:
		return err
	case k == kindFile:
		s.packedPresent = true
		r.parsePackedRefs(b)
	case k == kindWhiteout:
		s.packedPresent = true // deleted: no packed refs
	case k == kindAbsent:
	default:
		r.refuse("packed-refs", ReasonInvalidRefValue, "is "+k.String()+"; it is not read")
	}
	return nil
}

func trimForMessage(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}

func (r *importRun) readRefDir(d *upperDir, prefix string, depth int, count *int) error {
	s := &r.sess
	if depth > 64 {
		r.refuse(prefix, ReasonInvalidRefName, "refs nested more than 64 deep are not read")
		return nil
	}
	names, err := d.names(r.lim.MaxEntries)
	var eo *errObject
	if errors.As(err, &eo) {
		r.refuse(prefix, ReasonTooLarge, eo.msg)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the session's refs: %w", err)
	}
	sort.Strings(names)
	for _, n := range names {
		*count++
		if *count > r.lim.MaxEntries {
			r.refuse(prefix, ReasonTooLarge, fmt.Sprintf("more than %d refs", r.lim.MaxEntries))
			return nil
		}
		full := prefix + n
		if sub, k := d.sub(n); k == kindDir {
			if sub.opaque() {
				s.hidden = append(s.hidden, full+"/")
			}
			err := r.readRefDir(sub, full+"/", depth+1, count)
			sub.Close()
			if err != nil {
				return err
			}
			continue
		}
		if err := CheckRefFormat(full); err != nil {
			r.refuse(full, ReasonInvalidRefName, err.Error())
			s.refused[full] = true
			continue
		}
		b, k, err := d.read(n, r.lim.MaxRefFile)
		switch {
		case errors.As(err, &eo):
			r.refuse(full, ReasonInvalidRefValue, eo.msg)
			s.refused[full] = true
		case err != nil:
			return err
		case k == kindWhiteout:
			s.looseDeleted[full] = true
			s.hidden = append(s.hidden, full+"/")
		case k == kindFile:
			v := strings.TrimSuffix(string(b), "\n")
			switch {
			case isHex(v, 40):
				s.loose[full] = strings.ToLower(v)
			case isHex(v, 64):
				r.sha256 = full + " holds a 64-digit object id"
			case strings.HasPrefix(v, "ref: "):
				r.refuse(full, ReasonInvalidRefValue, "a symbolic ref is not imported")
				s.refused[full] = true
			default:
				r.refuse(full, ReasonInvalidRefValue, fmt.Sprintf("holds %q, not a commit id", trimForMessage(v)))
				s.refused[full] = true
			}
		case k == kindAbsent:
		default:
			r.refuse(full, ReasonInvalidRefValue, "is "+k.String()+"; it is not read")
			s.refused[full] = true
		}
	}
	return nil
}

func (r *importRun) parsePackedRefs(b []byte) {
	s := &r.sess
	for i, l := range strings.Split(string(b), "\n") {
		if l == "" || l[0] == '#' || l[0] == '^' {
			continue
		}
		v, name, ok := strings.Cut(l, " ")
		if !ok {
			r.refuse(fmt.Sprintf("packed-refs:%d", i+1), ReasonInvalidRefValue, "malformed line")
			continue
		}
		if !strings.HasPrefix(name, "refs/heads/") && !strings.HasPrefix(name, "refs/tags/") {
			continue
		}
		if err := CheckRefFormat(name); err != nil {
			r.refuse(trimForMessage(name), ReasonInvalidRefName, err.Error())
			s.refused[name] = true
			continue
		}
		switch {
		case isHex(v, 40):
			s.packed[name] = strings.ToLower(v)
		case isHex(v, 64):
			r.sha256 = "packed-refs holds a 64-digit object id"
		default:
			r.refuse(name, ReasonInvalidRefValue, "packed-refs holds a malformed id for it")
			s.refused[name] = true
		}
	}
}

// listObjects finds the session's loose objects and packs (names only;
// contents are read when a ref needs them).
func (r *importRun) listObjects() error {
	objs, k := r.upper.sub("objects")
	switch k {
	case kindDir:
	case kindAbsent, kindWhiteout:
		return nil
	default:
		r.refuse(".git/objects", ReasonInvalidObject, "is "+k.String()+"; it is not read")
		return nil
	}
	defer objs.Close()
	names, err := objs.names(r.lim.MaxEntries)
	if err != nil {
		return fmt.Errorf("reading the session's objects: %w", err)
	}
	for _, n := range names {
		switch {
		case isHex(n, 2):
			d, k := objs.sub(n)
			if k != kindDir {
				if k != kindWhiteout {
					r.refuse(".git/objects/"+n, ReasonInvalidObject, "is "+k.String()+"; it is not read")
				}
				continue
			}
			files, err := d.names(r.lim.MaxEntries)
			d.Close()
			if err != nil {
				return fmt.Errorf("reading the session's objects: %w", err)
			}
			for _, f := range files {
				switch {
				case isHex(f, 38):
					id, _ := parseOID(strings.ToLower(n + f))
					r.loose[id] = n
				case isHex(f, 62):
					r.sha256 = "objects/" + n + "/ holds 64-digit object names"
				}
			}
		case n == "pack":
			if err := r.listPacks(objs); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *importRun) listPacks(objs *upperDir) error {
	d, k := objs.sub("pack")
	if k != kindDir {
		if k != kindWhiteout {
			r.refuse(".git/objects/pack", ReasonInvalidObject, "is "+k.String()+"; it is not read")
		}
		return nil
	}
	defer d.Close()
	names, err := d.names(r.lim.MaxEntries)
	if err != nil {
		return fmt.Errorf("reading the session's packs: %w", err)
	}
	sort.Strings(names)
	for _, n := range names {
		stem, ok := strings.CutSuffix(n, ".pack")
		if !ok || !strings.HasPrefix(stem, "pack-") {
			continue
		}
		if isHex(stem[5:], 64) {
			r.sha256 = "objects/pack holds " + n
			continue
		}
		path := ".git/objects/pack/" + n
		f, size, k, err := d.openFile(n)
		if err != nil {
			return err
		}
		if k == kindWhiteout || k == kindAbsent {
			continue
		}
		if k != kindFile {
			r.refuse(path, ReasonInvalidObject, "is "+k.String()+"; it is not read")
			continue
		}
		r.files = append(r.files, f)
		idxb, k, err := d.read(stem+".idx", r.lim.MaxIndexFile)
		var eo *errObject
		switch {
		case errors.As(err, &eo):
			r.refuse(path, ReasonInvalidObject, "its index: "+eo.msg)
			continue
		case err != nil:
			return err
		case k != kindFile:
			r.refuse(path, ReasonInvalidObject, "its index is "+k.String()+"; the pack is not read")
			continue
		}
		if err := checkPackHeader(f, size); err != nil {
			r.refuse(path, ReasonInvalidObject, err.Error())
			continue
		}
		idx, err := parsePackIndex(idxb, size)
		if err != nil {
			r.refuse(path, ReasonInvalidObject, "its index: "+err.Error())
			continue
		}
		r.packs = append(r.packs, &pack{name: path, r: f, size: size, idx: idx, byOff: map[int64]object{}})
	}
	return nil
}

// get returns the session's object id, verified, or errMissing.
func (r *importRun) get(id oid) (object, error) {
	if o, ok := r.cache[id]; ok {
		return o, nil
	}
	if why, ok := r.bad[id]; ok {
		return object{}, badObject("%s", why)
	}
	var firstErr error
	if dir, ok := r.loose[id]; ok {
		o, err := r.readLoose(dir, id)
		var eo *errObject
		switch {
		case err == nil:
			return r.keep(id, o)
		case errors.Is(err, errMissing):
		case errors.As(err, &eo):
			firstErr = err
		default:
			return object{}, err
		}
	}
	for _, p := range r.packs {
		off, ok := p.idx[id]
		if !ok {
			continue
		}
		o, err := r.packObject(p, off)
		if err == nil && hashObject(o.typ, o.data) != id {
			err = badObject("the object at offset %d of %s does not hash to the name its index gives", off, p.name)
		}
		if err == nil {
			return r.keep(id, o)
		}
		var eo *errObject
		if !errors.As(err, &eo) {
			return object{}, err
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		r.bad[id] = firstErr.Error()
		r.refuse(id.String(), ReasonInvalidObject, firstErr.Error())
		return object{}, firstErr
	}
	return object{}, errMissing
}

func (r *importRun) keep(id oid, o object) (object, error) {
	r.total += int64(len(o.data))
	if r.total > r.lim.MaxTotal {
		return object{}, badObject("the session's objects exceed %d bytes in all", r.lim.MaxTotal)
	}
	r.cache[id] = o
	return o, nil
}

func (r *importRun) readLoose(dir string, id oid) (object, error) {
	objs, k := r.upper.sub("objects")
	if k != kindDir {
		return object{}, errMissing
	}
	defer objs.Close()
	d, k := objs.sub(dir)
	if k != kindDir {
		return object{}, errMissing
	}
	defer d.Close()
	// A loose object compresses; one larger than the largest object
	// plus zlib's worst-case overhead is refused unread.
	b, k, err := d.read(id.String()[2:], r.lim.MaxObjectSize+r.lim.MaxObjectSize/100+1024)
	if err != nil {
		return object{}, err
	}
	switch k {
	case kindFile:
	case kindAbsent, kindWhiteout:
		return object{}, errMissing // pruned by the session's gc
	default:
		return object{}, badObject("loose object is %s", k)
	}
	return parseLoose(b, id, r.lim.MaxObjectSize)
}

// packObject resolves the entry at off of p, following its delta chain.
func (r *importRun) packObject(p *pack, off int64) (object, error) {
	var chain []entryHeader
	cur := off
	var base object
	for {
		if o, ok := p.byOff[cur]; ok {
			base = o
			break
		}
		h, err := p.header(cur, r.lim.MaxObjectSize)
		if err != nil {
			return object{}, err
		}
		if h.typ != objOfs && h.typ != objRef {
			data, err := p.inflate(h)
			if err != nil {
				return object{}, err
			}
			base = object{typ: h.typ, data: data}
			break
		}
		chain = append(chain, h)
		if len(chain) > maxDeltaChain {
			return object{}, badObject("delta chain longer than %d", maxDeltaChain)
		}
		if h.typ == objOfs {
			cur = h.baseOff
			continue
		}
		if r.resolving == nil {
			r.resolving = map[oid]bool{}
		}
		if r.resolving[h.baseID] {
			return object{}, badObject("delta cycle through %s", h.baseID)
		}
		r.resolving[h.baseID] = true
		o, err := r.get(h.baseID)
		delete(r.resolving, h.baseID)
		if errors.Is(err, errMissing) {
			return object{}, badObject("delta base %s is not in the session's repository", h.baseID)
		}
		if err != nil {
			return object{}, err
		}
		base = o
		break
	}
	for i := len(chain) - 1; i >= 0; i-- {
		delta, err := p.inflate(chain[i])
		if err != nil {
			return object{}, err
		}
		data, err := applyDelta(base.data, delta, r.lim.MaxObjectSize)
		if err != nil {
			return object{}, err
		}
		base = object{typ: base.typ, data: data}
		if i > 0 && p.cached < deltaBaseCache {
			// Bases are shared by many deltas: keep some.
			p.byOff[chain[i].off] = base
			p.cached += int64(len(data))
		}
	}
	return base, nil
}

const deltaBaseCache = 256 << 20
