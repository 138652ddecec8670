//go:build linux

package sandboxinit

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// bridgeLockHelper is an extra helper mode of the test binary: it binds a
// listener (positive control), calls LockBridge, and reports what exec,
// bind and the other threads' seccomp state look like afterwards.
const bridgeLockHelper = "bridge-lock"

func init() {
	if os.Getenv(helperEnv) == "" || len(os.Args) < 2 || os.Args[1] != bridgeLockHelper {
		return
	}
	os.Exit(bridgeLock())
}

func bridgeLock() int {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err == nil {
		l.Close()
	}
	fmt.Println("BEFORE-BIND", errName(err))
	if err := LockBridge(); err != nil {
		fmt.Println("LOCK", err)
		return 1
	}
	_, err = net.Listen("tcp4", "127.0.0.1:0")
	fmt.Println("AFTER-BIND", errName(err))
	// Every thread must carry the filter (TSYNC), not only this one.
	tasks, _ := os.ReadDir("/proc/self/task")
	unfiltered := 0
	for _, task := range tasks {
		st, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err == nil && !strings.Contains(string(st), "\nSeccomp:\t2\n") {
			unfiltered++
		}
	}
	fmt.Println("THREADS", len(tasks), "UNFILTERED", unfiltered)
	// On success exec replaces this process and prints nothing more.
	exe, _ := os.Executable()
	err = syscall.Exec(exe, []string{exe, "probe", "status"}, os.Environ())
	fmt.Println("EXEC", errName(err))
	return 0
}

// bridgeSpec confines like the driver's bridge spec: read-only system
// directories (so the test binary, possibly race-built, starts), nothing
// writable, socket mode bridge with one bind port.
func bridgeSpec(t *testing.T, port uint16) InitSpec {
	t.Helper()
	return InitSpec{
		ReadOnly:          []string{"/usr", "/lib", "/lib64", "/etc/ld.so.cache", "/dev", filepath.Dir(testExe(t))},
		SocketMode:        SocketBridge,
		BridgePorts:       []uint16{port},
		ScopeSignals:      true,
		ScopeAbstractUnix: true,
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) (uint16, string) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().(*net.TCPAddr)
	l.Close()
	return uint16(a.Port), a.String()
}

func TestBridgeSpecValidation(t *testing.T) {
	ok := InitSpec{SocketMode: SocketBridge, BridgePorts: []uint16{3128}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid bridge spec refused: %v", err)
	}
	for name, s := range map[string]InitSpec{
		"no ports": {SocketMode: SocketBridge},
		"spawn":    {SocketMode: SocketBridge, BridgePorts: []uint16{3128}, AllowSpawn: true},
		"writable": {SocketMode: SocketBridge, BridgePorts: []uint16{3128}, ReadWrite: []string{"/tmp"}},
		"port 0":   {SocketMode: SocketBridge, BridgePorts: []uint16{0}},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestSandboxInitBridgeMode runs probes under the bridge's confinement:
// what the bridge does (bind its port, reach the proxy's unix socket)
// works, and connecting to any TCP port, other ports, datagram sockets,
// files outside its read set and spawning are denied. Each denial has an
// unconfined control beside it.
func TestSandboxInitBridgeMode(t *testing.T) {
	requireSeccomp(t)
	requireLandlock(t, 6)
	port, portAddr := freePort(t)
	_, otherAddr := freePort(t)
	_, upstream := tcpListener(t)
	spec := bridgeSpec(t, port)

	sockDir := t.TempDir()
	sock := filepath.Join(sockDir, "proxy.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	go func() {
		for {
			c, err := ul.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name      string
		probe     []string
		confined  string // want under the bridge spec
		unconfCtl bool   // also run unconfined and want ok
	}{
		{"listen on the bridge port", []string{"listen", "tcp4", portAddr}, "ok", true},
		{"dial the proxy socket", []string{"connect", "unix", sock}, "ok", true},
		{"status", []string{"status"}, "ok", false},
		{"listen on another port", []string{"listen", "tcp4", otherAddr}, "EACCES", true},
		{"connect to a host loopback port", []string{"connect", "tcp4", upstream}, "EACCES", true},
		{"udp socket", []string{"connect", "udp4", upstream}, "EPERM", true},
		{"read a file outside", []string{"read", secret}, "EACCES", true},
		{"write a file", []string{"write", filepath.Join(sockDir, "new")}, "EACCES", true},
		{"fork", []string{"fork"}, "EPERM", true},
		{"ptrace", []string{"syscall", "ptrace"}, "EPERM", false},
		{"unshare", []string{"syscall", "unshare"}, "EPERM", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.unconfCtl {
				if got := unconfined(t, c.probe...).result(t); got != "ok" {
					t.Fatalf("control (unconfined): %s", got)
				}
			}
			sp := spec
			if c.name == "status" {
				// The real bridge has no /proc; the probe needs it to report.
				sp.ReadOnly = append(append([]string(nil), spec.ReadOnly...), "/proc")
			}
			r := sandboxed(t, sp, c.probe...)
			if got := r.result(t); got != c.confined {
				t.Errorf("confined: %s, want %s\n%s", got, c.confined, r.stderr)
			}
			if c.name == "status" && (!strings.Contains(r.stdout, "Seccomp: 2") || !strings.Contains(r.stdout, "NoNewPrivs: 1")) {
				t.Errorf("bridge status:\n%s", r.stdout)
			}
		})
	}
	t.Run("mptcp", func(t *testing.T) {
		if ctl := unconfined(t, "mptcp").result(t); ctl != "ok" {
			t.Skipf("MPTCP unavailable here (%s)", ctl)
		}
		if got := sandboxed(t, spec, "mptcp").result(t); got != "EPROTONOSUPPORT" {
			t.Errorf("MPTCP socket: %s, want EPROTONOSUPPORT", got)
		}
	})
}

func TestLockBridge(t *testing.T) {
	requireSeccomp(t)
	r := run(t, []string{testExe(t), bridgeLockHelper})
	for _, want := range []string{"BEFORE-BIND ok", "AFTER-BIND EPERM", "UNFILTERED 0", "EXEC EPERM"} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("missing %q in:\n%s\nstderr: %s", want, r.stdout, r.stderr)
		}
	}
}
