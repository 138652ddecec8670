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
	"github.com/aleph-sandbox/aleph-sandbox/hooks/commandpolicy"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/ratelimit"
)

// Through the whole pipeline: a hook plugin that crashes fails the command
// closed (the driver never runs it), and the next command relaunches the
// plugin and runs.
func TestPipelineFailsClosedOnCrashedHookPlugin(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	host, err := core.NewHookHost(core.HookHostConfig{Path: exe, Name: "fake", Env: []string{
		fakeHookEnv + "=crash-once", fakeHookMarkerEnv + "=" + filepath.Join(t.TempDir(), "m")}})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	cfg := core.DefaultConfig()
	cfg.Sandbox.WorkspaceRoot = t.TempDir()
	cfg.Sandbox.AuditLog = ""
	drv := &drivertest.FakeDriver{}
	sb, err := core.New(cfg, core.WithDriver(drv), core.WithHooks(host))
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

// The linked-in hooks through the pipeline: a blocked command is denied
// with its rule and never reaches the driver; a rate-limit denial carries
// when to retry; an ordinary command runs.
func TestPipelineWithInProcessHooks(t *testing.T) {
	policy, errs := commandpolicy.New(commandpolicy.DefaultConfig(), nil)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	limiter, err := ratelimit.New(ratelimit.Config{RatePerSecond: 0.001, Burst: 2})
	if err != nil {
		t.Fatal(err)
	}
	cfg := core.DefaultConfig()
	cfg.Sandbox.WorkspaceRoot = t.TempDir()
	cfg.Sandbox.AuditLog = ""
	drv := &drivertest.FakeDriver{}
	sb, err := core.New(cfg, core.WithDriver(drv), core.WithHooks(policy, limiter))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ctx := core.WithSession(context.Background(), "s")

	_, err = sb.Execute(ctx, core.Command{Program: "sh", Args: []string{"-c", "rm -rf /"}})
	var denied *core.DeniedError
	if !errors.As(err, &denied) || denied.Rule != "rm-root" || denied.Hook != commandpolicy.HookName || drv.Runs() != 0 {
		t.Fatalf("blocked command: %v (runs %d)", err, drv.Runs())
	}
	if _, err := sb.Execute(ctx, core.Command{Program: "echo", Args: []string{"ok"}}); err != nil {
		t.Fatalf("ordinary command: %v", err)
	}
	if _, err := sb.Execute(ctx, core.Command{Program: "echo", Args: []string{"ok"}}); err != nil {
		t.Fatalf("second ordinary command: %v", err)
	}
	_, err = sb.Execute(ctx, core.Command{Program: "echo", Args: []string{"ok"}})
	if !errors.As(err, &denied) || denied.Hook != ratelimit.HookName || denied.RetryAfter <= 0 {
		t.Fatalf("rate-limited command: %v", err)
	}
	if limiter.InFlight() != 0 {
		t.Fatalf("slots not released: %d", limiter.InFlight())
	}
}
