package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
)

// runSessionLayer is `session changes|diff|apply|discard S`: a layered
// session's changes, read from its layer in the data directory (no
// pipeline, no driver: the layer is data). Exit status of apply: 0 all
// applied, 1 something refused or in conflict (listed), 125 an error.
func runSessionLayer(ctx context.Context, sub string, args []string, io stdio) int {
	usage := map[string]string{
		"changes": "aleph-sandbox session changes [--json] [--config FILE] [--workspace-root DIR] ID",
		"diff":    "aleph-sandbox session diff [--config FILE] [--workspace-root DIR] ID [PATH...]",
		"apply":   "aleph-sandbox session apply [--json] [--allow-large] [--config FILE] [--workspace-root DIR] ID [PATH...]",
		"discard": "aleph-sandbox session discard [--config FILE] [--workspace-root DIR] ID",
	}[sub]
	fs := flag.NewFlagSet("session "+sub, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	allowLarge := fs.Bool("allow-large", false, "apply files over the size limit too")
	cfgPath := fs.String("config", "", "TOML config `FILE` (default: $XDG_CONFIG_HOME/aleph-sandbox/config.toml if present)")
	root := fs.String("workspace-root", "", "workspace root `DIR` (overrides sandbox.workspace_root)")
	if done, code := parseFlags(fs, args, io, usage); done {
		if code != 0 {
			return 125
		}
		return code
	}
	if fs.NArg() < 1 || fs.Arg(0) == "" || (fs.NArg() > 1 && (sub == "changes" || sub == "discard")) {
		fmt.Fprintf(io.Err, "aleph-sandbox: session %s: usage: %s\n", sub, usage)
		return 125
	}
	id, paths := fs.Arg(0), fs.Args()[1:]
	failE := func(err error) int {
		fmt.Fprintf(io.Err, "aleph-sandbox: session %s: %s\n", sub, oneLine(err.Error()))
		return 125
	}
	cfg, err := loadConfig(*cfgPath, *root, "")
	if err != nil {
		return failE(err)
	}
	l, err := core.OpenSessionLayer(cfg, id)
	if err != nil {
		return failE(err)
	}
	switch sub {
	case "changes":
		ch, err := l.Changes(ctx)
		if err != nil {
			return failE(err)
		}
		if *asJSON {
			b, _ := json.Marshal(map[string]any{"session": id, "changes": ch})
			fmt.Fprintln(io.Out, string(b))
			return 0
		}
		for _, c := range ch {
			fmt.Fprintf(io.Out, "%s\t%s\n", c.Kind, c.Path)
		}
		return 0
	case "diff":
		d, err := l.Diff(ctx, paths...)
		if err != nil {
			return failE(err)
		}
		fmt.Fprint(io.Out, d)
		return 0
	case "discard":
		if err := l.Discard(ctx); err != nil {
			if errors.Is(err, layer.ErrLayerMounted) {
				return failE(fmt.Errorf("%w (a service runs the session: discard it there, or forget the session)", err))
			}
			return failE(err)
		}
		fmt.Fprintf(io.Out, "session %q: layer discarded; the host's workspace was never changed\n", id)
		return 0
	}
	// apply: what the last command wrote is recorded first.
	if err := l.Observe(ctx); err != nil {
		return failE(err)
	}
	res, err := l.Apply(ctx, paths, layer.ApplyOptions{AllowLarge: *allowLarge})
	if err != nil {
		return failE(err)
	}
	if *asJSON {
		b, _ := json.Marshal(res)
		fmt.Fprintln(io.Out, string(b))
	} else {
		for _, p := range res.Applied {
			fmt.Fprintf(io.Out, "applied\t%s\n", p)
		}
		for _, r := range res.Refused {
			fmt.Fprintf(io.Out, "refused\t%s\t%s\t%s\n", r.Path, r.Reason, r.Detail)
		}
		for _, p := range res.Conflicts {
			fmt.Fprintf(io.Out, "conflict\t%s\n", p)
		}
		if g := res.Git; g != nil {
			for _, u := range g.Updated {
				fmt.Fprintf(io.Out, "git\t%s\t%s -> %s\n", u.Ref, u.Old, u.New)
			}
			for _, c := range g.Conflicts {
				fmt.Fprintf(io.Out, "git conflict\t%s\tkept at %s\t%s\n", c.Ref, c.SessionRef, c.Reason)
			}
			if g.IndexReset {
				fmt.Fprintln(io.Out, "git\tthe index was reset to the new HEAD: what the session had staged is unstaged")
			}
		}
	}
	if !res.Clean() {
		return 1
	}
	return 0
}
