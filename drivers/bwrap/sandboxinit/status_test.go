//go:build linux

package sandboxinit

import (
	"bytes"
	"encoding/binary"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
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

// TestStatusNotRun: a target that never ran crosses the status record
// with its stage and errno; a record whose flags or not-run fields are not
// what EncodeStatus writes is no record at all (the launcher then falls
// back to bwrap's status).
func TestStatusNotRun(t *testing.T) {
	want := Status{Wait: 125 << 8, Alone: true, NotRun: NotRunExec, Errno: syscall.ENOEXEC}
	rec := EncodeStatus(want)
	if got, ok := DecodeStatus(append([]byte{StartedTag}, rec...)); !ok || got != want {
		t.Fatalf("DecodeStatus: %+v %v, want %+v", got, ok, want)
	}
	for name, mut := range map[string]func(r []byte){
		"alone 2":             func(r []byte) { r[29] = 2 },
		"unknown stage":       func(r []byte) { r[30] = 3 },
		"stage without errno": func(r []byte) { binary.LittleEndian.PutUint32(r[31:], 0) },
		"errno without stage": func(r []byte) { r[30] = 0 },
	} {
		r := bytes.Clone(rec)
		mut(r)
		if got, ok := DecodeStatus(r); ok {
			t.Errorf("%s: accepted as %+v", name, got)
		}
	}
}

// TestNotRunRecord: the report of a child whose target never ran is
// exactly one record of a known stage and a non-zero errno; nothing (an
// exec closed the descriptor), a short record, a longer one or another
// tag is no report.
func TestNotRunRecord(t *testing.T) {
	rec := encodeNotRun(NotRunLookup, syscall.ENOENT)
	if stage, e, ok := decodeNotRun(rec); !ok || stage != NotRunLookup || e != syscall.ENOENT {
		t.Fatalf("decodeNotRun: %v %v %v", stage, e, ok)
	}
	for name, b := range map[string][]byte{
		"nothing":     nil,
		"short":       rec[:5],
		"two records": append(bytes.Clone(rec), rec...),
		"other tag":   append([]byte{StatusTag}, rec[1:]...),
		"stage none":  encodeNotRun(NotRunNone, syscall.ENOENT),
		"stage 9":     encodeNotRun(9, syscall.ENOENT),
		"no errno":    encodeNotRun(NotRunExec, 0),
	} {
		if stage, e, ok := decodeNotRun(b); ok {
			t.Errorf("%s: accepted as %v %v", name, stage, e)
		}
	}
}

// TestReadNotRun: the supervisor's read of a reaped child's report
// descriptor: a record the child wrote before it ended, nothing from one
// whose exec closed the descriptor, no report for none.
func TestReadNotRun(t *testing.T) {
	pipe := func(data []byte) int {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Write(p[1], data); err != nil {
			t.Fatal(err)
		}
		unix.Close(p[1])
		t.Cleanup(func() { unix.Close(p[0]) })
		return p[0]
	}
	if stage, e := readNotRun(pipe(encodeNotRun(NotRunExec, syscall.EACCES))); stage != NotRunExec || e != syscall.EACCES {
		t.Errorf("a record: %v %v", stage, e)
	}
	if stage, e := readNotRun(pipe([]byte{})); stage != NotRunNone || e != 0 {
		t.Errorf("nothing: %v %v", stage, e)
	}
	if stage, e := readNotRun(pipe([]byte("garbage!"))); stage != NotRunNone || e != 0 {
		t.Errorf("garbage: %v %v", stage, e)
	}
	if stage, e := readNotRun(-1); stage != NotRunNone || e != 0 {
		t.Errorf("no descriptor: %v %v", stage, e)
	}
}
