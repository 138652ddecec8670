package gitimport

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
)

// Everything here reads bytes the sandboxed command wrote. Each object is
// checked against its name (the SHA-1 of "type size\0content"), so a file
// that lies about what it holds is refused, and every size is bounded
// before memory is spent on it.

type oid [20]byte

func (o oid) String() string { return hex.EncodeToString(o[:]) }

func parseOID(s string) (oid, bool) {
	var o oid
	if len(s) != 40 {
		return o, false
	}
	if _, err := hex.Decode(o[:], []byte(s)); err != nil {
		return o, false
	}
	return o, true
}

// isHex reports whether s is n lowercase or uppercase hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

type objType int

const (
	objCommit objType = 1
	objTree   objType = 2
	objBlob   objType = 3
	objTag    objType = 4
	objOfs    objType = 6
	objRef    objType = 7
)

func (t objType) String() string {
	switch t {
	case objCommit:
		return "commit"
	case objTree:
		return "tree"
	case objBlob:
		return "blob"
	case objTag:
		return "tag"
	}
	return "type" + strconv.Itoa(int(t))
}

func typeFromName(s string) (objType, bool) {
	switch s {
	case "commit":
		return objCommit, true
	case "tree":
		return objTree, true
	case "blob":
		return objBlob, true
	case "tag":
		return objTag, true
	}
	return 0, false
}

// object is one object read and verified.
type object struct {
	typ  objType
	data []byte
}

func hashObject(t objType, data []byte) oid {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", t, len(data))
	h.Write(data)
	var o oid
	copy(o[:], h.Sum(nil))
	return o
}

// errObject is an object the session wrote that cannot be imported; its
// text is the refusal's detail.
type errObject struct{ msg string }

func (e *errObject) Error() string { return e.msg }

func badObject(format string, a ...any) error { return &errObject{fmt.Sprintf(format, a...)} }

// inflateBounded inflates a zlib stream of at most max bytes; a stream
// that inflates to more is refused before more than max+1 bytes are held.
func inflateBounded(r io.Reader, max int64) ([]byte, error) {
	z, err := zlib.NewReader(r)
	if err != nil {
		return nil, badObject("not a zlib stream: %v", err)
	}
	defer z.Close()
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(z, max+1))
	if err != nil {
		return nil, badObject("corrupt zlib stream: %v", err)
	}
	if n > max {
		return nil, badObject("inflates to more than %d bytes", max)
	}
	return buf.Bytes(), nil
}

// parseLoose reads a loose object file's bytes: zlib of "type size\0"
// followed by exactly size bytes, whose SHA-1 must be want.
func parseLoose(compressed []byte, want oid, max int64) (object, error) {
	raw, err := inflateBounded(bytes.NewReader(compressed), max+64)
	if err != nil {
		return object{}, err
	}
	nul := bytes.IndexByte(raw, 0)
	if nul < 0 || nul > 32 {
		return object{}, badObject("no object header")
	}
	typName, sizeStr, ok := bytes.Cut(raw[:nul], []byte{' '})
	if !ok {
		return object{}, badObject("malformed object header")
	}
	t, ok := typeFromName(string(typName))
	if !ok {
		return object{}, badObject("unknown object type %q", typName)
	}
	size, err := strconv.ParseInt(string(sizeStr), 10, 64)
	if err != nil || size < 0 || size > max {
		return object{}, badObject("object size %q out of bounds (at most %d)", sizeStr, max)
	}
	data := raw[nul+1:]
	if int64(len(data)) != size {
		return object{}, badObject("object header says %d bytes, holds %d", size, len(data))
	}
	if got := hashObject(t, data); got != want {
		return object{}, badObject("content hashes to %s, not to its name", got)
	}
	return object{typ: t, data: data}, nil
}

// packIndex maps names to offsets, read from a v2 .idx the session wrote.
// The index is not trusted: every object read through it is hashed and
// compared to the name it was looked up by.
func parsePackIndex(b []byte, packSize int64) (map[oid]int64, error) {
	if len(b) < 8+1024+40 || !bytes.Equal(b[:4], []byte{0xff, 't', 'O', 'c'}) || binary.BigEndian.Uint32(b[4:8]) != 2 {
		return nil, badObject("not a version 2 pack index")
	}
	n := int64(binary.BigEndian.Uint32(b[8+255*4:]))
	base := int64(8 + 1024)
	fixed := base + n*(20+4+4) + 40
	if n > int64(len(b)) || fixed > int64(len(b)) || (int64(len(b))-fixed)%8 != 0 {
		return nil, badObject("pack index sizes do not add up")
	}
	nLarge := (int64(len(b)) - fixed) / 8
	names := b[base : base+20*n]
	offs := b[base+24*n : base+28*n]
	large := b[base+28*n : base+28*n+8*nLarge]
	idx := make(map[oid]int64, n)
	for i := int64(0); i < n; i++ {
		var o oid
		copy(o[:], names[20*i:])
		off := int64(binary.BigEndian.Uint32(offs[4*i:]))
		if off&0x80000000 != 0 {
			j := off &^ 0x80000000
			if j >= nLarge {
				return nil, badObject("pack index large offset out of range")
			}
			u := binary.BigEndian.Uint64(large[8*j:])
			if u > uint64(packSize) {
				return nil, badObject("pack index offset out of range")
			}
			off = int64(u)
		}
		if off < 12 || off >= packSize-20 {
			return nil, badObject("pack index offset out of range")
		}
		idx[o] = off
	}
	return idx, nil
}

// pack is one pack file the session wrote, read at the offsets its index
// gives.
type pack struct {
	name string
	r    io.ReaderAt
	size int64
	idx  map[oid]int64

	byOff  map[int64]object // resolved delta bases, by entry offset
	cached int64
}

func checkPackHeader(r io.ReaderAt, size int64) error {
	var h [12]byte
	if size < 32 {
		return badObject("pack too short")
	}
	if _, err := r.ReadAt(h[:], 0); err != nil {
		return badObject("pack unreadable: %v", err)
	}
	if !bytes.Equal(h[:4], []byte("PACK")) {
		return badObject("not a pack")
	}
	if v := binary.BigEndian.Uint32(h[4:8]); v != 2 && v != 3 {
		return badObject("pack version %d not supported", v)
	}
	return nil
}

// entryHeader is a pack entry's header read at an offset.
type entryHeader struct {
	off     int64
	typ     objType
	size    int64
	baseOff int64 // ofs-delta
	baseID  oid   // ref-delta
	dataOff int64
}

func (p *pack) header(off int64, max int64) (entryHeader, error) {
	h := entryHeader{off: off}
	br := bufio.NewReaderSize(io.NewSectionReader(p.r, off, p.size-off), 64)
	n := int64(0)
	next := func() (byte, error) {
		c, err := br.ReadByte()
		if err != nil {
			return 0, badObject("pack entry at %d truncated", off)
		}
		n++
		return c, nil
	}
	c, err := next()
	if err != nil {
		return h, err
	}
	h.typ = objType((c >> 4) & 7)
	h.size = int64(c & 15)
	shift := uint(4)
	for c&0x80 != 0 {
		if c, err = next(); err != nil {
			return h, err
		}
		if shift > 56 {
			return h, badObject("pack entry size overflows")
		}
		h.size |= int64(c&0x7f) << shift
		shift += 7
	}
	if h.size > max || h.size < 0 {
		return h, badObject("pack entry of %d bytes is over the limit of %d", h.size, max)
	}
	switch h.typ {
	case objCommit, objTree, objBlob, objTag:
	case objOfs:
		if c, err = next(); err != nil {
			return h, err
		}
		rel := int64(c & 0x7f)
		for c&0x80 != 0 {
			if c, err = next(); err != nil {
				return h, err
			}
			if rel > 1<<48 {
				return h, badObject("delta base offset overflows")
			}
			rel = ((rel + 1) << 7) | int64(c&0x7f)
		}
		h.baseOff = off - rel
		if rel <= 0 || h.baseOff < 12 {
			return h, badObject("delta base offset out of range")
		}
	case objRef:
		for i := range h.baseID {
			if h.baseID[i], err = next(); err != nil {
				return h, err
			}
		}
	default:
		return h, badObject("pack entry of unknown type %d", h.typ)
	}
	h.dataOff = off + n
	return h, nil
}

func (p *pack) inflate(h entryHeader) ([]byte, error) {
	data, err := inflateBounded(io.NewSectionReader(p.r, h.dataOff, p.size-h.dataOff), h.size)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != h.size {
		return nil, badObject("pack entry inflates to %d bytes, its header says %d", len(data), h.size)
	}
	return data, nil
}

// varint reads a delta's size (little-endian groups of 7 bits).
func deltaVarint(d []byte) (int64, []byte, error) {
	var v int64
	for shift := uint(0); ; shift += 7 {
		if len(d) == 0 || shift > 56 {
			return 0, nil, badObject("malformed delta")
		}
		c := d[0]
		d = d[1:]
		v |= int64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, d, nil
		}
	}
}

// applyDelta builds an object from its base and a delta, every copy
// checked against the base's bounds and the result against the size the
// delta declares (itself bounded by max).
func applyDelta(base, delta []byte, max int64) ([]byte, error) {
	srcSize, d, err := deltaVarint(delta)
	if err != nil {
		return nil, err
	}
	dstSize, d, err := deltaVarint(d)
	if err != nil {
		return nil, err
	}
	if srcSize != int64(len(base)) {
		return nil, badObject("delta base is %d bytes, the delta expects %d", len(base), srcSize)
	}
	if dstSize > max {
		return nil, badObject("delta result of %d bytes is over the limit of %d", dstSize, max)
	}
	out := make([]byte, 0, dstSize)
	for len(d) > 0 {
		op := d[0]
		d = d[1:]
		switch {
		case op&0x80 != 0:
			var off, size int64
			for i := uint(0); i < 4; i++ {
				if op&(1<<i) != 0 {
					if len(d) == 0 {
						return nil, badObject("malformed delta")
					}
					off |= int64(d[0]) << (8 * i)
					d = d[1:]
				}
			}
			for i := uint(0); i < 3; i++ {
				if op&(0x10<<i) != 0 {
					if len(d) == 0 {
						return nil, badObject("malformed delta")
					}
					size |= int64(d[0]) << (8 * i)
					d = d[1:]
				}
			}
			if size == 0 {
				size = 0x10000
			}
			if off+size > int64(len(base)) || int64(len(out))+size > dstSize {
				return nil, badObject("delta copies out of bounds")
			}
			out = append(out, base[off:off+size]...)
		case op != 0:
			n := int64(op)
			if n > int64(len(d)) || int64(len(out))+n > dstSize {
				return nil, badObject("delta inserts out of bounds")
			}
			out = append(out, d[:n]...)
			d = d[n:]
		default:
			return nil, badObject("malformed delta (reserved opcode 0)")
		}
	}
	if int64(len(out)) != dstSize {
		return nil, badObject("delta result is %d bytes, it declares %d", len(out), dstSize)
	}
	return out, nil
}

// maxDeltaChain bounds a chain of deltas (git's deepest is 4095).
const maxDeltaChain = 5000

// packWriter streams objects as a version 2 pack, whole (no deltas), for
// the host's index-pack.
type packWriter struct {
	w     io.Writer
	h     hash.Hash
	mw    io.Writer
	zw    *zlib.Writer
	count int
}

func newPackWriter(w io.Writer, count int) (*packWriter, error) {
	p := &packWriter{w: w, h: sha1.New(), count: count}
	p.mw = io.MultiWriter(w, p.h)
	var hdr [12]byte
	copy(hdr[:], "PACK")
	binary.BigEndian.PutUint32(hdr[4:], 2)
	binary.BigEndian.PutUint32(hdr[8:], uint32(count))
	if _, err := p.mw.Write(hdr[:]); err != nil {
		return nil, err
	}
	zw, _ := zlib.NewWriterLevel(p.mw, zlib.BestSpeed)
	p.zw = zw
	return p, nil
}

func (p *packWriter) add(o object) error {
	var hdr [16]byte
	size := uint64(len(o.data))
	c := byte(o.typ)<<4 | byte(size&15)
	size >>= 4
	n := 0
	for size != 0 {
		hdr[n] = c | 0x80
		n++
		c = byte(size & 0x7f)
		size >>= 7
	}
	hdr[n] = c
	n++
	if _, err := p.mw.Write(hdr[:n]); err != nil {
		return err
	}
	p.zw.Reset(p.mw)
	if _, err := p.zw.Write(o.data); err != nil {
		return err
	}
	return p.zw.Close()
}

func (p *packWriter) finish() error {
	_, err := p.w.Write(p.h.Sum(nil))
	return err
}

// Parsed objects: only what the walk needs.

// treeEntry is one entry of a tree.
type treeEntry struct {
	mode string
	name string
	id   oid
}

func parseTree(data []byte) ([]treeEntry, error) {
	var out []treeEntry
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		if sp <= 0 || sp > 7 {
			return nil, badObject("malformed tree entry mode")
		}
		mode := string(data[:sp])
		data = data[sp+1:]
		nul := bytes.IndexByte(data, 0)
		if nul <= 0 || len(data) < nul+1+20 {
			return nil, badObject("malformed tree entry")
		}
		e := treeEntry{mode: mode, name: string(data[:nul])}
		copy(e.id[:], data[nul+1:nul+21])
		data = data[nul+21:]
		out = append(out, e)
	}
	return out, nil
}

// commitLinks returns a commit's tree and parents.
func commitLinks(data []byte) (tree oid, parents []oid, err error) {
	lines := bytes.Split(data, []byte{'\n'})
	if len(lines) == 0 {
		return tree, nil, badObject("empty commit")
	}
	t, ok := bytes.CutPrefix(lines[0], []byte("tree "))
	if !ok {
		return tree, nil, badObject("commit without a tree")
	}
	if tree, ok = parseOID(string(t)); !ok {
		return tree, nil, badObject("commit with a malformed tree id")
	}
	for _, l := range lines[1:] {
		p, ok := bytes.CutPrefix(l, []byte("parent "))
		if !ok {
			break
		}
		id, ok := parseOID(string(p))
		if !ok {
			return tree, nil, badObject("commit with a malformed parent id")
		}
		parents = append(parents, id)
	}
	return tree, parents, nil
}

// tagTarget returns what a tag object names.
func tagTarget(data []byte) (oid, objType, error) {
	lines := bytes.SplitN(data, []byte{'\n'}, 3)
	if len(lines) < 3 {
		return oid{}, 0, badObject("malformed tag")
	}
	o, ok1 := bytes.CutPrefix(lines[0], []byte("object "))
	t, ok2 := bytes.CutPrefix(lines[1], []byte("type "))
	id, ok3 := parseOID(string(o))
	typ, ok4 := typeFromName(string(t))
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return oid{}, 0, badObject("malformed tag")
	}
	return id, typ, nil
}

var errMissing = errors.New("missing")
