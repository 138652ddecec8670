//go:build linux

package sandboxinit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The session supervisor's fork path: a command without a sandbox-init of
// its own, served by the supervisor (session_linux.go) through a reaper
// (sessionfork_linux.go).
//
// For each spawn record the supervisor clones, on its locked thread, the
// command's reaper in a new PID and mount namespace, and a goroutine of
// the supervisor speaks the command's side of the lifeline exactly as a
// SessionChild sandbox-init does, so the launcher cannot tell the two
// apart:
//   - the started byte is written by the reaper itself, so the kernel's
//     credentials on it name the reaper: the process the launcher moves
//     into the command's cgroup (and watches by a pidfd) before it sends
//     the go-ahead; the reaper starts nothing before that;
//   - the go-ahead is read by the supervisor, which answers PreparedTag;
//   - the hand-over record (the directory, the protected entries' mounts,
//     the stdio and the command record's memfd) is read by the supervisor.
//     It looks the program up (in the session's mount namespace: a
//     protected entry's mount binds the same tree read-only, or covers a
//     placeholder nobody may execute), lays the command out in a mapping
//     shared with the reaper, and clones each protected entry's tree
//     (open_tree, its attributes set as bwrap sets them) after checking
//     the entry's inode. The go-ahead to the reaper carries the stdio and
//     the trees; the reaper opens each target with no symlink followed,
//     checks its inode again in its own namespace, attaches the tree
//     (move_mount), puts the stdio at 0-2, clones the command and says so.
//     Only then does the supervisor answer ReadyTag (or ErrorTag, with
//     what failed: the launcher then runs the command elsewhere);
//   - signal requests are passed to the reaper by its pidfd (a number
//     reused cannot be hit), which passes them to the command;
//   - the status record carries the reaper's wait status of the command,
//     and the usage of every process of the namespace (getrusage of the
//     reaper's children once all are reaped); Alone is true: the reaper
//     killed and reaped everything else and holds none of the command's
//     descriptors, and the supervisor closed its copies before the
//     go-ahead. The reaper ends only once the supervisor closed its end
//     of the control socket, after the record was sent, so the launcher's
//     pidfd never fires before the record is there;
//   - the launcher's end hanging up kills the reaper, and with it the
//     command's whole namespace, as a SessionChild's end does.
//
// What stays on the sandbox-init path, chosen once per session sandbox
// (newServeForker): an architecture without the raw clone or a kernel
// without close_range; a profile whose plan does not fit the raw child's
// fixed tables. Per command, a hand-over with more protected entries than
// maxServeMounts, or a command that does not fit its mapping, is refused
// with ErrorTag (the launcher runs it in a sandbox built for it).

// maxServeMounts bounds the protected entries of one command on the fork
// path (one SCM_RIGHTS message carries their trees).
const maxServeMounts = 64

// serveOOB is the control buffer of the reaper's go-ahead.
const serveOOB = 512

// serveMount is one protected entry in the shared mapping.
type serveMount struct {
	path     [unix.PathMax]byte
	dev, ino uint64
	devNull  uint32
}

// serveMounts heads the shared mapping of a served command.
type serveMounts struct {
	n int
	m [maxServeMounts]serveMount
}

// serveMountsSize is the mapping's part before the command's layout.
var serveMountsSize = (int(unsafe.Sizeof(serveMounts{})) + 4095) &^ 4095

// newServeForker plans the commands of a session supervisor's spec for
// the fork path; an error says why the session stays on the sandbox-init
// path.
func newServeForker(spec *InitSpec) (*sessionForker, error) {
	if unix.CmsgSpace(4*(3+maxServeMounts)) > serveOOB {
		return nil, errors.New("session fork: control buffer too small")
	}
	return planSessionForker(spec)
}

// servedCommand is one command of the fork path, seen from the supervisor.
type servedCommand struct {
	spec   *InitSpec
	life   int // the command's lifeline
	ctl    int
	report int
	pidfd  int
	mem    []byte
	mnt    *serveMounts
	// killed is set when a KILL request was passed on (relay's goroutine
	// only): SIGKILL is the one signal the reaper cannot catch and pass
	// to the command, so it ends the reaper, and with it every process of
	// the namespace, the command included; finish then reports the
	// command killed by it, as the kernel did.
	killed bool
}

// serve starts the reaper of a spawn record's command (life, notify: -1
// without) and serves it on a goroutine; it takes life and notify. It runs
// on the supervisor's locked thread: the reaper's death signal follows it.
func (f *sessionForker) serve(spec *InitSpec, life, notify int) (err error) {
	c := &servedCommand{spec: spec, life: life, ctl: -1, report: -1, pidfd: -1}
	defer func() {
		if notify >= 0 {
			unix.Close(notify)
		}
		if err != nil {
			c.release()
		}
	}()
	if notify >= 0 && unixGuarded(spec) {
		// First on the notify socket, as a SessionChild sends it.
		if err := sendUnixDiagOn(notify); err != nil {
			return err
		}
	}
	if c.mem, err = unix.Mmap(-1, 0, serveMountsSize+waitRegionBytes, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_SHARED|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE); err != nil {
		return fmt.Errorf("session fork: shared mapping: %w", err)
	}
	c.mnt = (*serveMounts)(unsafe.Pointer(&c.mem[0]))
	p := *f.tmpl
	p.fprog = unix.SockFprog{Len: uint16(len(p.filter)), Filter: &p.filter[0]}
	p.region = unsafe.Pointer(&c.mem[serveMountsSize])
	p.layout = nil
	if p.notify {
		if notify < 0 {
			return errors.New("session fork: no notify socket for a notifying profile")
		}
		// This command's socket; the message's pointers to this copy.
		p.notifySock = uintptr(notify)
		p.niov = unix.Iovec{Base: &p.nbuf[0]}
		p.niov.SetLen(len(p.nbuf))
		p.nmsg.Iov, p.nmsg.Control = &p.niov, &p.noob[0]
	}
	n := &nsPlan{cmd: &p, none: [5]byte{'n', 'o', 'n', 'e'}, root: [2]byte{'/'},
		all: ^uint64(0), caught: ^uint64(0) &^ (sigBit(unix.SIGKILL) | sigBit(unix.SIGSTOP)),
		served: true, life: uintptr(life), mnt: c.mnt, pidfd: -1}
	copy(n.name[:], ReaperName)
	n.status[0] = StatusTag
	n.capHdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	n.iov = unix.Iovec{Base: &n.buf[0]}
	n.iov.SetLen(len(n.buf))
	n.msg = unix.Msghdr{Iov: &n.iov, Iovlen: 1, Control: &n.oob[0]}
	ctl, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("session fork: socketpair: %w", err)
	}
	c.ctl = ctl[0]
	defer unix.Close(ctl[1])
	rep, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("session fork: socketpair: %w", err)
	}
	c.report = rep[0]
	defer unix.Close(rep[1])
	n.ctl, p.sock = uintptr(ctl[1]), uintptr(rep[1])
	keep := []int{0, 1, 2, ctl[1], rep[1], life}
	if p.notify {
		keep = append(keep, notify)
	}
	if p.ruleset >= 0 {
		keep = append(keep, p.ruleset)
	}
	for i := 0; i < p.ninherit; i++ {
		keep = append(keep, int(p.inherit[i]))
	}
	if n.nshut, err = shutRanges(keep, n.shut[:]); err != nil {
		return err
	}
	syscall.ForkLock.Lock()
	pid, errno := forkSession(n)
	syscall.ForkLock.Unlock()
	runtime.KeepAlive(n)
	runtime.KeepAlive(&p)
	if errno != 0 {
		return fmt.Errorf("session fork: clone: %w", errno)
	}
	_ = pid
	c.pidfd = int(n.pidfd)
	go c.run()
	return nil
}

// sendUnixDiagOn hands a sock_diag socket of the session's network
// namespace to the launcher on fd (sendUnixDiag's record).
func sendUnixDiagOn(fd int) error {
	return sendUnixDiag(&InitSpec{NotifyFD: fd})
}

func (c *servedCommand) release() {
	for _, fd := range []*int{&c.life, &c.ctl, &c.report, &c.pidfd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	if c.mem != nil {
		_ = unix.Munmap(c.mem)
		c.mem, c.mnt = nil, nil
	}
}

// kill ends the reaper and with it the command's namespace.
func (c *servedCommand) kill() {
	_ = unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0)
}

// run is the command's side of the lifeline (see the top of this file).
func (c *servedCommand) run() {
	defer c.release()
	// The launcher's go-ahead: the reaper is in the command's cgroup.
	if err := WaitGoAhead(c.life); err != nil {
		c.kill()
		return
	}
	if err := ReportPrepared(c.life); err != nil {
		c.kill()
		return
	}
	h, fds, err := awaitHandover(c.life)
	if err != nil {
		c.kill()
		return
	}
	notRun, herr := c.handOver(h, fds)
	if errors.Is(herr, errLookupRefused) {
		// Nothing was started, and the lookup's reason is on the
		// command's stderr: the status sandbox-init's own failure ends
		// with (SandboxInitExitCode), not a not-run record, which would
		// say the program is missing.
		c.refuse(Status{Wait: SandboxInitExitCode << 8, Alone: true})
		return
	}
	if herr != nil {
		c.kill()
		_ = replyHandover(c.life, herr)
		return
	}
	if notRun != 0 {
		c.refuse(Status{Wait: SandboxInitExitCode << 8, Alone: true, NotRun: NotRunLookup, Errno: notRun})
		return
	}
	if err := replyHandover(c.life, nil); err != nil {
		c.kill()
		return
	}
	c.relay()
}

// refuse ends a command that was never started (the reaper never got its
// go-ahead) with st. The record is sent before the reaper is killed: the
// launcher watches the reaper by a pidfd and takes its end with no record
// there for the session sandbox's end, so the record must be on the
// lifeline first, as finish's is (the reaper of a command that ran ends
// only after it).
func (c *servedCommand) refuse(st Status) {
	if replyHandover(c.life, nil) == nil {
		_ = unix.Sendto(c.life, EncodeStatus(st), unix.MSG_NOSIGNAL, nil)
	}
	c.kill()
}

// handOver prepares the command of h (fds: stdin, stdout, stderr, the
// command record) and gives the reaper its go-ahead; it returns once the
// command is cloned. notRun: the program was not found (nothing started).
func (c *servedCommand) handOver(h Handover, fds []int) (notRun syscall.Errno, err error) {
	var trees []int
	defer func() {
		closeFDs(fds)
		closeFDs(trees)
	}()
	argv, env, err := ReadCommandFD(fds[3])
	if err != nil {
		return 0, err
	}
	path, err := lookPathIn(argv[0], env, h.Cwd)
	if err != nil {
		if e := errnoOf(err); e != 0 {
			return e, nil
		}
		if errors.Is(err, exec.ErrDot) {
			// What a sandbox-init of the command's own does with the
			// same lookup (SandboxInit): its line on the command's
			// stderr, then it ends without starting anything.
			msg := fmt.Sprintf("aleph-sandbox: sandbox-init: program %q: %v\n", argv[0], err)
			_, _ = unix.Write(fds[2], []byte(msg))
			return 0, errLookupRefused
		}
		return 0, err
	}
	if len(h.Mounts) > maxServeMounts {
		return 0, fmt.Errorf("%d protected entries (the fork path takes %d)", len(h.Mounts), maxServeMounts)
	}
	for i, m := range h.Mounts {
		tree, err := serveTree(m)
		if err != nil {
			return 0, err
		}
		trees = append(trees, tree)
		sm := &c.mnt.m[i]
		if len(m.Path) >= len(sm.path) {
			return 0, fmt.Errorf("protected %s: path too long", m.Path)
		}
		copy(sm.path[:], m.Path)
		sm.path[len(m.Path)] = 0
		sm.dev, sm.ino = m.Dev, m.Ino
		if m.Kind == MountDevNull {
			sm.devNull = 1
		}
	}
	c.mnt.n = len(h.Mounts)
	var nproc uint64
	if c.spec.RlimitNproc > 0 {
		// The command's limit, the supervisor's tasks and the reaper: the
		// kernel counts every task of the uid (nprocFor), at most the hard
		// limit, as applyRlimits sets every limit.
		if nproc, err = nprocFor(c.spec.RlimitNproc); err != nil {
			return 0, err
		}
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			return 0, fmt.Errorf("getrlimit(RLIMIT_NPROC): %w", err)
		}
		nproc = min(nproc+1, lim.Max)
	}
	if err := layOutCommand(c.mem[serveMountsSize:], path, argv, env, h.Cwd, nproc); err != nil {
		return 0, err
	}
	rights := unix.UnixRights(append([]int{fds[0], fds[1], fds[2]}, trees...)...)
	if _, err := unix.SendmsgN(c.ctl, []byte{GoAheadTag}, rights, nil, unix.MSG_NOSIGNAL); err != nil {
		return 0, fmt.Errorf("session fork: go-ahead: %w", err)
	}
	// The supervisor's copies go now: the command's output ends with
	// the command's tree.
	closeFDs(fds)
	fds = nil
	var b [6]byte
	if _, err := readFull(c.ctl, b[:1]); err != nil {
		return 0, errors.New("session fork: the command's reaper ended before it started the command")
	}
	switch b[0] {
	case ReadyTag:
		return 0, nil
	case ErrorTag:
		if _, err := readFull(c.ctl, b[1:]); err != nil {
			return 0, errors.New("session fork: the command's reaper failed")
		}
		i, e := int(b[1]), syscall.Errno(binary.LittleEndian.Uint32(b[2:]))
		if i < len(h.Mounts) {
			if e == unix.ESTALE {
				return 0, fmt.Errorf("protected %s changed since the launcher looked", h.Mounts[i].Path)
			}
			return 0, fmt.Errorf("protected %s: %w", h.Mounts[i].Path, e)
		}
		return 0, fmt.Errorf("session fork: reaper: %w", e)
	}
	return 0, fmt.Errorf("session fork: reaper: record %q", b[0])
}

// serveTree is m's mount as a detached tree (protectedTree), for the
// reaper to attach in the command's namespace.
func serveTree(m HandoverMount) (int, error) {
	tree, target, err := protectedTree(m)
	if err != nil {
		return -1, err
	}
	unix.Close(target)
	return tree, nil
}

// relay passes signal requests on until the reaper reports the status,
// which goes on the lifeline with the usage; the launcher's end hanging
// up kills the reaper.
func (c *servedCommand) relay() {
	for {
		pfd := []unix.PollFd{
			{Fd: int32(c.life), Events: unix.POLLIN | unix.POLLRDHUP},
			{Fd: int32(c.ctl), Events: unix.POLLIN},
		}
		if _, err := unix.Poll(pfd, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			c.kill()
			return
		}
		if pfd[1].Revents != 0 {
			c.finish()
			return
		}
		if pfd[0].Revents&unix.POLLIN != 0 {
			var b [2]byte
			n, err := unix.Read(c.life, b[:1])
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			if err != nil || n == 0 {
				// The launcher hung up: the reaper dies, and its end on
				// ctl closes the command's side (no status: none is
				// wanted). Returning here, not polling on: at end of
				// file POLLIN stays set and the loop would spin.
				c.kill()
				c.finish()
				return
			}
			if b[0] == SignalTag {
				if _, err := readFull(c.life, b[1:]); err != nil {
					c.kill() // a request cut short: the launcher is gone
					c.finish()
					return
				}
				if syscall.Signal(b[1]) == unix.SIGKILL {
					c.killed = true
				}
				_ = unix.PidfdSendSignal(c.pidfd, syscall.Signal(b[1]), nil, 0)
			}
			continue
		}
		if pfd[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0 {
			c.kill()
			// The reaper's end shows on ctl next.
			c.finish()
			return
		}
	}
}

// finish reads the reaper's status and usage and sends the status record;
// a reaper killed first leaves the lifeline closed without one, as a
// killed sandbox-init does.
func (c *servedCommand) finish() {
	var buf [5 + int(unsafe.Sizeof(unix.Rusage{}))]byte
	n, _ := readFull(c.ctl, buf[:])
	if n < len(buf) || buf[0] != StatusTag {
		if c.killed {
			// The reaper died of the KILL asked for (a status it had
			// written before would have been read above): the command
			// died of it too, with the rest of its namespace. Its usage
			// went with the reaper.
			_ = unix.Sendto(c.life, EncodeStatus(Status{Wait: uint32(unix.SIGKILL), Alone: true}), unix.MSG_NOSIGNAL, nil)
		}
		return
	}
	ru := (*unix.Rusage)(unsafe.Pointer(&buf[5]))
	st := Status{
		Wait:     binary.LittleEndian.Uint32(buf[1:]),
		MaxRSSKB: int64(ru.Maxrss),
		UserUS:   int64(ru.Utime.Sec)*1e6 + int64(ru.Utime.Usec),
		SystemUS: int64(ru.Stime.Sec)*1e6 + int64(ru.Stime.Usec),
		Alone:    true,
	}
	st.NotRun, st.Errno = readNotRun(c.report)
	if st.NotRun != NotRunNone {
		st.Wait = SandboxInitExitCode << 8
	}
	_ = unix.Sendto(c.life, EncodeStatus(st), unix.MSG_NOSIGNAL, nil)
}

// readFull reads len(b) bytes unless the peer ends first.
func readFull(fd int, b []byte) (int, error) {
	got := 0
	for got < len(b) {
		n, err := unix.Read(fd, b[got:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return got, err
		}
		if n == 0 {
			return got, errLauncherGone
		}
		got += n
	}
	return got, nil
}

// errLookupRefused: the program was found, through a relative PATH entry,
// and refused as exec.LookPath refuses it; the reason is on the command's
// stderr already.
var errLookupRefused = errors.New("session fork: program refused by the lookup")

// lookPathIn is exec.LookPath for env's PATH from dir, without changing
// this process's directory or environment (the supervisor serves several
// commands at once).
func lookPathIn(file string, env []string, dir string) (string, error) {
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	check := func(p string) error {
		var st unix.Stat_t
		if err := unix.Stat(abs(p), &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return syscall.EISDIR
		}
		if st.Mode&0o111 == 0 {
			return syscall.EACCES
		}
		return unix.Faccessat(unix.AT_FDCWD, abs(p), unix.X_OK, unix.AT_EACCESS)
	}
	if strings.Contains(file, "/") {
		if err := check(file); err != nil {
			return "", &os.PathError{Op: "exec", Path: file, Err: err}
		}
		return file, nil
	}
	path, _ := envPath(env) // the PATH sandbox-init's own lookup would use (becomeEnv)
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		if err := check(p); err == nil {
			if !filepath.IsAbs(p) {
				// As exec.LookPath: a program found through a relative
				// PATH entry is refused (exec.ErrDot), with its reason,
				// not as missing.
				return "", &exec.Error{Name: file, Err: exec.ErrDot}
			}
			return p, nil
		}
	}
	return "", &os.PathError{Op: "exec", Path: file, Err: syscall.ENOENT}
}

// shutRanges fills out with the ranges of descriptors above 2 that are
// not in keep, and returns how many.
func shutRanges(keep []int, out [][2]uintptr) (int, error) {
	keep = slices.Sorted(slices.Values(keep))
	n, next := 0, uintptr(3)
	for _, fd := range keep {
		if uintptr(fd) > next {
			if n == len(out)-1 {
				return 0, errors.New("session fork: too many descriptor ranges")
			}
			out[n] = [2]uintptr{next, uintptr(fd) - 1}
			n++
		}
		next = max(next, uintptr(fd)+1)
	}
	out[n] = [2]uintptr{next, uintptr(^uint32(0))}
	return n + 1, nil
}
