//go:build linux

package bwrap

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// etcReleaseDriver is a driver with a private state directory (so the views
// on disk are its own) whose /etc entries are one stand-in file the test
// changes (etcEntriesHook).
func etcReleaseDriver(t *testing.T, opts options) (d *Driver, change func()) {
	t.Helper()
	state := filepath.Join(newWorkspace(t), "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := newDriver(config{Options: opts, InitBinary: driverBin, DriverBinary: driverBin, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	f := filepath.Join(t.TempDir(), "hosts")
	gen := 0
	change = func() {
		t.Helper()
		gen++
		if err := os.WriteFile(f, []byte(fmt.Sprintf("generation %d\n", gen)), 0o644); err != nil {
			t.Fatal(err)
		}
		// A distinct mtime each time, whatever the clock's resolution.
		mt := time.Unix(1_700_000_000+int64(gen), 0)
		if err := os.Chtimes(f, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	change()
	d.etcEntriesHook = func() []string { return []string{f} }
	return d, change
}

// onDiskViews are the views in d's view root.
func onDiskViews(t *testing.T, d *Driver) []string {
	t.Helper()
	ents, err := os.ReadDir(d.etcViewRoot())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), "tmp-") && !strings.HasPrefix(e.Name(), "trash-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func currentView(d *Driver) string {
	d.etc.mu.Lock()
	defer d.etc.mu.Unlock()
	return d.etc.dir
}

// A driver holds the current /etc view and those its sandboxes bind, no
// more: with /etc changing between commands, each old view is released
// (lock closed, directory removed) once no sandbox binds it, so the views
// held and on disk stay at 1 however many changes; a view a running
// command binds stays until that command has ended, then goes.
func TestEtcViewsReleased(t *testing.T) {
	d, change := etcReleaseDriver(t, options{Prepared: preparedOff})
	ws := newWorkspace(t)
	seen := map[string]bool{}
	for i := 0; i < 6; i++ {
		change()
		expectOK(t, drvSh(t, d, ws, "true"))
		cur := currentView(d)
		if cur == "" {
			t.Fatal("control: no /etc view used")
		}
		seen[cur] = true
		if n, disk := d.etc.heldCount(), onDiskViews(t, d); n != 1 || len(disk) != 1 {
			t.Fatalf("after change %d: %d views held, on disk %v; want the current one alone", i+1, n, disk)
		}
	}
	// Positive control: every change made a new view.
	if len(seen) != 6 {
		t.Fatalf("%d distinct views for 6 changes of the entries", len(seen))
	}

	// A running command keeps its view.
	fifo := filepath.Join(ws, "go")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan drvResult, 1)
	go func() { done <- drvSh(t, d, ws, "echo started > started; read x < go; echo ended") }()
	waitUntil(t, func() bool { _, err := os.Stat(filepath.Join(ws, "started")); return err == nil })
	inUse := currentView(d)
	change()
	expectOK(t, drvSh(t, d, ws, "true"))
	if cur := currentView(d); cur == inUse || cur == "" {
		t.Fatalf("control: the change made no new view (%q)", cur)
	}
	if _, err := os.Lstat(inUse); err != nil || d.etc.heldCount() != 2 {
		t.Fatalf("the view of a running command was released under it (%v; %d held)", err, d.etc.heldCount())
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("go\n")
	w.Close()
	if r := <-done; r.err != nil || r.stdout != "ended\n" {
		t.Fatalf("the running command: %+v", r)
	}
	if _, err := os.Lstat(inUse); err == nil || d.etc.heldCount() != 1 || len(onDiskViews(t, d)) != 1 {
		t.Fatalf("the ended command's view kept: %v, %d held, on disk %v", err, d.etc.heldCount(), onDiskViews(t, d))
	}
}

// A prepared sandbox waiting in the pool keeps the view it was built with
// bound: a change of /etc does not release it while the sandbox waits; the
// sandbox found stale at the next command ends, and its view goes with it.
func TestEtcViewsReleasedPool(t *testing.T) {
	needPreparable(t)
	d, change := etcReleaseDriver(t, options{Prepared: preparedAuto})
	ws := newWorkspace(t)
	fillPool(t, d, ws)
	pooled := currentView(d)
	if pooled == "" {
		t.Fatal("control: no /etc view used")
	}
	change()
	// The driver takes the new view up (as a command's plan would), while
	// the pooled sandbox still binds the old one.
	if v := d.etcViewFor(launchPlan{System: systemReadSet(), Workspace: ws}); v == "" || v == pooled {
		t.Fatalf("control: the change made no new view (%q)", v)
	}
	if _, err := os.Lstat(pooled); err != nil || d.etc.heldCount() != 2 {
		t.Fatalf("the view of a pooled sandbox was released under it (%v; %d held)", err, d.etc.heldCount())
	}
	// The next commands find the pooled sandboxes stale (the pool may
	// hold more than one); each ends, and with the last of them the view
	// goes. A refill binds the current view: then one held.
	deadline := time.Now().Add(30 * time.Second)
	for {
		expectOK(t, drvSh(t, d, ws, "true"))
		_, err := os.Lstat(pooled)
		if err != nil && d.etc.heldCount() == 1 && len(onDiskViews(t, d)) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stale pooled sandboxes' view kept: %v, %d held, on disk %v, pool %+v", err, d.etc.heldCount(), onDiskViews(t, d), d.PreparedStats())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st := d.PreparedStats(); st.Stale == 0 {
		t.Fatalf("control: no pooled sandbox was found stale: %+v", st)
	}
}
