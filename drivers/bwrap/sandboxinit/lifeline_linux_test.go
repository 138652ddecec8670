//go:build linux

package sandboxinit

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCommandFDRoundTrip: the argv and environment read from a command
// record's descriptor are exactly what was written, bytes that are not
// UTF-8, newlines, spaces and empty arguments included, and an empty
// environment stays empty (not "inherit").
func TestCommandFDRoundTrip(t *testing.T) {
	fd, err := unix.MemfdCreate("command", unix.MFD_CLOEXEC)
	if err != nil {
		t.Skip("memfd:", err)
	}
	f := os.NewFile(uintptr(fd), "command")
	defer f.Close()
	many := make([]string, 100000)
	for i := range many {
		many[i] = strconv.Itoa(i)
	}
	for _, c := range []struct {
		name      string
		argv, env []string
	}{
		{"odd bytes", []string{"/bin/prog", "", "a b", "line\nnext", "\xff\xfe", "=", "--"}, []string{"A=1", "LD_PRELOAD=/w/evil.so", "EMPTY=", "SP=a b=c", "B=\xff"}},
		{"no environment", []string{"prog"}, []string{}},
		{"many arguments", append([]string{"prog"}, many...), []string{"A=1"}},
	} {
		rec, err := EncodeCommand(c.argv, c.env)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := f.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(rec, 0); err != nil {
			t.Fatal(err)
		}
		argv, env, err := ReadCommandFD(fd)
		if err != nil || !slices.Equal(argv, c.argv) || !slices.Equal(env, c.env) || env == nil {
			t.Fatalf("%s: got %q %q %v", c.name, argv, env, err)
		}
	}
}

// TestCommandRecordRefusals: a record that is not exactly what
// EncodeCommand writes is refused, naming command_fd, and nothing of it is
// returned; EncodeCommand refuses what could not be decoded.
func TestCommandRecordRefusals(t *testing.T) {
	good, err := EncodeCommand([]string{"/bin/true", "x"}, []string{"A=1"})
	if err != nil {
		t.Fatal(err)
	}
	if argv, _, err := DecodeCommand(good); err != nil || len(argv) != 2 {
		t.Fatalf("positive control: %q %v", argv, err)
	}
	edit := func(f func(b []byte) []byte) []byte { return f(slices.Clone(good)) }
	le := func(b []byte, off int, v uint32) []byte { binary.LittleEndian.PutUint32(b[off:], v); return b }
	for name, rec := range map[string][]byte{
		"empty":             {},
		"header only part":  good[:10],
		"wrong magic":       edit(func(b []byte) []byte { b[0] = 'X'; return b }),
		"old env format":    []byte("A=1\x00B=2\x00"),
		"next version":      edit(func(b []byte) []byte { return le(b, 8, CommandVersion+1) }),
		"argc too large":    edit(func(b []byte) []byte { return le(b, 12, 3) }),
		"argc huge":         edit(func(b []byte) []byte { return le(b, 12, 1<<31) }),
		"envc too large":    edit(func(b []byte) []byte { return le(b, 16, 2) }),
		"no argv":           edit(func(b []byte) []byte { b = le(b, 12, 0); return le(b, 16, 3) }),
		"missing last NUL":  good[:len(good)-1],
		"trailing byte":     append(slices.Clone(good), 'x'),
		"trailing entry":    append(slices.Clone(good), "B=2\x00"...),
		"env not NAME=VAL":  edit(func(b []byte) []byte { b[len(b)-3] = 'x'; return b }),
		"empty program":     edit(func(b []byte) []byte { return append(append(b[:commandHeaderLen], 0, 'x', 0), "A=1\x00"...) }),
		"envc short by one": edit(func(b []byte) []byte { return le(b, 16, 0) }),
	} {
		argv, env, err := DecodeCommand(rec)
		var ise *InitSpecError
		if !errors.As(err, &ise) || ise.Field != "command_fd" || argv != nil || env != nil {
			t.Errorf("%s: %q %q %v", name, argv, env, err)
		}
	}
	for name, c := range map[string][2][]string{
		"no program":     {nil, nil},
		"empty program":  {{""}, nil},
		"NUL in arg":     {{"p", "a\x00b"}, nil},
		"env no =":       {{"p"}, {"A"}},
		"env empty name": {{"p"}, {"=1"}},
	} {
		if _, err := EncodeCommand(c[0], c[1]); err == nil {
			t.Errorf("EncodeCommand %s: accepted", name)
		}
	}
}

func TestLifeline(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	launcher, sandbox := fds[0], fds[1]
	defer unix.Close(sandbox)
	// Launcher alive: not gone, and the started byte reaches it.
	if LauncherGone(sandbox) {
		t.Fatal("live launcher reported gone")
	}
	if err := ReportStarted(sandbox); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if n, _, err := unix.Recvfrom(launcher, b[:], unix.MSG_DONTWAIT); n != 1 || err != nil {
		t.Fatalf("started byte: %d %v", n, err)
	}
	if LauncherGone(sandbox) {
		t.Fatal("launcher reported gone after the started byte")
	}
	unix.Close(launcher)
	if !LauncherGone(sandbox) {
		t.Fatal("closed launcher not noticed")
	}
	if err := ReportStarted(sandbox); !errors.Is(err, errLauncherGone) {
		t.Fatalf("ReportStarted to a closed launcher: %v", err)
	}
}

func TestSpecFDFields(t *testing.T) {
	ok := InitSpec{SocketMode: SocketUnixOnly, CommandFD: 3, LifelineFD: 4, InheritFDs: []int{5}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	plainChild := InitSpec{SocketMode: SocketUnixOnly, CommandFD: 3, InheritFDs: []int{5}, ReportFD: 6}
	if err := plainChild.Validate(); err != nil {
		t.Fatalf("the plain child's spec: %v", err)
	}
	for _, s := range []InitSpec{
		{SocketMode: SocketUnixOnly, CommandFD: 2},
		{SocketMode: SocketUnixOnly, LifelineFD: -1},
		{SocketMode: SocketUnixOnly, CommandFD: 3, LifelineFD: 3},
		{SocketMode: SocketUnixOnly, CommandFD: 5, InheritFDs: []int{5}},
		// A supervisor reports on its lifeline, never on a report fd.
		{SocketMode: SocketUnixOnly, ReportFD: 6, Supervise: true},
		{SocketMode: SocketUnixOnly, ReportFD: 6, LifelineFD: 4},
		{SocketMode: SocketUnixOnly, CommandFD: 3, ReportFD: 3},
		{SocketMode: SocketUnixOnly, ReportFD: 2},
	} {
		var ise *InitSpecError
		if err := s.Validate(); !errors.As(err, &ise) {
			t.Errorf("%+v: %v", s, err)
		}
	}
}

// ReadCommandFD leaves the descriptor as it found it: the supervisor's
// plain child is given the same number later, so no finalizer of a wrapper
// may close it at some collection in between.
func TestReadCommandFDKeepsDescriptor(t *testing.T) {
	fd, err := unix.MemfdCreate("command", unix.MFD_CLOEXEC)
	if err != nil {
		t.Skip("memfd:", err)
	}
	defer unix.Close(fd)
	rec, err := EncodeCommand([]string{"prog"}, []string{"A=1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(fd, rec); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, env, err := ReadCommandFD(fd); err != nil || len(env) != 1 || env[0] != "A=1" {
			t.Fatalf("read %d: %q %v", i, env, err)
		}
	}
	for i := 0; i < 3; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		t.Fatalf("the command's descriptor was closed behind the caller's back: %v", err)
	}
}
