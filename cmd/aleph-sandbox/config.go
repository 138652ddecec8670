package main

import (
	"context"
	"flag"
	"fmt"
)

// runConfig prints the effective configuration: defaults, the file and the
// ALEPH_SANDBOX_ environment overrides, merged and validated.
func runConfig(_ context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	path := fs.String("config", "", "TOML config `FILE`")
	asJSON := fs.Bool("json", false, "print JSON")
	if done, code := parseFlags(fs, args, io, "aleph-sandbox config [--config FILE] [--json]"); done {
		return code
	}
	if fs.NArg() > 0 {
		return fail(io.Err, "config: unexpected argument %q", fs.Arg(0))
	}
	cfg, err := loadConfig(*path, "", "")
	if err != nil {
		return fail(io.Err, "%s", oneLine(err.Error()))
	}
	if *asJSON {
		writeJSON(io.Out, cfg.Effective())
		return 0
	}
	fmt.Fprint(io.Out, cfg.String())
	return 0
}
