package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// panicDriverEnv makes the test binary a failing driver plugin: "1" serves
// panicDriver, which panics during Run; "sayswhy" says why on stderr and
// exits before any handshake.
const panicDriverEnv = "ALEPH_TEST_PANIC_DRIVER"

func init() {
	switch os.Getenv(panicDriverEnv) {
	case "1":
		driverapi.Serve(&panicDriver{})
		os.Exit(0)
	case "sayswhy":
		fmt.Fprintln(os.Stderr, "sayswhy: needs /dev/kvm")
		os.Exit(1)
	}
}

type panicDriver struct{ drivertest.FakeDriver }

func (*panicDriver) Run(context.Context, driverapi.RunSpec, driverapi.Streams) (driverapi.Exit, error) {
	panic("boom in Run")
}

// A driver that dies during Run is explained by its own last words (its
// panic line), not only by "plugin process died".
func TestDriverDeathQuotesThePanic(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewDriverHost(DriverHostConfig{Path: exe, Name: "panicky", Env: []string{panicDriverEnv + "=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx := context.Background()
	prof, err := h.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: "/ws", Cwd: "/ws"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.Run(ctx, driverapi.RunSpec{Program: "x", Cwd: "/ws", Profile: prof, Timeout: 5e9, MaxOutputBytes: 1 << 20}, driverapi.Streams{})
	var de *core.DriverError
	if !errors.As(err, &de) || !errors.Is(err, driverapi.ErrPluginDied) {
		t.Fatalf("want a core.DriverError for a dead plugin, got %T %v", err, err)
	}
	if !strings.Contains(err.Error(), "it wrote: panic: boom in Run (in ") {
		t.Fatalf("the panic is not in the error: %v", err)
	}
}

// A driver file named by path that exists but is not executable is
// reported as not executable, with the fix, not as "not found"; the
// message names each step once.
func TestNonExecutableDriverPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "drv")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, _, err := FindDriver(p, nil)
	if err != nil || got != p {
		t.Fatalf("FindDriver(%s) = %q, %v; want the path", p, got, err)
	}
	h, err := NewDriverHost(DriverHostConfig{Path: got})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	err = h.Start(context.Background())
	want := "driver drv (" + p + "): find: not executable (chmod +x " + p + ")"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
	// Control: a missing path is still not found.
	if _, _, err := FindDriver(p+"-gone", nil); !errors.As(err, new(*core.DriverNotFoundError)) {
		t.Fatalf("missing path: %v", err)
	}
}

// A driver that fails to start is named once, with its path, and the step
// is said once ("start", not "start: plugin ...: start").
func TestDriverStartErrorSaysEachLabelOnce(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewDriverHost(DriverHostConfig{Path: exe, Name: "sayswhy", Env: []string{panicDriverEnv + "=sayswhy"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	err = h.Start(context.Background())
	want := "driver sayswhy (" + exe + "): start: exited without a handshake; it wrote: sayswhy: needs /dev/kvm"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
	var pe *driverapi.PluginError
	if !errors.As(err, &pe) || pe.Op != "start" {
		t.Fatalf("the PluginError is lost: %T", err)
	}
}
