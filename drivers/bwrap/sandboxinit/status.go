//go:build linux

package sandboxinit

import "encoding/binary"

// The supervisor's status record (StatusTag), the last thing it writes on
// the lifeline: the target's raw wait status, then what the sandbox's
// processes used (the largest resident set, in KiB, and the user and
// system CPU time, in microseconds, summed over every process it reaped).
// All little-endian: a uint32, then three uint64; then one byte, Alone.
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
const StatusRecordLen = 1 + 4 + 3*8 + 1

// Status is a decoded status record.
type Status struct {
	Wait     uint32 // the target's wait status, as wait4 gave it
	MaxRSSKB int64  // the largest resident set of any reaped process
	UserUS   int64  // user CPU time of every reaped process
	SystemUS int64  // system CPU time of every reaped process
	Alone    bool   // nothing else of the sandbox runs (see StatusRecordLen)
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
	return b
}

// DecodeStatus finds the status record in what sandbox-init wrote on the
// lifeline (the started byte, the hand-over's answer, the record), walking
// it record by record so that no byte inside another record is taken for
// a tag. ok is false while the record is missing or incomplete.
func DecodeStatus(stream []byte) (s Status, ok bool) {
	for i := 0; i < len(stream); {
		switch stream[i] {
		case StatusTag:
			r := stream[i:]
			if len(r) < StatusRecordLen {
				return Status{}, false
			}
			return Status{
				Wait:     binary.LittleEndian.Uint32(r[1:]),
				MaxRSSKB: int64(binary.LittleEndian.Uint64(r[5:])),
				UserUS:   int64(binary.LittleEndian.Uint64(r[13:])),
				SystemUS: int64(binary.LittleEndian.Uint64(r[21:])),
				Alone:    r[29] == 1,
			}, true
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
