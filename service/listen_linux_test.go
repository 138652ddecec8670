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
