//go:build linux

package sandboxinit

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestDecodeStatus(t *testing.T) {
	// Values whose bytes hold the status tag itself: a scan for the tag
	// instead of a walk over the records would stop inside them.
	want := Status{Wait: 'x' | 'x'<<8, MaxRSSKB: 0x7878, UserUS: 'x', SystemUS: 1 << 40, Alone: true}
	rec := EncodeStatus(want)
	if len(rec) != StatusRecordLen || rec[0] != StatusTag {
		t.Fatalf("record %q", rec)
	}
	errRec := []byte{ErrorTag, 0, 0}
	binary.LittleEndian.PutUint16(errRec[1:], 3)
	errRec = append(errRec, "x!x"...)
	cases := []struct {
		name   string
		stream []byte
		ok     bool
	}{
		{"record alone", rec, true},
		{"after the started byte", append([]byte{StartedTag}, rec...), true},
		{"after the hand-over's answer", append([]byte{StartedTag, ReadyTag}, rec...), true},
		{"after an error record holding the tag", append(errRec, rec...), true},
		{"incomplete", append([]byte{StartedTag}, rec[:StatusRecordLen-1]...), false},
		{"none", []byte{StartedTag, ReadyTag}, false},
		{"empty", nil, false},
		{"an error record cut short", errRec[:4], false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := DecodeStatus(c.stream)
			if ok != c.ok || (ok && got != want) {
				t.Fatalf("DecodeStatus(%q) = %+v, %v; want %+v, %v", c.stream, got, ok, want, c.ok)
			}
		})
	}
	if !bytes.Equal(EncodeStatus(want), rec) {
		t.Fatal("not deterministic")
	}
}
