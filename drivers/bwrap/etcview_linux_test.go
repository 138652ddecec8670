//go:build linux

package bwrap

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Inside the sandbox /etc holds exactly the system read set's /etc entries,
// with the host's content, through the one view bind; nothing else of the
// host's /etc shows, and the view cannot be written.
func TestEtcViewShowsTheReadSet(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	plan := launchPlan{System: systemReadSet(), Workspace: ws}
	if d.etcViewFor(plan) == "" {
		t.Fatal("no /etc view for an ordinary plan")
	}
	var want []string
	for _, e := range plan.etcEntries() {
		want = append(want, e)
	}
	sort.Strings(want)
	// Every entry is there (positive control), with the host's content.
	// Of the host's own /etc top level, only the read set's names exist
	// inside (Landlock does not let /etc itself be listed: each name is
	// tried).
	top := map[string]bool{}
	for _, e := range want {
		top[strings.SplitN(strings.TrimPrefix(e, "/etc/"), "/", 2)[0]] = true
	}
	hostEtc, err := os.ReadDir("/etc")
	if err != nil {
		t.Fatal(err)
	}
	var others []string
	for _, e := range hostEtc {
		if !top[e.Name()] {
			others = append(others, "/etc/"+e.Name())
		}
	}
	r := drvSh(t, d, ws, "for f in "+strings.Join(want, " ")+"; do test -e $f || echo missing $f; done; "+
		"for f in "+strings.Join(others, " ")+"; do test -e $f && echo visible $f; done; cat /etc/passwd")
	expectOK(t, r)
	if strings.Contains(r.stdout, "missing") || strings.Contains(r.stdout, "visible") {
		t.Fatalf("/etc inside is not the read set: %s", r.stdout)
	}
	host, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(r.stdout, string(host)) {
		t.Fatalf("/etc/passwd inside differs from the host's:\n%s", r.stdout)
	}
	// Read-only: no write, no new entry (and the host's copy is intact).
	r = drvSh(t, d, ws, "echo x >> /etc/passwd; touch /etc/new; mkdir /etc/ssl/x; echo done")
	if r.err != nil || !strings.Contains(r.stdout, "done") {
		t.Fatalf("the command did not run: %+v", r)
	}
	view := d.etc.dir
	if b, _ := os.ReadFile(filepath.Join(view, "passwd")); string(b) != string(host) {
		t.Fatal("the view's passwd was changed from inside")
	}
	for _, p := range []string{"new", "ssl/x"} {
		if _, err := os.Lstat(filepath.Join(view, p)); err == nil {
			t.Fatalf("%s was created in the view", p)
		}
	}
}

// The view copies what a bind would show: top-level symlinks followed,
// symlinks inside directories kept, content and mode; a change on the host
// makes a new view, and the old one, once nobody holds it, is swept.
func TestEtcViewBuildAndSweep(t *testing.T) {
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(src, "real"), []byte("real\n"), 0o640))
	must(os.Symlink("real", filepath.Join(src, "link")))
	must(os.Mkdir(filepath.Join(src, "dir"), 0o755))
	must(os.WriteFile(filepath.Join(src, "dir", "a"), []byte("a\n"), 0o644))
	must(os.Symlink("../real", filepath.Join(src, "dir", "l")))
	// Stand-ins for /etc entries: the view stores them at their own path.
	entries := []string{filepath.Join(src, "link"), filepath.Join(src, "dir")}
	root := filepath.Join(t.TempDir(), "views")
	fp1, err := etcFingerprint(entries, true)
	must(err)
	dir1, lock1, err := acquireEtcView(root, fp1, entries)
	must(err)
	base := filepath.Dir(dir1) // the view's root: entries sit at their absolute path below it
	if b, err := os.ReadFile(filepath.Join(base, src, "link")); err != nil || string(b) != "real\n" {
		t.Fatalf("top-level symlink not followed: %q %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(base, src, "link")); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 {
		t.Fatalf("copied file: %v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(base, src, "dir", "l")); err != nil || l != "../real" {
		t.Fatalf("symlink inside a directory not kept: %q %v", l, err)
	}
	// A change deeper in a directory changes the deep fingerprint only.
	sh1, _ := etcFingerprint(entries, false)
	must(os.WriteFile(filepath.Join(src, "dir", "a"), []byte("changed\n"), 0o644))
	sh2, _ := etcFingerprint(entries, false)
	fp2, _ := etcFingerprint(entries, true)
	if fp2 == fp1 {
		t.Fatal("a changed file does not change the fingerprint")
	}
	_ = sh1 == sh2 // the directory's own stat may or may not change: not asserted
	dir2, lock2, err := acquireEtcView(root, fp2, entries)
	must(err)
	if b, _ := os.ReadFile(filepath.Join(filepath.Dir(dir2), src, "dir", "a")); string(b) != "changed\n" {
		t.Fatalf("new view has %q", b)
	}
	// Held views stay; an unheld one goes.
	sweepEtcViews(root)
	for _, d := range []string{dir1, dir2} {
		if _, err := os.Lstat(d); err != nil {
			t.Fatalf("held view %s swept: %v", d, err)
		}
	}
	lock1.Close()
	sweepEtcViews(root)
	if _, err := os.Lstat(dir1); err == nil {
		t.Fatal("unheld view kept")
	}
	if _, err := os.Lstat(dir2); err != nil {
		t.Fatalf("held view swept: %v", err)
	}
	// The view used last outlives its users, for the next driver (a
	// one-shot command's), and is taken up again as it is.
	lock2.Close()
	sweepEtcViews(root)
	var before unix.Stat_t
	if err := unix.Lstat(dir2, &before); err != nil {
		t.Fatalf("the view used last was swept: %v", err)
	}
	again, lock2b, err := acquireEtcView(root, fp2, entries)
	must(err)
	var after unix.Stat_t
	if err := unix.Lstat(again, &after); err != nil || again != dir2 || after.Ino != before.Ino {
		t.Fatalf("the kept view was not reused: %s (inode %d, was %d): %v", again, after.Ino, before.Ino, err)
	}
	lock2b.Close()
	// Once another view is used later, the older one goes: at most one
	// view is kept beyond its users.
	time.Sleep(10 * time.Millisecond) // the lock files' mtimes must differ
	dir1b, lock1b, err := acquireEtcView(root, fp1, entries)
	must(err)
	lock1b.Close()
	sweepEtcViews(root)
	if _, err := os.Lstat(dir2); err == nil {
		t.Fatal("an unheld view that is not the one used last was kept")
	}
	if _, err := os.Lstat(dir1b); err != nil {
		t.Fatalf("the view used last was swept: %v", err)
	}
	ents, _ := os.ReadDir(root)
	if len(ents) != 3 {
		t.Fatalf("want the last view, its lock and its fingerprint record in the view root, got %v", ents)
	}
}

// Plans the view cannot serve bind /etc entry by entry.
func TestEtcViewNotUsed(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	base := launchPlan{System: systemReadSet(), Workspace: ws}
	if d.etcViewFor(base) == "" {
		t.Fatal("control: no view for an ordinary plan")
	}
	etcDir := ""
	for _, e := range base.etcEntries() {
		if fi, err := os.Stat(e); err == nil && fi.IsDir() {
			etcDir = e
			break
		}
	}
	if etcDir == "" {
		t.Skip("no directory in the /etc read set here")
	}
	grantEtc := base
	grantEtc.FSRead = []string{etcDir}
	state := base
	state.FSWrite = []string{d.cfg.StateDir}
	for name, p := range map[string]launchPlan{"grant under /etc": grantEtc, "writable state dir": state} {
		if v := d.etcViewFor(p); v != "" {
			t.Errorf("%s: view %s used", name, v)
		}
		args := strings.Join(p.BwrapFlags(ws, "", nil, nil), " ")
		if !strings.Contains(args, "--ro-bind /etc/passwd /etc/passwd") {
			t.Errorf("%s: entries not bound one by one: %s", name, args)
		}
	}
	var st unix.Stat_t
	if unix.Stat(d.etcViewRoot(), &st) != nil || st.Mode&0o077 != 0 {
		t.Errorf("view root %s is not private", d.etcViewRoot())
	}
}
