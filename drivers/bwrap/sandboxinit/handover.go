package sandboxinit

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
)

// Prepared sandboxes (InitSpec.Prepared).
//
// A prepared sandbox is built before its command is known: bwrap has made
// the namespaces and every mount that depends on the profile alone, the
// sandbox is in its cgroup (and the session's network namespace), and
// sandbox-init runs as its PID 1, waiting on the lifeline. Nothing of the
// command's has run yet, so there is nothing to confine yet: the waiting
// process is the launcher's own code, reachable only through the lifeline,
// which nothing else holds.
//
// The hand-over is one record on the lifeline (HandoverTag, a four-byte
// little-endian length, a JSON Handover) carrying, as SCM_RIGHTS, the
// command's stdin, stdout and stderr and the sealed memfd of its command
// record (its argv and environment: command.go). sandbox-init then makes
// the mounts that depend on the workspace as it is now (the protected
// entries the launcher found just before: read-only binds of the existing
// ones, /dev/null on the placeholders of missing ones, read-write
// anchors), each resolved without following any symlink and checked
// against the device and inode the launcher saw, so a tree changed in
// between fails the hand-over instead of mounting elsewhere. It changes to
// the command's directory, drops the capabilities it kept for those mounts
// (CAP_SYS_ADMIN, CAP_SETPCAP: bwrap --cap-add), takes the descriptors as
// its 0, 1, 2 and the command record's and answers ReadyTag. From there on
// it is exactly the sandbox-init of a sandbox built for the command:
// no_new_privs, Landlock, rlimits, seccomp, the supervised fork. A failure
// before ReadyTag is answered with ErrorTag and a message, and the sandbox
// ends without running anything; the launcher then builds one for the
// command the ordinary way.
//
// A prepared sandbox serves one command: sandbox-init reads one record and
// becomes that command's supervisor. It is never handed a second.

// Lifeline records of the hand-over.
const (
	HandoverTag = 'h'
	ReadyTag    = 'r'
	ErrorTag    = 'e'
)

// maxHandoverBytes bounds one hand-over record.
const maxHandoverBytes = 4 << 20

// maxHandoverError bounds an ErrorTag message.
const maxHandoverError = 1024

// Mount kinds of a hand-over.
const (
	// MountReadOnly binds the entry read-only onto itself (an existing
	// protected entry).
	MountReadOnly = "ro"
	// MountReadWrite binds the directory read-write onto itself (an
	// anchor: see the bwrap driver's protect.go).
	MountReadWrite = "rw"
	// MountDevNull binds /dev/null, read-only and nodev, onto the
	// placeholder of a missing protected entry.
	MountDevNull = "null"
)

// HandoverMount is one mount sandbox-init makes at the hand-over. Dev and
// Ino are what the launcher found at Path (stat's st_dev and st_ino, the
// same inside: binds keep them).
type HandoverMount struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
}

// Handover is what a prepared sandbox is given beside the command's record
// (whose argv[0] is looked up in its environment's PATH).
type Handover struct {
	// Cwd is the command's directory (the launcher checked it).
	Cwd string `json:"cwd"`
	// Mounts are made in order (parents first).
	Mounts []HandoverMount `json:"mounts,omitempty"`
}

// Validate checks what sandbox-init relies on.
func (h *Handover) Validate() error {
	if err := validPaths("cwd", []string{h.Cwd}); err != nil {
		return err
	}
	for _, m := range h.Mounts {
		if err := validPaths("mounts", []string{m.Path}); err != nil {
			return err
		}
		if m.Path == "/" || filepath.Dir(m.Path) == "/" {
			return &InitSpecError{"mounts", fmt.Sprintf("%q is not below a workspace", m.Path)}
		}
		switch m.Kind {
		case MountReadOnly, MountReadWrite, MountDevNull:
		default:
			return &InitSpecError{"mounts", fmt.Sprintf("kind %q", m.Kind)}
		}
	}
	return nil
}

// EncodeHandover renders h as its lifeline record (the descriptors travel
// beside it).
func EncodeHandover(h Handover) ([]byte, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	js, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if len(js) > maxHandoverBytes {
		return nil, &InitSpecError{"", fmt.Sprintf("hand-over of %d bytes (at most %d)", len(js), maxHandoverBytes)}
	}
	rec := make([]byte, 5, 5+len(js))
	rec[0] = HandoverTag
	binary.LittleEndian.PutUint32(rec[1:], uint32(len(js)))
	return append(rec, js...), nil
}
