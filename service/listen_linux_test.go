package service

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestListenUnixNeverChangesADirectory: a socket directory that exists
// with a mode other than 0700 is refused and left as it was (a socket
// named in /tmp or in a project must not close it to other users); a
// missing one is created 0700 and used, as is an existing 0700 one.
func TestListenUnixNeverChangesADirectory(t *testing.T) {
	base := t.TempDir()
	for _, c := range []struct {
		name   string
		mode   os.FileMode // 0: the directory does not exist
		refuse bool
	}{
		{"missing", 0, false},
		{"private", 0o700, false},
		{"readable by others", 0o755, true},
		{"world-writable sticky", 0o777 | os.ModeSticky, true},
		{"group-writable", 0o770, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(base, filepath.Base(t.Name()))
			if c.mode != 0 {
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, c.mode); err != nil {
					t.Fatal(err)
				}
			}
			l, err := ListenUnix(filepath.Join(dir, "a.sock"), nil, nil)
			st, serr := os.Stat(dir)
			if serr != nil {
				t.Fatal(serr)
			}
			if c.refuse {
				var de *SocketDirError
				if !errors.As(err, &de) || de.Dir != dir {
					t.Fatalf("ListenUnix in a %v directory: %v, want a *SocketDirError", c.mode, err)
				}
				if got := st.Mode() & (os.ModePerm | os.ModeSticky); got != c.mode {
					t.Errorf("the directory's mode became %v, was %v", got, c.mode)
				}
				if _, err := os.Lstat(filepath.Join(dir, "a.sock")); !os.IsNotExist(err) {
					t.Errorf("a socket was made in a refused directory: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ListenUnix: %v", err)
			}
			defer l.Close()
			if st.Mode().Perm() != 0o700 {
				t.Errorf("directory mode %v, want 0700", st.Mode().Perm())
			}
			if sst, err := os.Stat(filepath.Join(dir, "a.sock")); err != nil || sst.Mode().Perm() != 0o600 {
				t.Errorf("socket: %v, %v; want mode 0600", sst, err)
			}
		})
	}
}

// TestRefusedPeerIsToldAndBounded: a peer whose uid is not allowed gets
// the fixed 403 naming its uid (this test's own uid, taken off the
// allowed list); at most refuseSlots peers are being told at once, and
// the next one is only closed, so a peer that connects in a loop cannot
// grow the server's goroutines; a slot frees within refuseWait.
func TestRefusedPeerIsToldAndBounded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	sock := filepath.Join(dir, "a.sock")
	l, err := ListenUnix(sock, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.allowed = map[uint32]bool{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// Nothing is allowed: an accepted connection is the fault.
			c.Close()
			t.Error("a connection of a uid not allowed was accepted")
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// told reads the answer without closing: the server holds the slot
	// until refuseWait.
	told := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		want := fmt.Sprintf("peer uid %d is not allowed", os.Getuid())
		if resp.StatusCode != 403 || !strings.Contains(string(b), `"code":"permission_denied"`) || !strings.Contains(string(b), want) {
			t.Fatalf("refusal: %d %s", resp.StatusCode, b)
		}
		return true
	}
	var held []net.Conn
	for i := 0; i < refuseSlots; i++ {
		c := dial()
		held = append(held, c)
		if !told(c) {
			t.Fatalf("peer %d was not told", i)
		}
	}
	extra := dial()
	_ = extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(extra); err != nil || len(b) != 0 {
		t.Fatalf("the peer beyond the slots: %q %v (want a bare close)", b, err)
	}
	extra.Close()
	for _, c := range held {
		c.Close()
	}
	// The slots free (the held peers closed, or refuseWait passed).
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := dial()
		ok := told(c)
		c.Close()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no slot freed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestListenUnixRefusesAReplaceableWay: a socket directory reached through
// an entry someone else could replace is refused before anything is
// created: a symbolic link another uid owns (in a sticky public directory,
// as in /tmp: its owner re-points it at a directory of its own, and every
// client that dials the path talks to a server of its making), a directory
// on the way that others may write, or one another uid owns. The same
// layouts with the entry this user's own (a link of ours, a sticky public
// directory, a parent of ours) are used (the controls).
func TestListenUnixRefusesAReplaceableWay(t *testing.T) {
	const other = 65534
	for _, c := range []struct {
		name   string
		root   bool // needs root: it chowns to another uid
		refuse bool
		// setup lays out base and returns the socket directory to use.
		setup func(t *testing.T, base string) string
	}{
		{"link of another uid", true, true, func(t *testing.T, base string) string {
			return linkInPublic(t, base, other)
		}},
		{"link of ours", false, false, func(t *testing.T, base string) string {
			return linkInPublic(t, base, os.Getuid())
		}},
		{"writable parent", false, true, func(t *testing.T, base string) string {
			return under(t, base, 0o777, -1)
		}},
		{"sticky public parent", false, false, func(t *testing.T, base string) string {
			return under(t, base, 0o777|os.ModeSticky, -1)
		}},
		{"parent of another uid", true, true, func(t *testing.T, base string) string {
			return under(t, base, 0o755, other)
		}},
		{"parent of ours", false, false, func(t *testing.T, base string) string {
			return under(t, base, 0o755, -1)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Getuid() != 0 {
				t.Skip("needs root to give an entry to another uid")
			}
			dir := c.setup(t, t.TempDir())
			sock := filepath.Join(dir, "a.sock")
			l, err := ListenUnix(sock, nil, nil)
			if !c.refuse {
				if err != nil {
					t.Fatalf("ListenUnix: %v", err)
				}
				l.Close()
				return
			}
			var de *SocketDirError
			if errors.As(err, &de) {
				if !strings.Contains(de.Why, "replace") {
					t.Errorf("the refusal does not say why: %v", err)
				}
				if _, err := os.Lstat(sock + ".lock"); !os.IsNotExist(err) {
					t.Errorf("a lock was made on a refused way: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ListenUnix: %v, want a *SocketDirError", err)
			}
			defer l.Close()
			t.Fatalf("ListenUnix on %s accepted a way another uid can replace", dir)
		})
	}
	if os.Getuid() != 0 {
		return
	}
	// What the refusal prevents: through a link another uid owns, a
	// client that dials the served path reaches that uid's listener once
	// the link is re-pointed.
	t.Run("hijack", func(t *testing.T) {
		base := t.TempDir()
		link := linkInPublic(t, base, os.Getuid())
		sock := filepath.Join(link, "a.sock")
		l, err := ListenUnix(sock, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		evil := filepath.Join(base, "evil")
		if err := os.Mkdir(evil, 0o700); err != nil {
			t.Fatal(err)
		}
		el, err := net.Listen("unix", filepath.Join(evil, "a.sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer el.Close()
		if err := os.Remove(link); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(evil, link); err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = el.(*net.UnixListener).SetDeadline(time.Now().Add(5 * time.Second))
		ec, err := el.Accept()
		if err != nil {
			t.Fatalf("the re-pointed link did not lead to the other listener: %v", err)
		}
		ec.Close()
	})
}

// linkInPublic makes base/real (0700) and base/pub/aleph, a link to it
// owned by uid, in a sticky world-writable directory; it returns the link.
func linkInPublic(t *testing.T, base string, uid int) string {
	t.Helper()
	real, pub := filepath.Join(base, "real"), filepath.Join(base, "pub")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(pub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pub, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(pub, "aleph")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if uid != os.Getuid() {
		if err := os.Lchown(link, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return link
}

// under makes base/parent with mode (and owner uid, unless -1) and returns
// base/parent/run, which ListenUnix creates.
func under(t *testing.T, base string, mode os.FileMode, uid int) string {
	t.Helper()
	parent := filepath.Join(base, "parent")
	if err := os.Mkdir(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, mode); err != nil {
		t.Fatal(err)
	}
	if uid >= 0 {
		if err := os.Chown(parent, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(parent, "run")
}

// TestListenUnixLeavesNothing: a closed listener leaves neither its socket
// nor its lock file; while it is open both are there and a second
// listener on the path is refused (the control that the lock is what
// holds it); after the close a new listener takes the path, again and
// again, each refusing a second while it is open.
func TestListenUnixLeavesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	sock := filepath.Join(dir, "s.sock")
	for round := 0; round < 3; round++ {
		l, err := ListenUnix(sock, nil, nil)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, p := range []string{sock, sock + ".lock"} {
			if _, err := os.Lstat(p); err != nil {
				t.Fatalf("round %d: %s missing while listening: %v", round, p, err)
			}
		}
		var inUse *InUseError
		if l2, err := ListenUnix(sock, nil, nil); !errors.As(err, &inUse) {
			if l2 != nil {
				l2.Close()
			}
			t.Fatalf("round %d: a second listener: %v, want *InUseError", round, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 0 {
			names := []string{}
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Fatalf("round %d: left after close: %v", round, names)
		}
	}
}
