//go:build linux

package sandboxinit

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// handoverFDs is how many descriptors a hand-over carries: stdin, stdout,
// stderr and the command record's memfd.
const handoverFDs = 4

// awaitHandover blocks until the launcher sends the hand-over record on the
// lifeline fd and returns it with its descriptors. A launcher gone first
// is errLauncherGone.
func awaitHandover(fd int) (Handover, []int, error) {
	var fds []int
	fail := func(err error) (Handover, []int, error) {
		for _, f := range fds {
			unix.Close(f)
		}
		return Handover{}, nil, err
	}
	hdr := make([]byte, 0, 5)
	oob := make([]byte, unix.CmsgSpace(4*handoverFDs))
	for len(hdr) < 5 {
		buf := make([]byte, 5-len(hdr))
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fail(fmt.Errorf("lifeline fd %d: %w", fd, err))
		}
		if oobn > 0 {
			got, err := parseRights(oob[:oobn])
			fds = append(fds, got...)
			if err != nil {
				return fail(err)
			}
		}
		if n == 0 {
			return fail(errLauncherGone)
		}
		hdr = append(hdr, buf[:n]...)
	}
	if hdr[0] != HandoverTag {
		return fail(fmt.Errorf("lifeline: record %q where the hand-over was expected", hdr[0]))
	}
	size := binary.LittleEndian.Uint32(hdr[1:])
	if size == 0 || size > maxHandoverBytes {
		return fail(fmt.Errorf("lifeline: hand-over of %d bytes", size))
	}
	if len(fds) != handoverFDs {
		return fail(fmt.Errorf("lifeline: hand-over with %d descriptors (want %d)", len(fds), handoverFDs))
	}
	body := make([]byte, size)
	for off := 0; off < len(body); {
		n, err := unix.Read(fd, body[off:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fail(fmt.Errorf("lifeline fd %d: %w", fd, err))
		}
		if n == 0 {
			return fail(errLauncherGone)
		}
		off += n
	}
	var h Handover
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return fail(&InitSpecError{"", "hand-over: " + err.Error()})
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fail(&InitSpecError{"", "hand-over: trailing data"})
	}
	if err := h.Validate(); err != nil {
		return fail(err)
	}
	return h, fds, nil
}

// parseRights returns the descriptors of SCM_RIGHTS messages in oob.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("lifeline: control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, fmt.Errorf("lifeline: control message: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// applyHandover makes h's mounts, enters its directory, drops the
// capabilities the mounts needed, on every thread, and puts fds in place
// (0, 1, 2 and commandFD). Any error leaves the sandbox unusable: the caller
// reports it and ends. The descriptors come last: until then this
// process's stderr is the sandbox's setup stream, so a hand-over that
// fails says so there, never in the output of the command that the
// launcher then runs in a sandbox built for it.
//
// The bounding and ambient sets were emptied while the sandbox waited
// (dropBoundingAllThreads); only what the threads hold is left to clear.
func applyHandover(h Handover, fds []int, commandFD int) error {
	for _, m := range h.Mounts {
		if err := handoverMount(m); err != nil {
			return err
		}
	}
	if err := unix.Chdir(h.Cwd); err != nil {
		return fmt.Errorf("chdir %s: %w", h.Cwd, err)
	}
	if err := clearCapabilitiesAllThreads(); err != nil {
		return err
	}
	for i, to := range []int{0, 1, 2, commandFD} {
		if err := unix.Dup3(fds[i], to, 0); err != nil {
			return fmt.Errorf("hand-over descriptor %d: %w", to, err)
		}
		unix.Close(fds[i])
	}
	return nil
}

// handoverMount makes one mount of a hand-over: m's tree (protectedTree)
// attached over the entry itself.
func handoverMount(m HandoverMount) error {
	tree, target, err := protectedTree(m)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	defer unix.Close(tree)
	if err := unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("protected %s: move_mount: %w", m.Path, err)
	}
	return nil
}

// protectedTree is m's mount as a detached tree with bwrap's attributes,
// and the entry it is for (O_PATH), both for the caller to close. The path
// is resolved with no symlink in any component, and the inode found must
// be the one the launcher saw: a protected entry swapped since (for a
// symlink to elsewhere, or another directory) fails the hand-over rather
// than being mounted over something else or left unprotected.
func protectedTree(m HandoverMount) (tree, target int, err error) {
	target, err = unix.Openat2(unix.AT_FDCWD, m.Path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, -1, fmt.Errorf("protected %s: %w", m.Path, err)
	}
	fail := func(err error) (int, int, error) {
		unix.Close(target)
		return -1, -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(target, &st); err != nil {
		return fail(fmt.Errorf("protected %s: %w", m.Path, err))
	}
	if st.Dev != m.Dev || st.Ino != m.Ino {
		return fail(fmt.Errorf("protected %s changed since the launcher looked (inode %d:%d, was %d:%d)", m.Path, st.Dev, st.Ino, m.Dev, m.Ino))
	}
	src, srcPath, flags := target, "", uint(unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	// bwrap's binds: nosuid and nodev always, read-only but for anchors.
	attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	switch m.Kind {
	case MountReadOnly:
		attr |= unix.MOUNT_ATTR_RDONLY
	case MountDevNull:
		src, srcPath, flags = unix.AT_FDCWD, "/dev/null", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC
		attr |= unix.MOUNT_ATTR_RDONLY
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 0 {
			return fail(fmt.Errorf("placeholder %s is not an empty file", m.Path))
		}
	}
	tree, err = unix.OpenTree(src, srcPath, flags)
	if err != nil {
		return fail(fmt.Errorf("protected %s: open_tree: %w", m.Path, err))
	}
	// Set only: flags a mount below already carries (a read-only grant
	// under an anchor) stay as they are.
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attr}); err != nil {
		unix.Close(tree)
		return fail(fmt.Errorf("protected %s: mount_setattr: %w", m.Path, err))
	}
	return tree, target, nil
}

// The capabilities of a prepared sandbox: it kept CAP_SYS_ADMIN and
// CAP_SETPCAP (in its own user namespace) for the hand-over's mounts, and
// a Go process has threads the exec'ing one does not control, so every
// thread drops them. Where the runtime cannot run a system call on every
// thread (a cgo build) that fails, and the command gets a sandbox built
// for it.

// allThreads runs one system call on every thread of the process.
func allThreads(what string, trap, a1, a2, a3 uintptr) error {
	if _, _, e := syscall.AllThreadsSyscall(trap, a1, a2, a3); e != 0 {
		return fmt.Errorf("%s on every thread: %w", what, e)
	}
	return nil
}

// dropBoundingAllThreads empties the bounding, ambient and inheritable
// sets of every thread and locks the securebits that keep uid 0 from
// gaining capabilities at an exec: nothing can be gained at an exec any
// more (for root, exec gives inheritable | bounding | ambient; with no
// root rule, nothing). What the threads hold in their effective and
// permitted sets (the mounts need CAP_SYS_ADMIN) stays until
// clearCapabilitiesAllThreads, so a prepared sandbox calls this while it
// waits, off the command's path (each all-threads call stops the world),
// and before it forks the child that becomes the command.
//
// A step whose result already holds is skipped: each all-threads call
// waits until every thread has run it, and on a loaded machine that wait
// (sched_yield in a loop) was most of a session command's sandbox-init
// CPU. Every thread has the same sets (they all came from the exec, and
// the runtime's threads copy the creating thread's), so what this thread
// reads is what every thread holds. A session supervisor hands its
// children a bounding set emptied and the securebits locked already
// (passCapabilitiesAmbient), leaving one call here: the inheritable set,
// whose capset also empties the ambient set (the kernel keeps ambient
// within permitted and inheritable).
func dropBoundingAllThreads() error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	bits := secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLock |
		secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientLocked
	if cur, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0); err != nil || cur != bits {
		if err := allThreads("PR_SET_SECUREBITS", unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, uintptr(bits), 0); err != nil {
			return err
		}
	}
	// The inheritable set: what the threads hold stays.
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := new([2]unix.CapUserData)
	if err := unix.Capget(hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Inheritable|data[1].Inheritable != 0 {
		data[0].Inheritable, data[1].Inheritable = 0, 0
		err = allThreads("capset", unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
		runtime.KeepAlive(hdr)
		runtime.KeepAlive(data)
		if err != nil {
			return err
		}
	}
	// Only what the bounding set holds (bwrap left the two the hand-over
	// needs; a session supervisor's child finds none).
	ambient := false
	for c := 0; c <= last; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if err != nil {
			return fmt.Errorf("PR_CAPBSET_READ %d: %w", c, err)
		}
		if in != 0 {
			if err := allThreads("PR_CAPBSET_DROP", unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); err != nil {
				return err
			}
		}
		if set, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, uintptr(c), 0, 0); err != nil || set != 0 {
			ambient = true
		}
	}
	if !ambient {
		return nil
	}
	return allThreads("PR_CAP_AMBIENT_CLEAR_ALL", unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0)
}

// clearCapabilitiesAllThreads empties the effective, permitted and
// inheritable sets of every thread and checks that none is left.
func clearCapabilitiesAllThreads() error {
	// On the heap (new), so the addresses stay valid while every thread
	// reads them.
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := new([2]unix.CapUserData)
	err := allThreads("capset", unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(hdr)
	runtime.KeepAlive(data)
	if err != nil {
		return err
	}
	return noneHeld("capabilities left after the drop")
}

// replyHandover answers the hand-over on the lifeline: ReadyTag, or
// ErrorTag with a two-byte length and the message.
func replyHandover(fd int, herr error) error {
	rec := []byte{ReadyTag}
	if herr != nil {
		msg := herr.Error()
		if len(msg) > maxHandoverError {
			msg = msg[:maxHandoverError]
		}
		rec = binary.LittleEndian.AppendUint16([]byte{ErrorTag}, uint16(len(msg)))
		rec = append(rec, msg...)
	}
	if err := unix.Sendto(fd, rec, unix.MSG_NOSIGNAL, nil); err != nil {
		return fmt.Errorf("lifeline fd %d: %w", fd, err)
	}
	return nil
}
