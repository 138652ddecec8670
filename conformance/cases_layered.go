package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Layered workspaces (protocol 1.4, call "layered_workspace"): a command
// whose RunSpec carries Layered sees the workspace through an overlay
// whose upper layer is a host directory the suite made; everything it
// writes lands there and the host's workspace is never written. The cases
// read the upper layer as data (files, whiteouts), the way the host's
// changes and apply do, so a driver that runs a layered command over the
// live workspace fails even though the command itself sees what it wrote.
// Each case first shows the command ran and that the layer holds what it
// did (the positive control), then that the host's directory does not.

func layeredCases() []Case {
	call := driverapi.CallLayeredWorkspace
	const why = "overlay layers are a Linux file system"
	return []Case{
		{ID: "layered/writes-stay-in-layer", Level: Must, Call: call, OS: LinuxOnly, OSReason: why,
			Description: "A layered command (RunSpec.Layered) creates a file and rewrites an existing one in the workspace and prints a marker: the session's next command reads both back through the layer, the upper layer directory holds both with the new contents, and the host's workspace still has the old file unchanged and no new one.",
			run:         caseLayeredWrites},
		{ID: "layered/host-view-below", Level: Must, Call: call, OS: LinuxOnly, OSReason: why,
			Description: "A file of the host's workspace is readable through the layer (its contents printed); a file the layered command removes is gone for the session's next command, stays in the host's workspace with its contents, and is a whiteout (a character device) in the upper layer.",
			run:         caseLayeredHostView},
		{ID: "layered/one-mount-per-upper", Level: Must, Call: call, OS: LinuxOnly, OSReason: why,
			Description: "While a layered command of one session runs over an upper layer, a command of another session naming the same upper is refused with an UnavailableError for layered_workspace and does not run (overlayfs forbids two mounts sharing an upper); once the first session is forgotten, the second session's command runs over that upper and sees what the first wrote (the control).",
			run:         caseLayeredOneMount},
		{ID: "layered/view", Level: Must, Call: driverapi.CallLayeredView, OS: LinuxOnly, OSReason: why,
			Description: "While a layered session's sandbox lives, LayeredView names a path that opens the overlay its commands see, with the device and inode it reports: a file the command wrote reads back through it, a file written through it is what the session's next command reads, and the host's workspace gets neither; another session has no view, and once the session is forgotten neither has it.",
			run:         caseLayeredView},
		{ID: "layered/view-open", Level: Must, Call: driverapi.CallLayeredViewOpen, OS: LinuxOnly, OSReason: why,
			Description: "OpenLayeredView of a layer a session sandbox has mounted is refused with an UnavailableError for layered_workspace; once the session is forgotten it answers a path that opens an overlay with the device and inode it reports: the command's file reads back through it, a file written through it lands in the upper layer and not in the host's workspace, and a command of the session meanwhile is refused with an UnavailableError for layered_workspace and does not run; once the view's context ends, Ended closes and (the control) the session's next command runs and reads the file written through the view.",
			run:         caseLayeredViewOpen},
	}
}

func caseLayeredViewOpen(ctx context.Context, h *H) error {
	op, isO := h.Driver.(driverapi.LayeredViewOpener)
	f, isF := h.Driver.(driverapi.SessionForgetter)
	if !isO || !isF {
		return fmt.Errorf("the driver lists %q but does not implement OpenLayeredView and ForgetSession", driverapi.CallLayeredViewOpen)
	}
	l, id, made, err := h.layeredSessionWithFile(ctx, "layered-view-open")
	if err != nil {
		return err
	}
	put := "put-" + token()
	req := driverapi.LayeredViewRequest{SessionID: id, Workspace: h.Work, Layered: *l}
	var ue *driverapi.UnavailableError
	vctx, end := context.WithCancel(ctx)
	_, err = op.OpenLayeredView(vctx, req)
	end()
	if !errors.As(err, &ue) || ue.Feature != driverapi.FeatureLayeredWorkspace {
		return fmt.Errorf("OpenLayeredView while the session's sandbox has the layer mounted: %v, want an UnavailableError for %s", err, driverapi.FeatureLayeredWorkspace)
	}
	if err := f.ForgetSession(ctx, id); err != nil {
		return fmt.Errorf("ForgetSession: %w", err)
	}
	vctx, end = context.WithCancel(ctx)
	defer end()
	lv, err := op.OpenLayeredView(vctx, req)
	if err != nil {
		return fmt.Errorf("OpenLayeredView with no sandbox of the session: %w", err)
	}
	if !lv.Mounted || lv.Ended == nil {
		return fmt.Errorf("OpenLayeredView answered %+v", lv)
	}
	if err := readWriteView(lv, made, put); err != nil {
		return err
	}
	if b, err := os.ReadFile(filepath.Join(l.Upper, "put.txt")); err != nil || string(b) != put {
		return fmt.Errorf("the file written through the view is not in the upper layer: %q, %v", clip(b), err)
	}
	if err := mustNotExist(filepath.Join(h.Work, "put.txt"), "a file written through the view"); err != nil {
		return fmt.Errorf("%w: the view wrote the host's workspace", err)
	}
	o := h.inLayer(ctx, id, l, "write", "ran.txt", "ran", sep, "echo", "second-ran")
	switch {
	case o.Err == nil || strings.Contains(string(o.Stdout), "second-ran"):
		return fmt.Errorf("a command of the session ran while the view was open: %s", o)
	case !errors.As(o.Err, &ue) || ue.Feature != driverapi.FeatureLayeredWorkspace:
		return fmt.Errorf("a command of the session while the view was open was refused, but not with an UnavailableError for %s: %v", driverapi.FeatureLayeredWorkspace, o.Err)
	}
	if err := mustNotExist(filepath.Join(l.Upper, "ran.txt"), "the refused command's file"); err != nil {
		return err
	}
	end()
	select {
	case <-lv.Ended:
	case <-ctx.Done():
		return errors.New("the view's Ended did not close after its context ended")
	}
	o = h.inLayer(ctx, id, l, "read", "put.txt")
	if err := ran("the session's next command, once the view ended, reading the file written through it", o, put); err != nil {
		return err
	}
	if err := f.ForgetSession(ctx, id); err != nil {
		return fmt.Errorf("ForgetSession: %w", err)
	}
	return nil
}

func caseLayeredView(ctx context.Context, h *H) error {
	v, isV := h.Driver.(driverapi.LayeredViewer)
	f, isF := h.Driver.(driverapi.SessionForgetter)
	if !isV || !isF {
		return fmt.Errorf("the driver lists %q but does not implement LayeredView and ForgetSession", driverapi.CallLayeredView)
	}
	l, id, made, err := h.layeredSessionWithFile(ctx, "layered-view")
	if err != nil {
		return err
	}
	put := "put-" + token()
	lv, err := v.LayeredView(ctx, id)
	if err != nil {
		return fmt.Errorf("LayeredView of a live layered session: %w", err)
	}
	if l.UserNS && !lv.Mounted {
		// The overlay lives in the session sandbox's user and mount
		// namespaces, which the host does not enter by a path: a driver
		// that cannot hand the host a descriptor of it says there is no
		// view. One that can (the bwrap driver: its supervisor sends the
		// overlay's root) is checked below as any other.
		return skipf("the driver mounts layered sessions' overlays in a user namespace (%s) and offers the host no view of them (it said so: not mounted)", driverapi.DetailLayeredUserNS)
	}
	if !lv.Mounted {
		return errors.New("LayeredView says no overlay is mounted while the layered session's sandbox lives")
	}
	if err := readWriteView(lv, made, put); err != nil {
		return err
	}
	o := h.inLayer(ctx, id, l, "read", "put.txt")
	if err := ran("the session's next command reading the file written through the view", o, put); err != nil {
		return err
	}
	for _, rel := range []string{"made.txt", "put.txt"} {
		if err := mustNotExist(filepath.Join(h.Work, rel), "a file of the layered view"); err != nil {
			return fmt.Errorf("%w: the view wrote the host's workspace", err)
		}
	}
	if other, err := v.LayeredView(ctx, h.newSession(ctx, "layered-view-other")); err != nil || other.Mounted {
		return fmt.Errorf("another session's view: %+v, %v", other, err)
	}
	if err := f.ForgetSession(ctx, id); err != nil {
		return fmt.Errorf("ForgetSession: %w", err)
	}
	if after, err := v.LayeredView(ctx, id); err != nil || after.Mounted {
		return fmt.Errorf("the view after the session was forgotten: %+v, %v", after, err)
	}
	return nil
}

// layeredSessionWithFile makes a layer and a session (named after
// name) whose first layered command wrote made.txt, holding made, in it.
func (h *H) layeredSessionWithFile(ctx context.Context, name string) (l *driverapi.LayeredWorkspace, id, made string, err error) {
	l, err = h.newLayer()
	if err != nil {
		return nil, "", "", err
	}
	id = h.newSession(ctx, name)
	made = "made-" + token()
	o := h.inLayer(ctx, id, l, "write", "made.txt", made, sep, "echo", "wrote")
	if err := ran("the layered command writing the workspace", o, "wrote"); err != nil {
		return nil, "", "", err
	}
	return l, id, made, nil
}

// readWriteView checks a view the driver answered: its path opens the
// directory of the device and inode it reports, made.txt reads made
// through it, and put.txt is written through it with put.
func readWriteView(lv driverapi.LayeredView, made, put string) error {
	root, err := os.Open(lv.Path)
	if err != nil {
		return fmt.Errorf("the view %s cannot be opened: %w", lv.Path, err)
	}
	dev, ino, ok := fileID(root)
	root.Close()
	if !ok || dev != lv.Dev || ino != lv.Ino {
		return fmt.Errorf("the view %s is device %d inode %d, the driver said %d and %d", lv.Path, dev, ino, lv.Dev, lv.Ino)
	}
	if b, err := os.ReadFile(filepath.Join(lv.Path, "made.txt")); err != nil || string(b) != made {
		return fmt.Errorf("the command's file through the view: %q, %v", clip(b), err)
	}
	if err := os.WriteFile(filepath.Join(lv.Path, "put.txt"), []byte(put), 0o644); err != nil {
		return fmt.Errorf("writing through the view: %w", err)
	}
	return nil
}

// newLayer makes an empty layer for this case outside the workspace (as
// the host does, in its data directory): upper and work directories on
// one file system, and the lock file the driver holds while the overlay
// is mounted.
func (h *H) newLayer() (*driverapi.LayeredWorkspace, error) {
	dir := filepath.Join(h.Root, "layer")
	l := &driverapi.LayeredWorkspace{Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work"), Lock: filepath.Join(dir, "lock"),
		// A driver that mounts in a user namespace says so; the layer is
		// made for it, as the host makes its own.
		UserNS: h.Caps.Details[driverapi.DetailLayeredUserNS] == "true"}
	for _, d := range []string{l.Upper, l.Work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("making the layer: %w", err)
		}
	}
	if err := os.WriteFile(l.Lock, nil, 0o600); err != nil {
		return nil, fmt.Errorf("making the layer's lock: %w", err)
	}
	return l, nil
}

// inLayer runs the probe steps as a command of session id over layer l.
func (h *H) inLayer(ctx context.Context, id string, l *driverapi.LayeredWorkspace, steps ...string) Out {
	return h.Exec(ctx, h.ProbeCmd(Cmd{Session: id, SessionSandbox: true, Layered: l}, steps...))
}

// token is a fresh random marker.
func token() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// hostUnchanged fails unless the host's file at rel holds want.
func (h *H) hostUnchanged(rel, want, what string) error {
	got, err := os.ReadFile(filepath.Join(h.Work, rel))
	switch {
	case err != nil:
		return fmt.Errorf("%s: the host's %s is gone (%v): the layered command wrote the host's workspace", what, rel, err)
	case string(got) != want:
		return fmt.Errorf("%s: the host's %s now holds %q, not %q: the layered command wrote the host's workspace", what, rel, clip(got), want)
	}
	return nil
}

// upperHolds fails unless the upper layer holds rel with content want.
func upperHolds(l *driverapi.LayeredWorkspace, rel, want string) error {
	got, err := os.ReadFile(filepath.Join(l.Upper, rel))
	switch {
	case err != nil:
		return fmt.Errorf("the upper layer %s does not hold %s (%v): the layered command's write did not land in its layer", l.Upper, rel, err)
	case string(got) != want:
		return fmt.Errorf("the upper layer's %s holds %q, want %q", rel, clip(got), want)
	}
	return nil
}

func caseLayeredWrites(ctx context.Context, h *H) error {
	const old = "host-original\n"
	if err := writeFile(filepath.Join(h.Work, "existing.txt"), old); err != nil {
		return err
	}
	l, err := h.newLayer()
	if err != nil {
		return err
	}
	id := h.newSession(ctx, "layered")
	added, changed := "added-"+token(), "changed-"+token()
	o := h.inLayer(ctx, id, l, "write", "new.txt", added, sep, "write", "existing.txt", changed, sep, "echo", "wrote")
	if err := ran("the layered command writing the workspace", o, "wrote"); err != nil {
		return err
	}
	if err := ok("the layered command writing the workspace", o); err != nil {
		return err
	}
	// The control: the session sees its own writes.
	o = h.inLayer(ctx, id, l, "read", "new.txt", sep, "echo", "", sep, "read", "existing.txt")
	if err := ran("the session's next command reading its writes", o, added); err != nil {
		return err
	}
	if !strings.Contains(string(o.Stdout), changed) {
		return fmt.Errorf("the session's next command does not read the file its first rewrote: %s", o)
	}
	if err := mustNotExist(filepath.Join(h.Work, "new.txt"), "a layered command's new file"); err != nil {
		return fmt.Errorf("%w: the layered command wrote the host's workspace", err)
	}
	if err := h.hostUnchanged("existing.txt", old, "a layered command's rewrite"); err != nil {
		return err
	}
	if err := upperHolds(l, "new.txt", added); err != nil {
		return err
	}
	return upperHolds(l, "existing.txt", changed)
}

func caseLayeredHostView(ctx context.Context, h *H) error {
	seen, kept := "seen-"+token(), "kept-"+token()
	if err := writeFile(filepath.Join(h.Work, "seen.txt"), seen); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(h.Work, "gone.txt"), kept); err != nil {
		return err
	}
	l, err := h.newLayer()
	if err != nil {
		return err
	}
	id := h.newSession(ctx, "layered")
	o := h.inLayer(ctx, id, l, "read", "seen.txt", sep, "rm", "gone.txt", sep, "echo", "", sep, "echo", "removed")
	if err := ran("the layered command reading the host's file and removing another", o, "removed"); err != nil {
		return err
	}
	if !strings.Contains(string(o.Stdout), seen) {
		return fmt.Errorf("the host's workspace file seen.txt is not readable through the layer: %s", o)
	}
	// The control: the removal took effect for the session.
	o = h.inLayer(ctx, id, l, "echo", "listing", sep, "ls", ".")
	if err := ran("the session's next command listing the workspace", o, "listing"); err != nil {
		return err
	}
	if !strings.Contains(string(o.Stdout), "seen.txt") {
		return fmt.Errorf("the session's next command does not list the host's seen.txt through the layer: %s", o)
	}
	if strings.Contains(string(o.Stdout), "gone.txt") {
		return fmt.Errorf("the session's next command still lists gone.txt, which its first command removed: %s", o)
	}
	if err := h.hostUnchanged("gone.txt", kept, "a layered command's rm"); err != nil {
		return err
	}
	st, err := os.Lstat(filepath.Join(l.Upper, "gone.txt"))
	if err != nil {
		return fmt.Errorf("the upper layer %s holds no whiteout for the removed gone.txt (%v): the removal did not land in the layer", l.Upper, err)
	}
	if st.Mode()&os.ModeCharDevice == 0 {
		return fmt.Errorf("the upper layer's gone.txt is %s, not a whiteout (a character device)", st.Mode())
	}
	return nil
}

func caseLayeredOneMount(ctx context.Context, h *H) error {
	l, err := h.newLayer()
	if err != nil {
		return err
	}
	first, second := h.newSession(ctx, "layered-a"), h.newSession(ctx, "layered-b")
	left := "left-" + token()
	// The first session's command holds the overlay until it is cancelled.
	started := make(chan struct{})
	var once bool
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan Out, 1)
	go func() {
		var seenOut strings.Builder
		done <- h.Exec(rctx, h.ProbeCmd(Cmd{Session: first, SessionSandbox: true, Layered: l, Timeout: 50 * time.Second,
			OnStdout: func(b []byte) {
				seenOut.Write(b)
				if !once && strings.Contains(seenOut.String(), "holding") {
					once = true
					close(started)
				}
			}}, "write", "left.txt", left, sep, "echo", "holding", sep, "sleep", "45"))
	}()
	select {
	case <-started:
	case o := <-done:
		return fmt.Errorf("the first session's layered command ended before it held the layer: %s", o)
	case <-ctx.Done():
		return fmt.Errorf("the first session's layered command never started: %w", ctx.Err())
	}
	o := h.inLayer(ctx, second, l, "echo", "second-ran", sep, "write", "second.txt", "x")
	// The first command has shown it ran ("holding"); it ends here.
	cancel()
	<-done
	var ue *driverapi.UnavailableError
	switch {
	case o.Err == nil || strings.Contains(string(o.Stdout), "second-ran"):
		return fmt.Errorf("a command of another session ran over an upper layer mounted for a running command (two overlay mounts sharing an upper): %s", o)
	case !errors.As(o.Err, &ue) || ue.Feature != driverapi.FeatureLayeredWorkspace:
		return fmt.Errorf("a command of another session naming a mounted upper was refused, but not with an UnavailableError for %s: %v", driverapi.FeatureLayeredWorkspace, o.Err)
	}
	if _, err := os.Lstat(filepath.Join(l.Upper, "second.txt")); err == nil {
		return fmt.Errorf("the refused command wrote the upper layer")
	}
	// The control: with the first session forgotten, its overlay is gone
	// and the second session runs over the upper, seeing what the first
	// left there.
	f, isF := h.Driver.(driverapi.SessionForgetter)
	if !isF {
		return fmt.Errorf("the driver lists %q but does not implement ForgetSession", driverapi.CallLayeredWorkspace)
	}
	if err := f.ForgetSession(ctx, first); err != nil {
		return fmt.Errorf("forget_session: %w", err)
	}
	o = h.inLayer(ctx, second, l, "echo", "second-ran", sep, "read", "left.txt")
	if err := ran("the second session's command after the first was forgotten (positive control)", o, "second-ran"); err != nil {
		return err
	}
	if !strings.Contains(string(o.Stdout), left) {
		return fmt.Errorf("the second session's command over the upper does not see the file the first session left in it: %s", o)
	}
	return nil
}
