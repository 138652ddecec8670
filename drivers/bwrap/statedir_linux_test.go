//go:build linux

package bwrap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// stateDriver is a test driver with a private state directory at
// parent/state (never the shared default: a failing run must not leave a
// poisoned /etc view for other tests).
func stateDriver(t *testing.T, parent string) *Driver {
	t.Helper()
	opts := options{}
	if m := os.Getenv("ALEPH_TEST_PREPARED"); m != "" {
		opts.Prepared = preparedMode(m)
	}
	if os.Getenv("ALEPH_TEST_SESSION") == "on" {
		opts.SessionSandbox = sessionSandboxAlways
	}
	state := filepath.Join(parent, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := newDriver(config{Options: opts, InitBinary: driverBin, DriverBinary: driverBin, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// A write grant or workspace that reaches the driver's state directory
// (its parent, as `--write ~/run` or `--write /run` does, the directory
// itself, or something inside it) is refused with a typed error naming
// it; a grant beside it, and a read grant over it, are not.
func TestStateDirGrantRefused(t *testing.T) {
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") != "" {
		t.Skip("drives the bwrap tier; the Landlock tier runs the same check (enforceable) before every command")
	}
	runDir := newWorkspace(t) // plays ~/run or /run
	d := stateDriver(t, runDir)
	ws := newWorkspace(t)
	beside := filepath.Join(runDir, "beside")
	if err := os.Mkdir(beside, 0o755); err != nil {
		t.Fatal(err)
	}
	// The attack: with the parent granted, the command appends to the
	// /etc view that later commands read as /etc/hosts.
	attack := `for h in "$0"/state/etc-views/*/etc/hosts; do echo "6.6.6.6 poisoned" >> "$h" && echo wrote; done`
	r := drvRun(t, context.Background(), d, ws, driverapi.Capabilities{SpawnSubprocess: true}, nil, "/bin/true")
	expectOK(t, r) // makes the view
	r = drvRun(t, context.Background(), d, ws, driverapi.Capabilities{SpawnSubprocess: true, FSWrite: []string{runDir}}, nil,
		"/bin/sh", "-c", attack, runDir)
	var ise *driverapi.InvalidSpecError
	if !errors.As(r.err, &ise) || ise.Field != "fs_write" || !strings.Contains(ise.Reason, "state directory") {
		t.Errorf("write grant over the state directory: want an InvalidSpecError on fs_write, got err=%v stdout=%q", r.err, r.stdout)
	}
	later := drvRun(t, context.Background(), d, ws, driverapi.Capabilities{SpawnSubprocess: true}, nil, "/bin/cat", "/etc/hosts")
	expectOK(t, later)
	if strings.Contains(later.stdout, "poisoned") {
		t.Errorf("a later command's /etc/hosts holds the line the earlier one wrote: %q", later.stdout)
	}
	for name, caps := range map[string]driverapi.Capabilities{
		"state dir":    {FSWrite: []string{d.cfg.StateDir}},
		"inside state": {FSWrite: []string{filepath.Join(d.cfg.StateDir, "etc-views")}},
	} {
		_, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws})
		if !errors.As(err, &ise) || !strings.Contains(ise.Reason, "state directory") {
			t.Errorf("%s: want an InvalidSpecError, got %v", name, err)
		}
	}
	_, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: runDir, Cwd: runDir})
	if !errors.As(err, &ise) || ise.Field != "workspace" {
		t.Errorf("workspace over the state directory: want an InvalidSpecError on workspace, got %v", err)
	}
	// Positive controls: a grant beside it, a read grant over it.
	r = drvRun(t, context.Background(), d, ws, driverapi.Capabilities{SpawnSubprocess: true, FSWrite: []string{beside}, FSRead: []string{runDir}}, nil,
		"/bin/sh", "-c", "echo ok > "+beside+"/f && ls "+runDir+" >/dev/null && echo fine")
	expectOK(t, r)
	if r.stdout != "fine\n" {
		t.Errorf("positive control: %q", r.stdout)
	}
	// A plan forged past ProfileFor is refused at Run too.
	plan, err := buildPlan(driverapi.ProfileRequest{Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{FSWrite: []string{runDir}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.enforceable(plan); !errors.As(err, &ise) {
		t.Errorf("forged plan: want an InvalidSpecError from enforceable, got %v", err)
	}
}

// A view whose content no longer matches the host's entries (a line added
// to its hosts file by whoever could write there) is not used, neither by
// a driver taking it up nor by the driver using it, once it looks again;
// an intact view is taken up as before.
func TestEtcViewContentChecked(t *testing.T) {
	parent := newWorkspace(t)
	d1 := stateDriver(t, parent)
	ws := newWorkspace(t)
	p := launchPlan{System: systemReadSet(), Workspace: ws}
	view := d1.etcViewFor(p)
	if view == "" {
		t.Fatal("control: no view for an ordinary plan")
	}
	if v := stateDriver(t, parent).etcViewFor(p); v != view {
		t.Fatalf("control: an intact view is not taken up (%q, want %q)", v, view)
	}
	var victim string
	for _, e := range p.etcEntries() {
		if fi, err := os.Stat(filepath.Join(filepath.Dir(view), e)); err == nil && fi.Mode().IsRegular() {
			victim = filepath.Join(filepath.Dir(view), e)
			break
		}
	}
	if victim == "" {
		t.Skip("no regular file in the /etc read set here")
	}
	f, err := os.OpenFile(victim, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("6.6.6.6 poisoned\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if v := stateDriver(t, parent).etcViewFor(p); v != "" {
		t.Errorf("a tampered view (%s) was taken up by a new driver: %s", victim, v)
	}
	// The driver that uses it finds out at its next deep check.
	d1.etc.mu.Lock()
	d1.etc.checked = d1.etc.checked.Add(-2 * etcDeepEvery)
	d1.etc.mu.Unlock()
	if v := d1.etcViewFor(p); v != "" {
		t.Errorf("a tampered view stayed in use: %s", v)
	}
	args := strings.Join(p.BwrapFlags(ws, "", nil, nil), " ")
	if !strings.Contains(args, "--ro-bind /etc/passwd /etc/passwd") {
		t.Errorf("entries not bound one by one: %s", args)
	}
}
