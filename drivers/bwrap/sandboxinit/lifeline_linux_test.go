//go:build linux

package sandboxinit

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestEnvFDRoundTrip(t *testing.T) {
	want := []string{"A=1", "LD_PRELOAD=/w/evil.so", "EMPTY=", "SP=a b=c"}
	fd, err := unix.MemfdCreate("env", unix.MFD_CLOEXEC)
	if err != nil {
		t.Skip("memfd:", err)
	}
	f := os.NewFile(uintptr(fd), "env")
	defer f.Close()
	if _, err := f.Write(EncodeEnv(want)); err != nil {
		t.Fatal(err)
	}
	got, err := ReadEnvFD(fd)
	if err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q %v, want %q", got, err, want)
	}
	// Empty means empty, not "inherit".
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadEnvFD(fd); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty env: %q %v", got, err)
	}
	for _, bad := range []string{"NOEQUALS\x00", "A=1", "=x\x00"} {
		if err := f.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(bad), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadEnvFD(fd); err == nil {
			t.Errorf("%q accepted", bad)
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
	ok := InitSpec{SocketMode: SocketUnixOnly, EnvFD: 3, LifelineFD: 4, InheritFDs: []int{5}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []InitSpec{
		{SocketMode: SocketUnixOnly, EnvFD: 2},
		{SocketMode: SocketUnixOnly, LifelineFD: -1},
		{SocketMode: SocketUnixOnly, EnvFD: 3, LifelineFD: 3},
		{SocketMode: SocketUnixOnly, EnvFD: 5, InheritFDs: []int{5}},
	} {
		var ise *InitSpecError
		if err := s.Validate(); !errors.As(err, &ise) {
			t.Errorf("%+v: %v", s, err)
		}
	}
}

// ReadEnvFD leaves the descriptor as it found it: the supervisor's plain
// child is given the same number later, so no finalizer of a wrapper may
// close it at some collection in between.
func TestReadEnvFDKeepsDescriptor(t *testing.T) {
	fd, err := unix.MemfdCreate("env", unix.MFD_CLOEXEC)
	if err != nil {
		t.Skip("memfd:", err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, EncodeEnv([]string{"A=1"})); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if env, err := ReadEnvFD(fd); err != nil || len(env) != 1 || env[0] != "A=1" {
			t.Fatalf("read %d: %q %v", i, env, err)
		}
	}
	for i := 0; i < 3; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		t.Fatalf("the environment's descriptor was closed behind the caller's back: %v", err)
	}
}
