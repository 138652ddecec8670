//go:build linux

package core

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// refusingDriver refuses a command as refuse says (nil: runs it), before
// anything of it starts, as a driver refuses a layered mount it cannot
// make or a program it cannot find; it counts ForgetSession's calls.
type refusingDriver struct {
	*drivertest.FakeDriver
	refuse func(spec driverapi.RunSpec) error

	mu      sync.Mutex
	forgets int
}

func (d *refusingDriver) Run(ctx context.Context, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	if err := d.refuse(spec); err != nil {
		return driverapi.Exit{}, err
	}
	return d.FakeDriver.Run(ctx, spec, streams)
}

func (d *refusingDriver) ForgetSession(context.Context, string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.forgets++
	return nil
}

func (d *refusingDriver) forgot() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.forgets
}

// A session's mode (layered or live) is fixed by its first command that
// starts: one the driver refuses before the program starts leaves the
// session as it found it (no layer left on disk, the other mode allowed),
// while one that ran fixes it (the control), and a refused command whose
// layer holds something keeps the layer and the mode.
func TestSessionModeFixedByFirstStartedCommand(t *testing.T) {
	ctx := context.Background()
	unavailable := &driverapi.UnavailableError{Feature: driverapi.FeatureLayeredWorkspace, Reason: "mounting the overlay failed: invalid argument"}
	layeredRefused := func(spec driverapi.RunSpec) error {
		if spec.Layered != nil {
			return unavailable
		}
		return nil
	}
	setup := func(t *testing.T, refuse func(driverapi.RunSpec) error) (*harness, *refusingDriver, string) {
		t.Helper()
		d := &refusingDriver{FakeDriver: &drivertest.FakeDriver{Caps: userNSCaps(false)}, refuse: refuse}
		sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(drivertest.Connect(t, d)), WithAuditSink(&memSink{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sb.Close() })
		return &harness{sb: sb, fake: d.FakeDriver}, d, t.TempDir()
	}
	layerOnDisk := func(h *harness, sid string) bool {
		_, err := os.Lstat(filepath.Join(h.sb.layerDir(sid), layer.StateFile))
		return err == nil
	}

	t.Run("layered refused by the driver, then live", func(t *testing.T) {
		h, d, ws := setup(t, layeredRefused)
		_, err := h.sb.Execute(ctx, Command{SessionID: "s", Workspace: ws, Layered: true, Program: "true"})
		if !errors.As(err, new(*driverapi.UnavailableError)) {
			t.Fatalf("layered: %v, want the driver's UnavailableError", err)
		}
		if layerOnDisk(h, "s") || d.forgot() != 1 {
			t.Fatalf("after the refusal: layer on disk %v, driver's session forgotten %d times (want no layer, once)", layerOnDisk(h, "s"), d.forgot())
		}
		if layered, err := h.sb.SessionLayered("s"); err != nil || layered {
			t.Fatalf("SessionLayered after the refusal: %v %v", layered, err)
		}
		out, err := h.sb.Execute(ctx, Command{SessionID: "s", Workspace: ws, Program: "echo", Args: []string{"live"}})
		if err != nil || string(out.Stdout) != "live\n" {
			t.Fatalf("live after the refusal: %v %q", err, outStdout(out))
		}
		// The live command ran: the session is live for good.
		_, err = h.sb.Execute(ctx, Command{SessionID: "s", Workspace: ws, Layered: true, Program: "true"})
		var lm *LayeredModeError
		if !errors.As(err, &lm) || lm.Layered {
			t.Fatalf("layered after a live command ran: %v, want a LayeredModeError saying live", err)
		}
	})

	t.Run("layered refused by the driver, then layered again", func(t *testing.T) {
		refusals := 1
		h, _, ws := setup(t, func(spec driverapi.RunSpec) error {
			if spec.Layered != nil && refusals > 0 {
				refusals--
				return unavailable
			}
			return nil
		})
		if _, err := h.sb.Execute(ctx, Command{SessionID: "s", Workspace: ws, Layered: true, Program: "true"}); err == nil {
			t.Fatal("the first layered command was not refused")
		}
		if _, err := h.sb.Execute(ctx, Command{SessionID: "s", Workspace: ws, Layered: true, Program: "true"}); err != nil {
			t.Fatalf("layered again: %v", err)
		}
		if !layerOnDisk(h, "s") {
			t.Fatal("the layered command that ran has no layer on disk")
		}
		_, err := h.sb.Execute(ctx, Command{SessionID: "s", Workspace: ws, Program: "true"})
		if !errors.Is(err, ErrLayeredMode) {
			t.Fatalf("live after a layered command ran: %v, want ErrLayeredMode", err)
		}
	})

	t.Run("live refused by the driver, then layered", func(t *testing.T) {
		h, _, ws := setup(t, func(spec driverapi.RunSpec) error {
			if spec.Layered == nil {
				return &driverapi.InvalidSpecError{Field: "program", Reason: `"nope" was not found in the command's PATH`}
			}
			return nil
		})
		_, err := h.sb.Execute(ctx, Command{SessionID: "s", Workspace: ws, Program: "nope"})
		if !errors.As(err, new(*driverapi.InvalidSpecError)) {
			t.Fatalf("live: %v, want the driver's InvalidSpecError", err)
		}
		if _, err := h.sb.Execute(ctx, Command{SessionID: "s", Workspace: ws, Layered: true, Program: "true"}); err != nil {
			t.Fatalf("layered after a refused live command: %v", err)
		}
	})

	t.Run("layered refused by the configuration, then live", func(t *testing.T) {
		d := &refusingDriver{FakeDriver: &drivertest.FakeDriver{Caps: drivertest.FullCapabilities()}, refuse: func(driverapi.RunSpec) error { return nil }}
		h := newHarness(t, testConfig(t), d.FakeDriver)
		ws := t.TempDir()
		_, err := h.sb.Execute(ctx, Command{SessionID: "s", Workspace: ws, Layered: true, Program: "true"})
		if !errors.Is(err, ErrLayeredUnavailable) {
			t.Fatalf("layered on a driver without the call: %v, want ErrLayeredUnavailable", err)
		}
		if _, err := h.sb.Execute(ctx, Command{SessionID: "s", Workspace: ws, Program: "true"}); err != nil {
			t.Fatalf("live after the refusal: %v", err)
		}
	})

	t.Run("a refused command's layer that holds something is kept", func(t *testing.T) {
		h, d, ws := setup(t, func(spec driverapi.RunSpec) error {
			if spec.Layered != nil {
				// Something reached the upper before the refusal.
				if err := os.WriteFile(filepath.Join(spec.Layered.Upper, "kept.txt"), []byte("x"), 0o644); err != nil {
					return err
				}
				return unavailable
			}
			return nil
		})
		if _, err := h.sb.Execute(ctx, Command{SessionID: "s", Workspace: ws, Layered: true, Program: "true"}); err == nil {
			t.Fatal("the layered command was not refused")
		}
		if !layerOnDisk(h, "s") || d.forgot() != 0 {
			t.Fatalf("layer on disk %v, forgotten %d times: want the layer kept, the driver's session left", layerOnDisk(h, "s"), d.forgot())
		}
		_, err := h.sb.Execute(ctx, Command{SessionID: "s", Workspace: ws, Program: "true"})
		if !errors.Is(err, ErrLayeredMode) {
			t.Fatalf("live beside a kept layer: %v, want ErrLayeredMode", err)
		}
	})
}

// outStdout is out's stdout, or "" for a nil Output.
func outStdout(out *Output) string {
	if out == nil {
		return ""
	}
	return string(out.Stdout)
}

// A live session of this process whose layer another process (sharing
// the workspace root) made since refuses its next live command: it would
// write the host under the layer. The control: the same live command ran
// before the layer was made.
func TestSessionLiveRefusedUnderAnotherProcessLayer(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t)
	a := newHarness(t, cfg, &drivertest.FakeDriver{Caps: userNSCaps(false)})
	b := newHarness(t, cfg, &drivertest.FakeDriver{Caps: userNSCaps(false)})
	ws := t.TempDir()
	live := Command{SessionID: "s", Workspace: ws, Program: "echo", Args: []string{"live"}}
	if out, err := a.sb.Execute(ctx, live); err != nil || string(out.Stdout) != "live\n" {
		t.Fatalf("control: live before any layer: %v %q", err, outStdout(out))
	}
	if _, err := b.sb.Execute(ctx, Command{SessionID: "s", Workspace: ws, Layered: true, Program: "true"}); err != nil {
		t.Fatalf("the other process's layered command: %v", err)
	}
	_, err := a.sb.Execute(ctx, live)
	var lm *LayeredModeError
	if !errors.As(err, &lm) || !lm.Layered {
		t.Fatalf("live over the other process's layer: %v, want a LayeredModeError saying layered", err)
	}
}
