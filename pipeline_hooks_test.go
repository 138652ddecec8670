package alephsandbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/commandpolicy"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/ratelimit"
)

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
	sb, err := core.NewWorkspaceSandbox(cfg, core.WithDriver(drv), core.WithHooks(policy, limiter))
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
