//go:build linux

package bwrap

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// hostDevStat is what the test compares of a host device node.
type hostDevStat struct {
	mode       uint32
	uid, gid   uint32
	mtim, ctim syscall.Timespec
}

func statHostDev(t *testing.T, p string) hostDevStat {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return hostDevStat{mode: st.Mode, uid: st.Uid, gid: st.Gid, mtim: st.Mtim, ctim: st.Ctim}
}

// The device nodes bound into a bwrap-tier sandbox are the host's inodes:
// the command must not change their mode, owner or times (as root it owns
// them), while reading and writing the devices keeps working. Run as root,
// as an unprivileged user (scripts/test-unprivileged.sh) and with prepared
// sandboxes (scripts/test-prepared.sh).
func TestDeviceNodesImmutableInside(t *testing.T) {
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") != "" {
		t.Skip("the Landlock tier has no /dev of its own: TestTierMetadata covers its devices")
	}
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	before := map[string]hostDevStat{}
	for _, n := range bwrapDevNodes() {
		p := filepath.Join("/dev", n)
		before[p] = statHostDev(t, p)
	}
	// Put back whatever a failing run changed: the host's /dev/full must
	// not stay 0600 after this test fails.
	t.Cleanup(func() {
		for p, st := range before {
			_ = os.Chmod(p, os.FileMode(st.mode&0o777))
			_ = os.Chown(p, int(st.uid), int(st.gid))
		}
	})
	script := `
for n in null zero full random urandom tty; do
	if chmod 0600 /dev/$n 2>>err; then echo "chmod $n changed"; fi
	if touch -d 2001-01-01 /dev/$n 2>>err; then echo "touch $n changed"; fi
	if chown "$(id -u):$(id -g)" /dev/$n 2>>err; then echo "chown $n changed"; fi
done
# Positive controls: the devices still work, and chmod itself works where
# the command may write.
echo discard > /dev/null && echo null-ok
test "$(head -c 5 /dev/zero | wc -c)" = 5 && echo zero-ok
test "$(head -c 5 /dev/urandom | wc -c)" = 5 && echo urandom-ok
echo x 2>/dev/null > /dev/full || echo full-enospc
touch f && chmod 0600 f && test "$(stat -c %a f)" = 600 && echo ws-chmod-ok
cat err
`
	r := drvSh(t, d, ws, script)
	expectOK(t, r)
	for _, want := range []string{"null-ok", "zero-ok", "urandom-ok", "full-enospc", "ws-chmod-ok"} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Fatalf("positive control %s missing: stdout %q stderr %q", want, r.stdout, r.stderr)
		}
	}
	if strings.Contains(r.stdout, "changed") {
		t.Errorf("a host device node was changed from inside: %q", r.stdout)
	}
	// The attempts really ran and were refused by the OS: read-only mount
	// for the root driver, not the owner for an unprivileged one.
	for _, n := range bwrapDevNodes() {
		for _, verb := range []string{"chmod: changing permissions of", "chown: changing ownership of"} {
			line := verb + " '/dev/" + n + "': "
			if !strings.Contains(r.stdout, line+"Read-only file system") && !strings.Contains(r.stdout, line+"Operation not permitted") {
				t.Errorf("no refusal by the OS for %q: %q", line, r.stdout)
			}
		}
	}
	if os.Geteuid() == 0 && !strings.Contains(r.stdout, "chmod: changing permissions of '/dev/full': Read-only file system") {
		t.Errorf("as root, chmod of /dev/full should meet a read-only mount: %q", r.stdout)
	}
	for p, st := range before {
		if now := statHostDev(t, p); now != st {
			t.Errorf("host %s changed: %+v -> %+v", p, st, now)
		}
	}
}

// In the bwrap tier, everything outside the write grants is a read-only
// bind mount: the metadata of a read-granted host file the uid owns cannot
// be changed, by path or by a read-only descriptor (EROFS), and a directory
// outside every grant is not there to watch; the same calls work in the
// workspace, in the same command. Run as root and unprivileged.
func TestBwrapTierMetadataReadOnly(t *testing.T) {
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") != "" {
		t.Skip("bwrap tier only: TestTierMetadataGuarded covers the Landlock tier")
	}
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	host := newWorkspace(t)
	secret := newWorkspace(t)
	target := filepath.Join(host, "owned")
	if err := os.WriteFile(target, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	wsTarget := filepath.Join(ws, "mine")
	if err := os.WriteFile(wsTarget, []byte("ws"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(ws, "user.probe", []byte("1"), 0); err != nil {
		t.Skipf("user xattrs not supported on %s: %v", ws, err)
	}
	before := statHostDev(t, target)
	probe := filepath.Join(ws, "probe.py")
	if err := os.WriteFile(probe, []byte(metadataProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "python3 " + probe + " " + target + " " + secret + " host; python3 " + probe + " " + wsTarget + " " + ws + " ws"
	caps := driverapi.Capabilities{SpawnSubprocess: true, FSRead: []string{host}}
	r := drvRun(t, t.Context(), d, ws, caps, nil, "/bin/sh", "-c", script)
	if r.err != nil {
		t.Fatalf("run: %v", r.err)
	}
	for _, what := range []string{"chmod", "fchmod", "utimes", "futimens", "setxattr", "fsetxattr", "chown", "fchown"} {
		if !strings.Contains(r.stdout, "ws "+what+" ok\n") {
			t.Errorf("positive control: %s in the workspace failed: %q (stderr %q)", what, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stdout, "host "+what+" refused EROFS\n") {
			t.Errorf("%s on a read-granted file: want EROFS: %q (stderr %q)", what, r.stdout, r.stderr)
		}
	}
	if !strings.Contains(r.stdout, "ws inotify ok\n") || !strings.Contains(r.stdout, "host inotify refused ENOENT\n") {
		t.Errorf("inotify: want a working watch in the workspace and no directory outside the grants: %q", r.stdout)
	}
	if now := statHostDev(t, target); now != before {
		t.Errorf("host file changed: %+v -> %+v", before, now)
	}
}
