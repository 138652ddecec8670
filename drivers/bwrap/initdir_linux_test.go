//go:build linux

package bwrap

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// TestReadGrantOfRunKeepsInitProtected: a read grant of /run, the parent
// of the sandbox's own initDir, sets up (bwrap once failed to create the
// init binary's mount point in the grant's read-only mount) and the
// command runs with the rest of /run visible, while its init binary stays
// read-only and nothing can be added beside it; what the host keeps in
// initDir (root's state directory) is not visible. Nothing below initDir
// is granted.
func TestReadGrantOfRunKeepsInitProtected(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	if _, err := os.Stat("/run"); err != nil {
		t.Skipf("no /run on this host: %v", err)
	}
	hostEntries, err := os.ReadDir("/run")
	if err != nil {
		t.Fatal(err)
	}
	var other string
	for _, e := range hostEntries {
		if e.Name() != "aleph-sandbox" {
			other = e.Name()
			break
		}
	}
	caps := driverapi.Capabilities{SpawnSubprocess: true, FSRead: []string{"/run"}}
	script := `echo ran
ls -A ` + initDir + `
[ -e /run/` + other + ` ] && echo other-visible
echo x >> ` + initPath + ` 2>/dev/null && echo init-writable
echo x > ` + initDir + `/new 2>/dev/null && echo dir-writable
echo x > ` + ws + `/ok && echo ws-writable
true`
	r := drvRun(t, t.Context(), d, ws, caps, nil, "/bin/sh", "-c", script)
	expectOK(t, r)
	if !strings.HasPrefix(r.stdout, "ran\n") {
		t.Fatalf("the command did not run: %q (stderr %q)", r.stdout, r.stderr)
	}
	// Positive controls: the grant is there, the workspace is writable.
	if other != "" && !strings.Contains(r.stdout, "other-visible\n") {
		t.Errorf("the grant of /run does not show /run/%s: %q", other, r.stdout)
	}
	if !strings.Contains(r.stdout, "ws-writable\n") {
		t.Errorf("the workspace is not writable: %q (stderr %q)", r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "init-writable") || strings.Contains(r.stdout, "dir-writable") {
		t.Errorf("the sandbox's own directory is writable: %q", r.stdout)
	}
	// Only the init binary: no host state (placeholders, etc-views,
	// probe cache of root's /run/aleph-sandbox) leaks through.
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) < 2 || lines[1] != "init" || strings.Contains(r.stdout, "placeholders") || strings.Contains(r.stdout, "probe-cache") {
		t.Errorf("the sandbox's own directory shows more than its init binary: %q", r.stdout)
	}

	// Below initDir nothing is granted: a typed refusal naming the path.
	_, err = d.ProfileFor(t.Context(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws,
		Capabilities: driverapi.Capabilities{FSRead: []string{initDir}}})
	if _, statErr := os.Stat(initDir); statErr == nil {
		var ise *driverapi.InvalidSpecError
		if !errors.As(err, &ise) || !strings.Contains(ise.Reason, initDir) {
			t.Errorf("a grant of %s: want an InvalidSpecError naming it, got %v", initDir, err)
		}
	}
}

// TestTierReadGrantOfRun: in the Landlock tier (no mounts at all) a read
// grant of /run runs too, and stays read-only there: nothing can be
// created in it, the workspace stays writable (positive control).
func TestTierReadGrantOfRun(t *testing.T) {
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	caps := driverapi.Capabilities{SpawnSubprocess: true, FSRead: []string{"/run"}}
	script := `echo ran
ls -A /run >/dev/null && echo run-listed
echo x > /run/.aleph-tier-probe-$$ 2>/dev/null && echo run-writable
echo x > ` + ws + `/ok && echo ws-writable
true`
	r := drvRun(t, t.Context(), d, ws, caps, nil, "/bin/sh", "-c", script)
	expectOK(t, r)
	if !strings.HasPrefix(r.stdout, "ran\n") || !strings.Contains(r.stdout, "run-listed\n") || !strings.Contains(r.stdout, "ws-writable\n") {
		t.Fatalf("the command did not run with /run readable and the workspace writable: %q (stderr %q)", r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "run-writable") {
		t.Errorf("a read grant of /run is writable in the tier: %q", r.stdout)
	}
}

// TestReadGrantOfRunWithProxySocket: with allow_hosts the proxy socket is
// bound into the sandbox's own directory too; under a read grant of /run
// it is there and the route through it works.
func TestReadGrantOfRunWithProxySocket(t *testing.T) {
	d := testDriver(t, options{})
	ctx := t.Context()
	hc, err := d.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !hc.Has(driverapi.FeatureNetworkViaProxy) {
		t.Skipf("allow_hosts is unavailable on this host: %+v", hc.Unavailable)
	}
	ws := newWorkspace(t)
	sock := fakeProxy(t)
	req := driverapi.Capabilities{SpawnSubprocess: true, FSRead: []string{"/run"},
		Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com"}}}
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: req, Workspace: ws, Cwd: ws, Proxy: &driverapi.ProxyEndpoint{UnixSocket: sock}})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb lockedBuf
	exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", "ls -A " + initDir + "; curl -s --max-time 10 -x http://127.0.0.1:3128 http://example.com/x"},
		Cwd: ws, Profile: prof, Timeout: 30 * time.Second, MaxOutputBytes: 1 << 16, Env: pathEnv()}, driverapi.Streams{Stdout: &out, Stderr: &errb})
	if err != nil || exit.ExitCode != 0 {
		t.Fatalf("run: %v %+v stdout %q stderr %q", err, exit, out.String(), errb.String())
	}
	if !strings.HasPrefix(out.String(), "init\nproxy.sock\n") || !strings.Contains(out.String(), "via-proxy GET http://example.com/x") {
		t.Fatalf("want the sandbox's own init and proxy socket and the proxy's answer: %q (stderr %q)", out.String(), errb.String())
	}
}
