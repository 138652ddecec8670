package service

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
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
