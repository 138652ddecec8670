package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Exit statuses of `policy check`.
const (
	exitPolicyAllow = 0
	exitPolicyWarn  = 1
	exitPolicyBlock = 2
)

// runPolicy is `aleph-sandbox policy check [--config FILE] [--json] --
// COMMAND-STRING`: the command-policy hook alone, on the string as
// `sh -c COMMAND-STRING` would be scanned.
func runPolicy(ctx context.Context, args []string, std stdio) int {
	const usageLine = "aleph-sandbox policy check [--config FILE] [--json] [--stdin] -- COMMAND-STRING"
	fs := flag.NewFlagSet("policy check", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "TOML config `FILE` (default: $XDG_CONFIG_HOME/aleph-sandbox/config.toml if present)")
	asJSON := fs.Bool("json", false, `print {"verdict", "rule", "reason"}`)
	withStdin := fs.Bool("stdin", false, "also scan standard input, as the command's stdin payload")
	if len(args) == 0 || args[0] != "check" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			printHelp(std.Out, fs, usageLine)
			return 0
		}
		return fail(std.Err, "policy: usage: %s", usageLine)
	}
	// Flag errors become the one-line refusal, not a usage dump.
	if done, code := parseFlags(fs, args[1:], std, usageLine); done {
		return code
	}
	if fs.NArg() == 0 {
		return fail(std.Err, "policy check: no command string (usage: aleph-sandbox policy check [--config FILE] [--json] -- COMMAND-STRING)")
	}
	command := strings.Join(fs.Args(), " ")
	cfg, err := loadConfig(*cfgPath, "", "")
	if err != nil {
		return fail(std.Err, "policy check: %s", oneLine(err.Error()))
	}
	var stdin []byte
	if *withStdin && std.In != nil {
		stdin, err = readBounded(std.In, alephsandbox.MaxPolicyStdin)
		if err != nil {
			return fail(std.Err, "policy check: reading stdin: %v", err)
		}
	}
	// The hook's own log lines (one per match, target command_policy) go
	// where the CLI's logs go; by default nowhere.
	logger, closeLog, err := cliLogger()
	if err != nil {
		return fail(std.Err, "policy check: %s", oneLine(err.Error()))
	}
	defer closeLog()
	// A custom rule that does not compile falls back to a safe rule set;
	// the warning says so, but the check still answers.
	policy := alephsandbox.NewPolicyChecker(cfg, alephsandbox.WithLogger(logger), alephsandbox.WithWarnings(std.Err))
	v, err := policy.Check(ctx, command, stdin)
	if err != nil {
		return fail(std.Err, "policy check: %v", err)
	}
	verdict, code := "allow", exitPolicyAllow
	switch v.Action {
	case driverapi.ActionDeny:
		verdict, code = "block", exitPolicyBlock
	case driverapi.ActionWarn:
		verdict, code = "warn", exitPolicyWarn
	}
	if *asJSON {
		writeJSON(std.Out, struct {
			Verdict string `json:"verdict"`
			Rule    string `json:"rule"`
			Reason  string `json:"reason"`
		}{verdict, v.Rule, v.Reason})
		return code
	}
	if verdict == "allow" {
		fmt.Fprintln(std.Out, "allow")
	} else {
		fmt.Fprintf(std.Out, "%s %s\n", verdict, v.Rule)
	}
	return code
}

// readBounded reads at most n bytes of r.
func readBounded(r io.Reader, n int) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, int64(n)))
}
