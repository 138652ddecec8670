package core_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// The bare pipeline, built from its parts: here the driver is the
// in-process fake. A host builds the whole runtime (the configured driver
// plugin, hooks, proxy and audit file) with alephsandbox.New instead.
func ExampleNewWorkspaceSandbox() {
	root, _ := os.MkdirTemp("", "aleph-example-")
	defer os.RemoveAll(root)
	cfg := core.DefaultConfig()
	cfg.Sandbox.WorkspaceRoot = root
	cfg.Sandbox.AuditLog = ""

	sb, err := core.NewWorkspaceSandbox(cfg,
		core.WithDriver(&drivertest.FakeDriver{}),
		core.WithApprovalRequester(&drivertest.FakeApprover{Outcome: driverapi.ApprovalDenied}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Close()
	ctx := core.WithSession(context.Background(), "example")

	out, err := sb.Execute(ctx, core.Command{Program: "echo", Args: []string{"hello"}})
	fmt.Printf("%q %v\n", out.Stdout, err)

	_, err = sb.Execute(ctx, core.Command{Program: "echo", Capabilities: driverapi.Capabilities{
		Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}})
	var denied *core.DeniedError
	fmt.Println(errors.As(err, &denied), denied.Code)
	// Output:
	// "hello\n" <nil>
	// true approval_denied
}
