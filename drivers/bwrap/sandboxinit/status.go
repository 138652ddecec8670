//go:build linux

package sandboxinit

import (
	"encoding/binary"
	"syscall"
)

// The supervisor's status record (StatusTag), the last thing it writes on
// the lifeline: the target's raw wait status, then what the sandbox's
// processes used (the largest resident set, in KiB, and the user and
// system CPU time, in microseconds, summed over every process it reaped).
// All little-endian: a uint32, then three uint64; then one byte, Alone;
// then one byte, NotRun, and a uint32, Errno.
//
// Alone (1) says that the supervisor, PID 1 of the sandbox's PID
// namespace, killed and reaped every other process of the sandbox before
// writing the record, and (in a prepared sandbox) closed its own copies of
// the command's stdio: nothing of the command runs any more and its output
// is complete, so the launcher may answer before the namespaces are torn
// down, and may remove the placeholders mounted in them (no process that
// could create the entry once the mount is detached is left; see
// protect_linux.go). A supervisor that is not PID 1 cannot know that and
// writes 0.
//
// NotRun (NotRunLookup, NotRunExec) says that the target never ran: its
// PATH lookup found nothing to run, or the kernel refused its exec, with
// the errno in Errno; then Wait is meaningless. The lifeline is the only
// channel it can come from (the command never holds it), and a record
// whose bytes are not one of these values is no record: the launcher
// falls back to bwrap's status.
const StatusRecordLen = 1 + 4 + 3*8 + 1 + 1 + 4

// NotRunStage says where the start of a target failed.
type NotRunStage uint8

const (
	// NotRunNone: the target ran.
	NotRunNone NotRunStage = 0
	// NotRunLookup: no program was found to run (the PATH lookup, or the
	// named file, before any exec).
	NotRunLookup NotRunStage = 1
	// NotRunExec: the kernel refused the target's execve.
	NotRunExec NotRunStage = 2
)

// Status is a decoded status record.
type Status struct {
	Wait     uint32 // the target's wait status, as wait4 gave it
	MaxRSSKB int64  // the largest resident set of any reaped process
	UserUS   int64  // user CPU time of every reaped process
	SystemUS int64  // system CPU time of every reaped process
	Alone    bool   // nothing else of the sandbox runs (see StatusRecordLen)
	// NotRun and Errno: the target never ran, and why.
	NotRun NotRunStage
	Errno  syscall.Errno
}

// EncodeStatus is s as its record.
func EncodeStatus(s Status) []byte {
	b := make([]byte, StatusRecordLen)
	b[0] = StatusTag
	binary.LittleEndian.PutUint32(b[1:], s.Wait)
	binary.LittleEndian.PutUint64(b[5:], uint64(s.MaxRSSKB))
	binary.LittleEndian.PutUint64(b[13:], uint64(s.UserUS))
	binary.LittleEndian.PutUint64(b[21:], uint64(s.SystemUS))
	if s.Alone {
		b[29] = 1
	}
	b[30] = byte(s.NotRun)
	binary.LittleEndian.PutUint32(b[31:], uint32(s.Errno))
	return b
}

// DecodeStatus finds the status record in what sandbox-init wrote on the
// lifeline (the started byte, the hand-over's answer, the record), walking
// it record by record so that no byte inside another record is taken for
// a tag. ok is false while the record is missing or incomplete, and for a
// record whose flags are not what EncodeStatus writes.
func DecodeStatus(stream []byte) (s Status, ok bool) {
	for i := 0; i < len(stream); {
		switch stream[i] {
		case StatusTag:
			r := stream[i:]
			if len(r) < StatusRecordLen {
				return Status{}, false
			}
			s := Status{
				Wait:     binary.LittleEndian.Uint32(r[1:]),
				MaxRSSKB: int64(binary.LittleEndian.Uint64(r[5:])),
				UserUS:   int64(binary.LittleEndian.Uint64(r[13:])),
				SystemUS: int64(binary.LittleEndian.Uint64(r[21:])),
				Alone:    r[29] == 1,
				NotRun:   NotRunStage(r[30]),
				Errno:    syscall.Errno(binary.LittleEndian.Uint32(r[31:])),
			}
			if r[29] > 1 || s.NotRun > NotRunExec || (s.NotRun == NotRunNone) != (s.Errno == 0) {
				return Status{}, false
			}
			return s, true
		case ErrorTag:
			// A two-byte length and the message.
			if len(stream)-i < 3 {
				return Status{}, false
			}
			i += 3 + int(binary.LittleEndian.Uint16(stream[i+1:]))
		default:
			// StartedTag, ReadyTag: one byte each.
			i++
		}
	}
	return Status{}, false
}

// NotRunTag is the record a child of the supervisor writes on its report
// descriptor when its target never ran (InitSpec.ReportFD, and the socket
// of a forked child): the tag, the NotRunStage, the errno (uint32,
// little-endian). The descriptor is close-on-exec, so after a successful
// exec it reads as closed, and no code of the target's can write on it.
const NotRunTag = 'n'

// notRunRecordLen is a NotRunTag record's length.
const notRunRecordLen = 1 + 1 + 4

// encodeNotRun is the report of a target that never ran.
func encodeNotRun(stage NotRunStage, e syscall.Errno) []byte {
	b := []byte{NotRunTag, byte(stage), 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(b[2:], uint32(e))
	return b
}

// decodeNotRun reads a report: ok only for exactly one well-formed record.
func decodeNotRun(b []byte) (NotRunStage, syscall.Errno, bool) {
	if len(b) != notRunRecordLen || b[0] != NotRunTag {
		return NotRunNone, 0, false
	}
	stage, e := NotRunStage(b[1]), syscall.Errno(binary.LittleEndian.Uint32(b[2:]))
	if (stage != NotRunLookup && stage != NotRunExec) || e == 0 {
		return NotRunNone, 0, false
	}
	return stage, e, true
}

// ProgramErrno reports whether e, from a target's lookup or exec, is about
// the program (what it names, what it is, what it needs) rather than the
// machine (memory, descriptors, processes): the first are the command's to
// fix.
func ProgramErrno(e syscall.Errno) bool {
	switch e {
	case syscall.ENOENT, syscall.EACCES, syscall.ENOEXEC, syscall.E2BIG, syscall.ENOTDIR, syscall.EISDIR,
		syscall.ELOOP, syscall.ENAMETOOLONG, syscall.ETXTBSY, syscall.ELIBBAD:
		return true
	}
	return false
}
