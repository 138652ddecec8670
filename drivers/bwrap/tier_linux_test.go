//go:build linux

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/internal/netnstest"
)

// refusingBwrap is a bwrap that works (--version answers) but cannot
// create namespaces, as in an unprivileged container: the driver's trial
// sandbox fails exactly as it does there.
func refusingBwrap(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bwrap")
	script := "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'bubblewrap 0.8.0'; exit 0; }\n" +
		"echo 'bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces.' >&2\nexit 1\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// tierDriver is a driver on a host where bwrap cannot create namespaces,
// with the Landlock tier on, or skips where this kernel cannot give the
// tier (then the refusal is what TestTierMinimumSet checks). Under
// scripts/test-nonamespaces.sh the real bwrap is used: it fails there.
func tierDriver(t testing.TB, opts options) *Driver {
	t.Helper()
	if landlockABI() < minTierLandlockABI || !seccompAvailable() {
		t.Skipf("the Landlock tier needs Landlock ABI >= %d and seccomp; this kernel has ABI %d", minTierLandlockABI, landlockABI())
	}
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") == "" {
		opts.BwrapPath = refusingBwrap(t)
	}
	opts.Fallback = fallbackLandlock
	d := testDriver(t, opts)
	hc, err := d.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if hc.Details["tier"] != tierLandlock {
		t.Fatalf("tier %q, want landlock (unavailable: %+v)", hc.Details["tier"], hc.Unavailable)
	}
	return d
}

func TestTierSmoke(t *testing.T) {
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	r := drvSh(t, d, ws, "echo hello; echo err >&2; exit 3")
	if r.err != nil || r.exit.ExitCode != 3 || r.stdout != "hello\n" || r.stderr != "err\n" {
		t.Fatalf("got %+v", r)
	}
	if r.exit.Details["tier"] != tierLandlock {
		t.Fatalf("exit details %v: want tier landlock", r.exit.Details)
	}
}

// tierRun runs a shell snippet in the Landlock tier with network mode
// mode, subprocesses allowed.
func tierRun(t *testing.T, d *Driver, ws string, mode driverapi.NetworkMode, script string) drvResult {
	t.Helper()
	caps := driverapi.Capabilities{SpawnSubprocess: true, Network: driverapi.NetworkPolicy{Mode: mode}}
	return drvRun(t, context.Background(), d, ws, caps, nil, "/bin/sh", "-c", script)
}

// Host files outside the allowed roots: neither readable nor writable, and
// nothing can be created beside them; the workspace is readable and
// writable (positive control), the system read set readable.
func TestTierFilesystem(t *testing.T) {
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	dir, err := os.MkdirTemp("/var/tmp", "aleph-tier-canary-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	canary := filepath.Join(dir, "canary")
	if err := os.WriteFile(canary, []byte("secret-canary\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := tierRun(t, d, ws, driverapi.NetworkNone, "echo ran; echo data > "+ws+"/new && cat "+ws+"/new && head -c 4 /etc/passwd && echo; "+
		"cat "+canary+" && echo READ; echo x >> "+canary+" && echo WROTE; echo x > "+dir+"/other && echo CREATED; "+
		"touch /tmp/aleph-tier-tmp-probe && echo TMP; true")
	expectOK(t, r)
	for _, want := range []string{"ran\n", "data\n", "root\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("positive control %q missing: stdout %q stderr %q", want, r.stdout, r.stderr)
		}
	}
	for _, bad := range []string{"secret-canary", "READ", "WROTE", "CREATED", "TMP"} {
		if strings.Contains(r.stdout, bad) {
			t.Fatalf("%s: the host outside the allowed roots was reached: %q", bad, r.stdout)
		}
	}
	if b, _ := os.ReadFile(canary); string(b) != "secret-canary\n" {
		t.Fatalf("canary changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "other")); err == nil {
		t.Fatal("a file was created beside the canary")
	}
	if b, err := os.ReadFile(filepath.Join(ws, "new")); err != nil || string(b) != "data\n" {
		t.Fatalf("workspace write did not land: %q %v", b, err)
	}
	os.Remove("/tmp/aleph-tier-tmp-probe")
}

// The environment is exactly the given one. No subprocesses: the path
// where the supervisor starts a plain sandbox-init for the target.
func TestTierEnvironment(t *testing.T) {
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	env := []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "ONLY", Value: "this"}}
	r := drvRun(t, context.Background(), d, ws, driverapi.Capabilities{}, env, "/usr/bin/env")
	expectOK(t, r)
	if r.stdout != "PATH=/usr/bin:/bin\nONLY=this\n" {
		t.Fatalf("env %q", r.stdout)
	}
	// No subprocess: fork is refused to the target.
	r = drvRun(t, context.Background(), d, ws, driverapi.Capabilities{}, env, "/bin/sh", "-c", "echo ran; /bin/true && echo SPAWNED")
	if r.err != nil || !strings.Contains(r.stdout, "ran") || strings.Contains(r.stdout, "SPAWNED") || !strings.Contains(r.stderr, "fork") {
		t.Fatalf("no-spawn: %q %q", r.stdout, r.stderr)
	}
}

// Every capability is gone: a root command can neither read a file its
// mode closes to the owner (CAP_DAC_OVERRIDE) nor give a file away
// (CAP_CHOWN), which the root test itself can (positive control); a
// non-root run has none to lose, and the same checks hold.
func TestTierCapabilitiesDropped(t *testing.T) {
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	closed := filepath.Join(ws, "closed")
	if err := os.WriteFile(closed, []byte("closed-data\n"), 0o000); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "mine"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if b, err := os.ReadFile(closed); err != nil || string(b) != "closed-data\n" {
			t.Fatalf("control: root reads a mode-000 file: %q %v", b, err)
		}
	}
	r := tierRun(t, d, ws, driverapi.NetworkNone, "echo ran; cat closed && echo DAC; chown 65534 mine && echo CHOWN; "+
		"echo ok > mine && echo WRITE; true")
	expectOK(t, r)
	if !strings.Contains(r.stdout, "ran") || !strings.Contains(r.stdout, "WRITE") {
		t.Fatalf("control: %q %q", r.stdout, r.stderr)
	}
	for _, bad := range []string{"closed-data", "DAC", "CHOWN"} {
		if strings.Contains(r.stdout, bad) {
			t.Fatalf("%s: a capability was left: %q", bad, r.stdout)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(ws, "mine"), &st); err != nil || st.Uid == 65534 {
		t.Fatalf("owner %d %v", st.Uid, err)
	}
}

// Host processes are not listed (the host's /proc is unreadable) and the
// host's SysV IPC objects cannot be reached; the command runs.
func TestTierHostProcessesAndIPC(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3")
	}
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	r := tierRun(t, d, ws, driverapi.NetworkNone, "echo ran; ls /proc >/dev/null && echo LISTED; cat /proc/1/cmdline && echo INIT; "+
		"/usr/bin/python3 -c 'import ctypes,sys; r=ctypes.CDLL(None,use_errno=True).shmget(0x7a1e7a1e,0,0); print(\"shm\", r, ctypes.get_errno())'")
	expectOK(t, r)
	if !strings.Contains(r.stdout, "ran") || strings.Contains(r.stdout, "LISTED") || strings.Contains(r.stdout, "INIT") {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	// A look-up only (no IPC_CREAT): EPERM is the seccomp denial; a
	// reachable host IPC namespace would answer ENOENT (2) or find it.
	if !strings.Contains(r.stdout, "shm -1 1\n") {
		t.Fatalf("shmget not refused with EPERM: %q %q", r.stdout, r.stderr)
	}
}

// Network none: TCP, UDP and unix sockets are all refused, socketpair
// works; network all reaches the host's TCP and UDP (positive control) but
// still no host unix socket, even one in a readable grant (no mount
// namespace hides a docker.sock).
func TestTierNetwork(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 for the socket probes")
	}
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	tcp := netnstest.Stream(t, "tcp4", "127.0.0.1:0", "tcp-hello")
	udp, gotUDP := netnstest.Datagram(t, "udp4", "127.0.0.1:0")
	sockDir := t.TempDir()
	sockPath := filepath.Join(sockDir, "host.sock")
	ul, err := net.Listen("unix", sockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	accepted := make(chan bool, 4)
	go func() {
		for {
			c, err := ul.Accept()
			if err != nil {
				return
			}
			accepted <- true
			c.Close()
		}
	}()
	// Control: the host socket is live.
	if c, err := net.Dial("unix", sockPath); err != nil {
		t.Fatalf("control: host unix socket: %v", err)
	} else {
		c.Close()
		<-accepted
	}
	tcpPort := tcp.Addr().(*net.TCPAddr).Port
	udpPort := udp.LocalAddr().(*net.UDPAddr).Port
	probe := fmt.Sprintf(`
import socket
print("ran")
def t(name, f):
    try:
        print(name, f())
    except OSError as e:
        print(name, "denied", e.errno)
t("tcp", lambda: socket.create_connection(("127.0.0.1", %d), timeout=3).recv(9).decode())
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"udp-hello", ("127.0.0.1", %d))
    return "sent"
t("udp", udp)
def unix():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(%q)
    return "connected"
t("unix", unix)
def pair():
    a, b = socket.socketpair()
    a.send(b"p")
    return b.recv(1).decode()
t("pair", pair)
`, tcpPort, udpPort, sockPath)
	if err := os.WriteFile(filepath.Join(ws, "probe.py"), []byte(probe), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(mode driverapi.NetworkMode) string {
		caps := driverapi.Capabilities{SpawnSubprocess: true, Network: driverapi.NetworkPolicy{Mode: mode},
			FSRead: []string{sockDir}}
		r := drvRun(t, context.Background(), d, ws, caps, nil, "/usr/bin/python3", filepath.Join(ws, "probe.py"))
		expectOK(t, r)
		if !strings.HasPrefix(r.stdout, "ran\n") {
			t.Fatalf("probe did not run: %q %q", r.stdout, r.stderr)
		}
		return r.stdout
	}
	none := run(driverapi.NetworkNone)
	for _, want := range []string{"tcp denied", "udp denied", "unix denied", "pair p"} {
		if !strings.Contains(none, want) {
			t.Fatalf("network none: want %q in %q", want, none)
		}
	}
	all := run(driverapi.NetworkAllowAll)
	for _, want := range []string{"tcp tcp-hello", "udp sent", "unix denied", "pair p"} {
		if !strings.Contains(all, want) {
			t.Fatalf("network all: want %q in %q", want, all)
		}
	}
	select {
	case m := <-gotUDP:
		if m != "udp-hello" {
			t.Fatalf("udp got %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("network all: the UDP datagram never arrived (positive control)")
	}
	select {
	case <-accepted:
		t.Fatal("the host unix socket accepted a connection from the sandbox")
	default:
	}
}

// No user namespace (nor any other) can be made; clone3 answers ENOSYS.
func TestTierNoNamespaces(t *testing.T) {
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	r := tierRun(t, d, ws, driverapi.NetworkNone, "echo ran; unshare -U true && echo USERNS; unshare -n true && echo NETNS; true")
	expectOK(t, r)
	if !strings.Contains(r.stdout, "ran") || strings.Contains(r.stdout, "USERNS") || strings.Contains(r.stdout, "NETNS") {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "unshare failed") && !strings.Contains(r.stderr, "Operation not permitted") {
		t.Fatalf("unshare should have been refused by the kernel: %q", r.stderr)
	}
}

// Set-id bits cannot be set; plain modes can (positive control).
func TestTierSetIDDenied(t *testing.T) {
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	r := tierRun(t, d, ws, driverapi.NetworkNone, "touch f && chmod 755 f && echo PLAIN; chmod u+s f && echo SETUID; chmod g+s f && echo SETGID; true")
	expectOK(t, r)
	if !strings.Contains(r.stdout, "PLAIN") || strings.Contains(r.stdout, "SETUID") || strings.Contains(r.stdout, "SETGID") {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if fi, err := os.Stat(filepath.Join(ws, "f")); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v %v", fi.Mode(), err)
	}
}

// The command can stat the driver's /proc entry (no PID namespace; stat is
// not governed by Landlock) but can neither signal the driver nor read its
// environment, memory or descriptors; it can signal its own child
// (positive control).
func TestTierCannotReachDriver(t *testing.T) {
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	pid := strconv.Itoa(os.Getpid())
	r := tierRun(t, d, ws, driverapi.NetworkNone, "sleep 30 & c=$!; kill $c && echo CHILD-KILLED; "+
		"test -d /proc/"+pid+" && echo VISIBLE; kill -0 "+pid+" && echo SIGNALLED; "+
		"cat /proc/"+pid+"/environ >/dev/null && echo ENVIRON; head -c1 /proc/"+pid+"/mem >/dev/null && echo MEM; "+
		"readlink /proc/"+pid+"/fd/0 && echo FDS; readlink /proc/"+pid+"/cwd && echo CWD; true")
	expectOK(t, r)
	for _, want := range []string{"CHILD-KILLED", "VISIBLE"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("want %s: %q %q", want, r.stdout, r.stderr)
		}
	}
	for _, bad := range []string{"SIGNALLED", "ENVIRON", "MEM", "FDS", "CWD"} {
		if strings.Contains(r.stdout, bad) {
			t.Fatalf("%s: the command reached the driver: %q", bad, r.stdout)
		}
	}
}

// The process group is inescapable (setsid and setpgid denied) and is
// killed when the command ends: a background process does not outlive it.
func TestTierTreeKilled(t *testing.T) {
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	r := tierRun(t, d, ws, driverapi.NetworkNone, "setsid sleep 1000 && echo SETSID; "+
		"sleep 1000 >/dev/null 2>&1 & echo $! > pid; echo started")
	expectOK(t, r)
	if strings.Contains(r.stdout, "SETSID") || !strings.Contains(r.stdout, "started") {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(ws, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(p, syscall.SIGKILL)
			t.Fatalf("background process %d outlived the command", p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The timeout ends the whole tree.
func TestTierTimeout(t *testing.T) {
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Capabilities: driverapi.Capabilities{SpawnSubprocess: true}, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	exit, err := d.Run(context.Background(), driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", "sleep 1000 & echo $! > pid; wait"},
		Env: []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}}, Cwd: ws, Profile: prof, Timeout: 500 * time.Millisecond, MaxOutputBytes: 1 << 20},
		driverapi.Streams{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil || !exit.TimedOut {
		t.Fatalf("exit %+v err %v: want timed out", exit, err)
	}
	b, _ := os.ReadFile(filepath.Join(ws, "pid"))
	p, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the command did not run: pid file %q", b)
	}
	// Killed with its group when Run returns; on a loaded machine it may
	// take a moment to be scheduled and die (as in the test above).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(p, syscall.SIGKILL)
			t.Fatalf("background process %d survived the timeout", p)
		}
	}
}

// A workspace with a protected entry is refused (the tier cannot keep it
// read-only); the report says protected_paths is not claimed.
func TestTierProtectedRefused(t *testing.T) {
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	r := tierRun(t, d, ws, driverapi.NetworkNone, "true")
	expectOK(t, r) // control: no protected entry
	if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = tierRun(t, d, ws, driverapi.NetworkNone, "echo RAN > ran")
	var ue *unavailableError
	if !errors.As(r.err, &ue) || ue.Feature != driverapi.FeatureProtectedPaths {
		t.Fatalf("want protected_paths unavailable, got %v (%+v)", r.err, r.exit)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Fatal("the command ran")
	}
	hc, _ := d.Capabilities(context.Background())
	if hc.Has(driverapi.FeatureProtectedPaths) || hc.Has(driverapi.FeatureNetworkViaProxy) {
		t.Fatalf("claims %v", hc.Features)
	}
	for _, f := range []string{driverapi.FeatureFSReadIsolation, driverapi.FeatureFSWriteIsolation, driverapi.FeatureNetworkNone,
		driverapi.FeatureSubprocessControl, driverapi.FeatureProcessTreeKill, driverapi.FeatureEnvIsolation} {
		if !hc.Has(f) {
			t.Fatalf("minimum set: %s not claimed (%v)", f, hc.Features)
		}
	}
	for _, k := range []string{"tmp", "proc", "pid_namespace", "tier_reason"} {
		if hc.Details[k] == "" {
			t.Fatalf("detail %s missing: %v", k, hc.Details)
		}
	}
}

// With the fallback off the driver fails closed, with one line naming the
// setting and the host-side fixes.
func TestTierOffFailsClosed(t *testing.T) {
	d := testDriver(t, options{BwrapPath: refusingBwrap(t)})
	ws := newWorkspace(t)
	_, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err == nil {
		t.Fatal("want a refusal")
	}
	msg := err.Error()
	for _, want := range []string{`sandbox.linux.fallback = "landlock"`, "kernel.unprivileged_userns_clone", "--privileged", "cannot create namespaces"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("message lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Fatalf("not one line: %q", msg)
	}
	hc, _ := d.Capabilities(context.Background())
	if len(hc.Features) != 0 || hc.Details["tier"] != tierBwrap {
		t.Fatalf("claims %v tier %q", hc.Features, hc.Details["tier"])
	}
}

// The bwrap tier records itself too (control for the landlock record).
func TestTierBwrapRecorded(t *testing.T) {
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") == "1" {
		t.Skip("namespaces are refused in this run (scripts/test-nonamespaces.sh)")
	}
	d := testDriver(t, options{})
	r := drvSh(t, d, newWorkspace(t), "true")
	expectOK(t, r)
	if r.exit.Details["tier"] != tierBwrap {
		t.Fatalf("details %v", r.exit.Details)
	}
}

// Under scripts/test-nonamespaces.sh the real bwrap must fail its trial
// (else the run tests nothing), the driver must fail closed without the
// fallback and pick the Landlock tier with it.
func TestNoNamespacesModeReported(t *testing.T) {
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") != "1" {
		t.Skip("run by scripts/test-nonamespaces.sh")
	}
	off := testDriver(t, options{})
	hc, err := off.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(hc.Features) != 0 || len(hc.Unavailable) == 0 || !strings.Contains(hc.Unavailable[0].Reason, "cannot create namespaces") {
		t.Fatalf("namespaces still usable here, or not reported: %+v", hc)
	}
	tierDriver(t, options{})
}

// The tier starts only with its minimum set: Landlock ABI >= 6 (the signal
// scope keeps the driver out of the command's reach) and seccomp.
func TestTierMinimumSet(t *testing.T) {
	for _, c := range []struct {
		abi     int
		seccomp bool
		want    string
	}{
		{0, true, "Landlock ABI >= 6"},
		{5, true, "this kernel offers 5"},
		{7, false, "seccomp"},
		{6, true, ""},
	} {
		err, fix := landlockTierUsable(c.abi, c.seccomp)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("abi %d seccomp %v: refused: %v", c.abi, c.seccomp, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || fix == ""):
			t.Errorf("abi %d seccomp %v: got %v (fix %q), want a refusal naming %q", c.abi, c.seccomp, err, fix, c.want)
		}
	}
}

// The supervisor is not PID 1 here, so nothing of the kernel's keeps
// SIGKILL and SIGSTOP away from it: a command that may spawn runs in a
// Landlock domain nested in the supervisor's, whose signal scope refuses
// both, and ABRT, which the supervisor does not catch there (before, it
// shared the supervisor's domain: kill -9 $PPID ended the supervisor and
// the run was reported as killed by SIGKILL, without its status record).
// Positive controls: the command ran, can signal its own child, and its
// own exit status is reported.
func TestTierCommandCannotSignalSupervisor(t *testing.T) {
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	r := tierRun(t, d, ws, driverapi.NetworkNone, "echo ran; kill -ABRT $PPID 2>/dev/null || echo abrt-refused; kill -STOP $PPID 2>/dev/null || echo stop-refused; "+
		"kill -9 $PPID 2>/dev/null || echo kill-refused; sleep 10 & kill -9 $!; wait $!; echo child $?; exit 7")
	if r.err != nil || r.exit.ExitCode != 7 || r.exit.Signal != 0 || r.stdout != "ran\nabrt-refused\nstop-refused\nkill-refused\nchild 137\n" {
		t.Fatalf("exit %+v err %v stdout %q stderr %q", r.exit, r.err, r.stdout, r.stderr)
	}
}
