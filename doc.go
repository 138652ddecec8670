// Package alephsandbox assembles the whole aleph-sandbox runtime from a
// core.Config exactly as the aleph-sandbox CLI runs it: the driver (found and
// launched as a plugin), the before-hooks the configuration names (command
// policy, rate limit, hook plugins), the managed network proxy with its
// secret injections and its audit records, the audit ledger, and the
// approval requester the host supplies.
//
// It is the one constructor for every front end: the CLI, `serve`, `mcp`,
// and Go programs that embed the sandbox. Building core.New directly gives
// the bare pipeline without the hooks and proxy the configuration asks for;
// embedders use this package instead.
//
//	cfg, err := alephsandbox.LoadConfig(path) // core.LoadConfig with the components' section schemas
//	rt, err := alephsandbox.New(cfg, alephsandbox.WithApprover(myApprover))
//	defer rt.Close()
//	out, err := rt.Execute(ctx, core.Command{SessionID: "s1", Program: "/bin/echo", Args: []string{"hi"}})
//
// docs/embedding.md has a complete program.
package alephsandbox
