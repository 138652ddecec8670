package gitimport

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"testing"
)

// TestApplyDeltaBounds: a delta that copies outside its base, inserts
// past what it declares, or declares more than the limit is refused,
// not followed.
func TestApplyDeltaBounds(t *testing.T) {
	base := []byte("0123456789")
	for _, tc := range []struct {
		name  string
		delta []byte
		ok    bool
	}{
		{"copy all", []byte{10, 10, 0x80 | 0x10, 10}, true},
		{"insert", []byte{10, 3, 3, 'a', 'b', 'c'}, true},
		{"copy past the base", []byte{10, 20, 0x80 | 0x01 | 0x10, 5, 10}, false},
		{"wrong base size", []byte{11, 10, 0x80 | 0x10, 10}, false},
		{"insert past the end", []byte{10, 2, 3, 'a', 'b', 'c'}, false},
		{"insert truncated", []byte{10, 3, 5, 'a'}, false},
		{"reserved opcode", []byte{10, 1, 0}, false},
		{"result too large", []byte{10, 0xff, 0xff, 0xff, 0x7f}, false},
		{"short result", []byte{10, 11, 0x80 | 0x10, 10}, false},
	} {
		_, err := applyDelta(base, tc.delta, 1<<20)
		var eo *errObject
		if tc.ok != (err == nil) || (err != nil && !errors.As(err, &eo)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// TestParsePackIndexBounds: an index whose sizes or offsets do not fit
// the pack is refused.
func TestParsePackIndexBounds(t *testing.T) {
	mk := func(n int, off uint32) []byte {
		var b bytes.Buffer
		b.Write([]byte{0xff, 't', 'O', 'c', 0, 0, 0, 2})
		for i := 0; i < 256; i++ {
			binary.Write(&b, binary.BigEndian, uint32(n))
		}
		for i := 0; i < n; i++ {
			b.Write(bytes.Repeat([]byte{byte(i + 1)}, 20))
		}
		b.Write(make([]byte, 4*n))
		for i := 0; i < n; i++ {
			binary.Write(&b, binary.BigEndian, off)
		}
		b.Write(make([]byte, 40))
		return b.Bytes()
	}
	if idx, err := parsePackIndex(mk(1, 12), 100); err != nil || len(idx) != 1 {
		t.Fatalf("sound index: %v %v", idx, err)
	}
	for name, b := range map[string][]byte{
		"offset past the pack":   mk(1, 1000),
		"offset in the header":   mk(1, 3),
		"large offset missing":   mk(1, 0x80000005),
		"count larger than file": mk(1, 12)[:8+1024+10],
		"not an index":           []byte("garbage"),
	} {
		if _, err := parsePackIndex(b, 100); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestParseLooseBounds: a loose object inflating past the limit is
// refused having held at most the limit.
func TestParseLooseBounds(t *testing.T) {
	data := append([]byte("blob 100000\x00"), make([]byte, 100000)...)
	var id oid
	_, err := parseLoose(zlibBytes(data), id, 1000)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("more than")) {
		t.Fatalf("err %v", err)
	}
	blob := []byte("hello\n")
	good := append([]byte("blob 6\x00"), blob...)
	if _, err := parseLoose(zlibBytes(good), hashObject(objBlob, blob), 1000); err != nil {
		t.Fatalf("sound object refused: %v", err)
	}
}

// zlibBytes compresses b.
func zlibBytes(b []byte) []byte {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}
