package hookhost_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
	"github.com/aleph-sandbox/aleph-sandbox/pluginhost"
)

// Through the whole pipeline: a hook plugin that crashes fails the command
// closed (the driver never runs it), and the next command relaunches the
// plugin and runs.
func TestPipelineFailsClosedOnCrashedHookPlugin(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	host, err := pluginhost.NewHookHost(pluginhost.HookHostConfig{Path: exe, Name: "fake", Env: []string{
		fakeHookEnv + "=crash-once", fakeHookMarkerEnv + "=" + filepath.Join(t.TempDir(), "m")}})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	cfg := core.DefaultConfig()
	cfg.Sandbox.WorkspaceRoot = t.TempDir()
	cfg.Sandbox.AuditLog = ""
	drv := &drivertest.FakeDriver{}
	sb, err := core.NewWorkspaceSandbox(cfg, core.WithDriver(drv), core.WithHooks(host))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ctx := core.WithSession(context.Background(), "s")

	_, err = sb.Execute(ctx, core.Command{Program: "echo", Args: []string{"first"}})
	var hookErr *core.HookError
	if !errors.As(err, &hookErr) || !errors.Is(err, driverapi.ErrPluginDied) {
		t.Fatalf("first command: %v", err)
	}
	if drv.Runs() != 0 {
		t.Fatalf("the driver ran a command whose hook failed")
	}
	out, err := sb.Execute(ctx, core.Command{Program: "echo", Args: []string{"second"}})
	if err != nil {
		t.Fatalf("second command: %v", err)
	}
	if string(out.Stdout) != "second\n" {
		t.Fatalf("second command printed %q", out.Stdout)
	}
	if drv.Runs() != 1 {
		t.Fatalf("driver runs %d, want 1", drv.Runs())
	}
}
