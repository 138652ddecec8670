package core

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// ranWith reports whether the driver's last profile request granted
// reading p: the path the command would have been allowed to reach.
func ranWith(drv *drivertest.FakeDriver, p string) bool {
	return slices.Contains(drv.LastProfileRequest().Capabilities.FSRead, p)
}

// A path named inside an approved grant (or the baseline) but leading, by a
// symbolic link the sandboxed command could make there, to somewhere else
// is not covered by that grant: the approver is asked, and told where the
// path leads. Otherwise a driver that resolves paths (Seatbelt matches
// real paths, so its profile grants the link's target) lets the next
// command read what the link points to without anyone being asked.
// The controls: a real directory in the grant, and a link that stays in
// it, run without a question.
func TestLinkInAGrantIsNotCoveredByIt(t *testing.T) {
	dir := t.TempDir()
	build, secret := filepath.Join(dir, "build"), filepath.Join(dir, "secret")
	for _, d := range []string{filepath.Join(build, "sub"), secret} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ap := &drivertest.FakeApprover{Outcome: driverapi.ApprovalDenied}
	drv := &drivertest.FakeDriver{}
	sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(drv), WithApprovalRequester(ap), WithAuditSink(&memSink{}),
		WithBaseline(driverapi.Capabilities{FSRead: []string{build}}))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ctx := WithSession(context.Background(), "links")
	run := func(p string) error {
		_, err := sb.Execute(ctx, Command{Program: "/bin/cat", Capabilities: driverapi.Capabilities{FSRead: []string{p}}})
		return err
	}

	// The controls: within the baseline by name and in fact.
	if err := os.Symlink(filepath.Join(build, "sub"), filepath.Join(build, "inner")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(build, "sub"), filepath.Join(build, "inner")} {
		if err := run(p); err != nil {
			t.Fatalf("the control %s: %v", p, err)
		}
		if !ranWith(drv, p) {
			t.Fatalf("the control %s did not run with its path: %v", p, drv.LastProfileRequest().Capabilities.FSRead)
		}
	}
	if n := len(ap.Requests()); n != 0 {
		t.Fatalf("the controls asked %d questions", n)
	}

	// The link out of the baseline.
	link := filepath.Join(build, "link")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	before := drv.Runs()
	err = run(link)
	if drv.Runs() != before {
		t.Fatalf("a path in the baseline leading to %s ran without a question", secret)
	}
	reqs := ap.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d approval requests for a link out of the baseline (err %v), want 1", len(reqs), err)
	}
	if s := reqs[0].Summary; !strings.Contains(s, link) || !strings.Contains(s, secret) {
		t.Errorf("the question does not say where %s leads: %q", link, s)
	}
	wantDenied(t, err, ReasonApprovalDenied)

	// Approved once, the grant is of where the link led: re-pointed
	// elsewhere, the same name is asked about again.
	ap.Outcome = driverapi.ApprovalApproved
	if err := run(link); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	if err := run(link); err != nil {
		t.Fatal(err)
	}
	if n := len(ap.Requests()); n != 3 {
		t.Fatalf("%d approval requests after the link was re-pointed, want 3", n)
	}
	if got := ap.Requests()[2].Summary; !strings.Contains(got, other) {
		t.Errorf("the question after the re-point does not name %s: %q", other, got)
	}
}

// Where a requested path leads is held to what may be granted as its name
// is: a link to the root directory, or to another session's workspace, is
// refused before anyone is asked, as the paths themselves are (a yes
// would otherwise keep a grant of what no grant may be). The control: a
// link to a directory that may be granted is asked about.
func TestLinkToWhatCannotBeGrantedIsRefused(t *testing.T) {
	ap := &drivertest.FakeApprover{Outcome: driverapi.ApprovalDenied}
	h := newHarness(t, testConfig(t), nil, WithApprovalRequester(ap))
	other, err := h.sb.WorkspacePath("neighbour")
	if err != nil {
		t.Fatal(err)
	}
	dir, plain := t.TempDir(), t.TempDir()
	for name, to := range map[string]string{"root": "/", "neighbour": other, "plain": plain} {
		if err := os.Symlink(to, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := WithSession(context.Background(), "me")
	for _, name := range []string{"root", "neighbour"} {
		_, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: driverapi.Capabilities{FSRead: []string{filepath.Join(dir, name)}}})
		var ie *InvalidCommandError
		if !errors.As(err, &ie) {
			t.Errorf("a link to %s: %v, want an InvalidCommandError", name, err)
		}
	}
	if n := len(ap.Requests()); n != 0 {
		t.Fatalf("%d questions about links to what cannot be granted", n)
	}
	_, err = h.sb.Execute(ctx, Command{Program: "echo", Capabilities: driverapi.Capabilities{FSRead: []string{filepath.Join(dir, "plain")}}})
	wantDenied(t, err, ReasonApprovalDenied)
	if n := len(ap.Requests()); n != 1 {
		t.Fatalf("the control: %d questions, want 1", n)
	}
}
