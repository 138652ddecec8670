package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
)

// runSessionLayer is `session changes|diff|apply|discard S`: a layered
// session's changes, read from its layer in the data directory (no
// pipeline, no driver: the layer is data), or with --host (or
// $ALEPH_SANDBOX_HOST) asked of the service that runs the session, whose
// process holds its layer and sandbox. Exit status of apply: 0 all
// applied, 1 something refused or in conflict (listed), 125 an error.
func runSessionLayer(ctx context.Context, sub string, args []string, io stdio) int {
	usage := map[string]string{
		"changes": "aleph-sandbox session changes [--json] [--host unix:PATH|tcp:HOST:PORT [--ca-file FILE] [--cert-file FILE --key-file FILE] | --config FILE] [--workspace-root DIR] ID",
		"diff":    "aleph-sandbox session diff [--host unix:PATH|tcp:HOST:PORT [--ca-file FILE] [--cert-file FILE --key-file FILE] | --config FILE] [--workspace-root DIR] ID [PATH...]",
		"apply":   "aleph-sandbox session apply [--json] [--allow-large] [--host unix:PATH|tcp:HOST:PORT [--ca-file FILE] [--cert-file FILE --key-file FILE] | --config FILE] [--workspace-root DIR] ID [PATH...]",
		"discard": "aleph-sandbox session discard [--host unix:PATH|tcp:HOST:PORT [--ca-file FILE] [--cert-file FILE --key-file FILE] | --config FILE] [--workspace-root DIR] ID",
	}[sub]
	fs := flag.NewFlagSet("session "+sub, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	allowLarge := fs.Bool("allow-large", false, "apply files over the size limit too")
	cfgPath := fs.String("config", "", "TOML config `FILE` (default: $XDG_CONFIG_HOME/aleph-sandbox/config.toml if present)")
	root := fs.String("workspace-root", "", "workspace root `DIR` (overrides sandbox.workspace_root)")
	var host hostOptions
	host.register(fs, "ask the aleph-sandbox serve at `unix:PATH` or tcp:HOST:PORT that runs the session (default: $ALEPH_SANDBOX_HOST; neither: read the layer here)")
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
	var lh alephsandbox.LayerHost
	target, remote, err := host.target()
	if err != nil {
		return failE(err)
	}
	if remote {
		if *cfgPath != "" || *root != "" {
			return failE(&usageError{"--config and --workspace-root do not apply with --host: the service's configuration places the layer"})
		}
		p, err := host.pipeline(target)
		if err != nil {
			return failE(err)
		}
		lh = p
		// Over TCP, a refused handshake or token says which option it
		// wants.
		failE = func(err error) int {
			fmt.Fprintf(io.Err, "aleph-sandbox: session %s: %s\n", sub, oneLine(remoteError(target, err).Error()))
			return 125
		}
	} else {
		cfg, err := loadConfig(*cfgPath, *root, "")
		if err != nil {
			return failE(err)
		}
		l, err := core.OpenSessionLayer(cfg, id)
		if err != nil {
			return failE(err)
		}
		lh = localLayer{l}
	}
	switch sub {
	case "changes":
		ch, err := lh.Changes(ctx, id)
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
		d, err := lh.Diff(ctx, id, paths...)
		if err != nil {
			return failE(err)
		}
		fmt.Fprint(io.Out, d)
		return 0
	case "discard":
		if err := lh.Discard(ctx, id); err != nil {
			return failE(err)
		}
		fmt.Fprintf(io.Out, "session %q: layer discarded; the host's workspace was never changed\n", id)
		return 0
	}
	res, err := lh.Apply(ctx, id, paths, layer.ApplyOptions{AllowLarge: *allowLarge})
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

// localLayer is a layer read in this process (no service): the layer is
// data in the data directory.
type localLayer struct{ l *layer.Layer }

func (x localLayer) Changes(ctx context.Context, _ string) ([]layer.Change, error) {
	return x.l.Changes(ctx)
}

func (x localLayer) Diff(ctx context.Context, _ string, paths ...string) (string, error) {
	return x.l.Diff(ctx, paths...)
}

// Apply records what the last command wrote first (a command of another
// process may not have).
func (x localLayer) Apply(ctx context.Context, _ string, paths []string, opt layer.ApplyOptions) (layer.ApplyResult, error) {
	if err := x.l.Observe(ctx); err != nil {
		return layer.ApplyResult{}, err
	}
	return x.l.Apply(ctx, paths, opt)
}

func (x localLayer) Discard(ctx context.Context, _ string) error {
	if err := x.l.Discard(ctx); err != nil {
		if errors.Is(err, layer.ErrLayerMounted) {
			return fmt.Errorf("%w (a service runs the session: discard it there with --host, or forget the session)", err)
		}
		return err
	}
	return nil
}
