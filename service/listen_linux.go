package service

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// InUseError is a socket a live server is listening on: it is never taken
// over.
type InUseError struct {
	Path string
	// Owner is what the live server wrote about itself with WriteOwner
	// (its pid, version and data directory), "" when it wrote nothing.
	Owner string
}

func (e *InUseError) Error() string {
	if e.Owner != "" {
		return fmt.Sprintf("another aleph-sandbox serve is listening on %s (%s)", e.Path, e.Owner)
	}
	return fmt.Sprintf("another aleph-sandbox serve is listening on %s", e.Path)
}

// maxOwnerBytes bounds what is read back from a lock file: it is written
// by a server of the same user, but a reader does not trust its length.
const maxOwnerBytes = 512

// lockOwner reads what the server holding path's lock wrote about itself.
func lockOwner(lock *os.File) string {
	b := make([]byte, maxOwnerBytes)
	n, _ := lock.ReadAt(b, 0)
	return strings.Join(strings.Fields(strings.ToValidUTF8(string(b[:n]), "?")), " ")
}

// WriteOwner records, in the socket's lock file, who listens (e.g. "pid
// 123, version 0.4.0, data dir /home/u/.local/share/aleph-sandbox"): a
// second server started on the same socket is refused with this in its
// InUseError, so the user learns which server already answers there
// (another checkout's, another terminal's) instead of silently talking to
// it. Only the lock's holder writes it, so no reader sees a half record
// of an older owner.
func (l *UnixListener) WriteOwner(owner string) error {
	if len(owner) > maxOwnerBytes {
		owner = owner[:maxOwnerBytes]
	}
	if err := l.lock.Truncate(0); err != nil {
		return err
	}
	_, err := l.lock.WriteAt([]byte(owner+"\n"), 0)
	return err
}

// SocketDirError is a socket directory that ListenUnix will not use: one
// another user owns, or whose mode lets others in. It is not changed.
type SocketDirError struct {
	Dir string
	Why string
}

func (e *SocketDirError) Error() string {
	return fmt.Sprintf("socket directory %s: %s; the socket needs a directory of mode 0700 that only you use "+
		"(fix: name a socket in a directory that does not exist yet, which serve creates with mode 0700, "+
		"or run chmod 0700 on one that is yours alone)", e.Dir, e.Why)
}

func stickyBit(m os.FileMode) uint32 {
	if m&os.ModeSticky != 0 {
		return 0o1000
	}
	return 0
}

// checkWay refuses a socket directory reached through an entry that a uid
// other than this one and root could replace, as it names it and as it
// resolves: a symbolic link or a directory another uid owns, or a
// directory others may write that is not sticky (in a sticky one, as
// /tmp, only an entry's owner replaces it, and the entry is checked in
// turn). The socket directory's own mode is checked apart. A replaced
// entry would not touch the server's socket, but every client that dials
// the path would reach whatever the entry then leads to: a listener of
// the other uid's, handed the commands and their secrets.
func checkWay(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	ways := []string{abs}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		ways = append(ways, real)
	}
	for _, way := range ways {
		for cur := way; ; cur = filepath.Dir(cur) {
			st, err := os.Lstat(cur)
			if err == nil {
				if why := replaceable(cur, st, cur == way); why != "" {
					return &SocketDirError{Dir: dir, Why: why}
				}
			}
			if filepath.Dir(cur) == cur {
				break
			}
		}
	}
	return nil
}

// replaceable says why entry p (st, from Lstat) could be replaced by a uid
// other than this one and root, or "" when it cannot. last is the socket
// directory itself, whose mode ListenUnix checks apart.
func replaceable(p string, st os.FileInfo, last bool) string {
	uid, ok := fileOwner(st)
	if !ok {
		return ""
	}
	if uid != os.Getuid() && uid != 0 {
		what := "directory"
		if st.Mode()&os.ModeSymlink != 0 {
			what = "symbolic link"
		}
		return fmt.Sprintf("the %s %s on its way belongs to uid %d, who could replace what it leads to", what, p, uid)
	}
	if !last && st.IsDir() && st.Mode().Perm()&0o022 != 0 && st.Mode()&os.ModeSticky == 0 {
		return fmt.Sprintf("the directory %s on its way has mode %04o: others may write it, and could replace what is in it", p, uint32(st.Mode().Perm()))
	}
	return ""
}

// UnixListener is the service's socket: the lock that makes it ours, and
// the peer check on every connection.
type UnixListener struct {
	net.Listener
	path    string
	lock    *os.File
	allowed map[uint32]bool
	log     hclog.Logger
	// refusing bounds the refused connections being told why at once: a
	// peer that connects in a loop gets no more than refuseSlots
	// goroutines, and beyond them a bare close.
	refusing chan struct{}
}

const (
	refuseSlots = 8
	// refuseWait bounds how long a refused peer holds its slot.
	refuseWait = time.Second
)

// ListenUnix creates the socket at path, mode 0600, in a directory of mode
// 0700 that only this user can enter: created if missing, refused (a
// *SocketDirError) if it exists with another owner or another mode. An
// existing directory is never changed: a path such as /tmp/aleph.sock or
// ./aleph.sock must not tighten /tmp or a project for every other user.
// It first takes an exclusive lock on path+".lock": a live server holds
// it, so its socket is never stolen (an *InUseError); a socket left by a
// dead server is replaced. Connections from uids other than the server's
// own and allowedUIDs are closed before any byte is read.
func ListenUnix(path string, allowedUIDs []uint32, log hclog.Logger) (*UnixListener, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	dir := filepath.Dir(path)
	// Checked before MkdirAll too: a directory is not made through a way
	// that is refused.
	if err := checkWay(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("socket directory %s: %w", dir, err)
	}
	if err := checkWay(dir); err != nil {
		return nil, err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("socket directory %s: %w", dir, err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return nil, &SocketDirError{Dir: dir, Why: fmt.Sprintf("it belongs to uid %d, not to this user (%d)", sys.Uid, os.Getuid())}
	}
	if m := st.Mode() & (os.ModePerm | os.ModeSticky); m != 0o700 {
		return nil, &SocketDirError{Dir: dir, Why: fmt.Sprintf("its mode is %04o, not 0700", uint32(m.Perm())|stickyBit(m))}
	}
	lock, err := lockSocketPath(path)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = lock.Close()
		}
	}()
	if _, err := os.Lstat(path); err == nil {
		// We hold the lock, so no server of ours is live; a listener that
		// answers anyway (one that predates the lock) is still not stolen.
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			_ = c.Close()
			return nil, &InUseError{Path: path}
		}
		log.Info("replacing a stale socket", "path", path)
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing the stale socket %s: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	allowed := map[uint32]bool{uint32(os.Getuid()): true}
	for _, u := range allowedUIDs {
		allowed[u] = true
	}
	ok = true
	return &UnixListener{Listener: l, path: path, lock: lock, allowed: allowed, log: log,
		refusing: make(chan struct{}, refuseSlots)}, nil
}

// Path is the socket's path.
func (l *UnixListener) Path() string { return l.path }

// Accept returns the next connection from an allowed uid; others are
// closed and logged.
func (l *UnixListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err != nil {
			l.log.Warn("connection refused: peer credentials unreadable", "error", err)
			_ = c.Close()
			continue
		}
		if !l.allowed[uid] {
			l.log.Warn("connection refused: peer uid not allowed", "uid", uid)
			select {
			case l.refusing <- struct{}{}:
				go func() {
					defer func() { <-l.refusing }()
					refuse(c, uid)
				}()
			default:
				_ = c.Close()
			}
			continue
		}
		return c, nil
	}
}

// refuse tells a peer of a uid not allowed why it is disconnected, so its
// client reports permission_denied instead of a broken pipe: one fixed
// HTTP/1.1 answer (Connect's JSON error, which the clients read), written
// before anything of the peer's is read. What the peer sent is then
// drained unread, for a bounded time, so that closing does not cut the
// answer off while the peer is still writing its request; none of it
// reaches the service.
func refuse(c net.Conn, uid uint32) {
	defer c.Close()
	body := fmt.Sprintf(`{"code":"permission_denied","message":"peer uid %d is not allowed on this socket: `+
		`connect as the user running aleph-sandbox serve, or add %d to [serve] allowed_uids"}`, uid, uid)
	_ = c.SetDeadline(time.Now().Add(refuseWait))
	if _, err := fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"+
		"Connection: close\r\n\r\n%s", len(body), body); err != nil {
		return
	}
	if uc, ok := c.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	_, _ = io.CopyN(io.Discard, c, 64<<10)
}

// Close removes the socket (the net package unlinks it) and releases the
// lock. The lock file stays: removing it would let two servers lock two
// different files of the same name.
func (l *UnixListener) Close() error {
	err := l.Listener.Close()
	// The lock file goes while it is still held: a server starting now
	// either failed to lock it (this one held it) or locks it after the
	// removal and finds, by lockSocketPath's check, that it names nothing
	// any more, and takes a new one.
	_ = os.Remove(l.path + ".lock")
	_ = l.lock.Close()
	return err
}

// lockSocketPath takes the exclusive lock on path+".lock" without waiting
// (an *InUseError when a live server holds it), and checks that the file
// locked is still the one at that name: a server that closed meanwhile
// removes its lock file while holding it, and a lock taken on the removed
// file would let two servers think they own the socket.
func lockSocketPath(path string) (*os.File, error) {
	for attempt := 0; ; attempt++ {
		lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, fmt.Errorf("lock %s.lock: %w", path, err)
		}
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			owner := ""
			if errors.Is(err, unix.EWOULDBLOCK) {
				owner = lockOwner(lock)
			}
			_ = lock.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, &InUseError{Path: path, Owner: owner}
			}
			return nil, fmt.Errorf("lock %s.lock: %w", path, err)
		}
		var held, named unix.Stat_t
		if unix.Fstat(int(lock.Fd()), &held) == nil && unix.Lstat(path+".lock", &named) == nil &&
			held.Dev == named.Dev && held.Ino == named.Ino {
			return lock, nil
		}
		_ = lock.Close()
		if attempt >= 10 {
			return nil, fmt.Errorf("lock %s.lock: it keeps being removed and made again (another server starting and stopping there?)", path)
		}
	}
}

func peerUID(c net.Conn) (uint32, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return cred.Uid, nil
}

// fileOwner is the uid owning the file st describes.
func fileOwner(st os.FileInfo) (int, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(sys.Uid), true
}
