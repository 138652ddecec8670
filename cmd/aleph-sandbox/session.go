package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// runSession is `aleph-sandbox session forget ID` (docs/cli.md: it clears the
// grants a session keeps across invocations), `session show ID` and
// `session list`.
func runSession(ctx context.Context, args []string, io stdio) int {
	const usageLine = "aleph-sandbox session list|forget|delete|show|changes|diff|apply|discard [--json] [--config FILE] ID"
	sub := "help"
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "changes", "diff", "apply", "discard":
		return runSessionLayer(ctx, sub, args[1:], io)
	}
	fs := flag.NewFlagSet("session "+sub, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	cfgPath := fs.String("config", "", "TOML config `FILE` that places the session's private HOME (default: $XDG_CONFIG_HOME/aleph-sandbox/config.toml if present)")
	if len(args) == 0 || (args[0] != "forget" && args[0] != "delete" && args[0] != "show" && args[0] != "list") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			printHelp(io.Out, fs, usageLine)
			return 0
		}
		return fail(io.Err, "session: usage: %s", usageLine)
	}
	if done, code := parseFlags(fs, args[1:], io, usageLine); done {
		return code
	}
	if args[0] == "list" {
		return listSessions(fs, *cfgPath, *asJSON, io)
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return fail(io.Err, "session %s: give exactly one session ID (usage: %s)", args[0], usageLine)
	}
	id := fs.Arg(0)
	dir := alephsandbox.DefaultGrantStoreDir()
	if dir == "" {
		return fail(io.Err, "session: no data directory (set XDG_DATA_HOME or HOME): no grants are kept")
	}
	store := core.NewFileGrantStore(dir)
	if args[0] == "forget" || args[0] == "delete" {
		verb := args[0]
		cfg, err := loadConfig(*cfgPath, "", "")
		if err != nil {
			return fail(io.Err, "session %s: %s", verb, oneLine(err.Error()))
		}
		if err := store.Delete(id); err != nil {
			return fail(io.Err, "session %s: %s", verb, oneLine(err.Error()))
		}
		if err := core.RemoveSessionHome(cfg, id); err != nil {
			return fail(io.Err, "session %s: %s", verb, oneLine(err.Error()))
		}
		// A layered session's layer goes with it (the host never saw it).
		if l, err := core.OpenSessionLayer(cfg, id); err == nil {
			if err := l.Discard(ctx); err != nil {
				return fail(io.Err, "session %s: %s", verb, oneLine(err.Error()))
			}
		} else if !errors.Is(err, core.ErrNoLayer) {
			return fail(io.Err, "session %s: %s", verb, oneLine(err.Error()))
		}
		if verb == "delete" {
			// The workspace the sandbox made for the session under
			// sandbox.workspace_root; a --workspace directory is the
			// user's and is never removed.
			if err := core.RemoveSessionWorkspace(cfg, id); err != nil {
				return fail(io.Err, "session delete: %s", oneLine(err.Error()))
			}
			if !*asJSON {
				fmt.Fprintf(io.Out, "session %q deleted: its grants are cleared, its private HOME and its workspace removed\n", id)
			}
			return 0
		}
		// Its record goes (a forgotten session is no longer listed as
		// kept); the workspace stays and its next command records it again.
		if err := core.RemoveSessionRecord(cfg, id); err != nil {
			return fail(io.Err, "session forget: %s", oneLine(err.Error()))
		}
		if !*asJSON {
			fmt.Fprintf(io.Out, "session %q forgotten: its grants are cleared and its private HOME removed (its workspace stays)\n", id)
		}
		return 0
	}
	st, ok, err := store.Load(id)
	if err != nil {
		return fail(io.Err, "session show: %s", oneLine(err.Error()))
	}
	if *asJSON {
		if !ok {
			st = core.StoredGrants{Session: id}
		}
		b, _ := json.Marshal(st)
		fmt.Fprintln(io.Out, string(b))
		return 0
	}
	if !ok || (len(st.Grants) == 0 && len(st.NetHosts) == 0) {
		fmt.Fprintf(io.Out, "session %q holds no grants\n", id)
		return 0
	}
	for _, g := range st.Grants {
		fmt.Fprintf(io.Out, "grant: %s\n", core.Summary(g, st.Baseline))
	}
	for _, h := range st.NetHosts {
		fmt.Fprintf(io.Out, "network grant: %s\n", h)
	}
	return 0
}

// keptSession is one line of `session list --json`.
type keptSession struct {
	Session string `json:"session"`
	// Workspace is the directory the sandbox made for the session, when
	// it is on disk with the record naming it ("" when only grants are
	// kept).
	Workspace string `json:"workspace"`
	// Grants: the session keeps grants (approved elevations).
	Grants bool `json:"grants"`
}

// listSessions is `session list`: the sessions kept on disk, those whose
// workspace is there with its record (core.RecordedSessions) and those
// whose grants are kept, as a restarted serve lists them.
func listSessions(fs *flag.FlagSet, cfgPath string, asJSON bool, io stdio) int {
	if fs.NArg() != 0 {
		return fail(io.Err, "session list: takes no session ID")
	}
	cfg, err := loadConfig(cfgPath, "", "")
	if err != nil {
		return fail(io.Err, "session list: %s", oneLine(err.Error()))
	}
	byID := map[string]*keptSession{}
	for _, id := range core.RecordedSessions(cfg) {
		byID[id] = &keptSession{Session: id, Workspace: filepath.Join(cfg.Sandbox.WorkspaceRoot, core.SessionDirName(id))}
	}
	if dir := alephsandbox.DefaultGrantStoreDir(); dir != "" {
		for _, id := range core.NewFileGrantStore(dir).Sessions() {
			if byID[id] == nil {
				byID[id] = &keptSession{Session: id}
			}
			byID[id].Grants = true
		}
	}
	out := make([]keptSession, 0, len(byID))
	for _, k := range slices.Sorted(maps.Keys(byID)) {
		out = append(out, *byID[k])
	}
	if asJSON {
		b, _ := json.Marshal(map[string]any{"sessions": out})
		fmt.Fprintln(io.Out, string(b))
		return 0
	}
	if len(out) == 0 {
		fmt.Fprintln(io.Out, "no sessions kept on disk")
		return 0
	}
	for _, k := range out {
		// Quoted: an id may hold spaces, newlines or escapes.
		line := strconv.Quote(k.Session)
		if k.Workspace != "" {
			line += "  workspace " + k.Workspace
		}
		if k.Grants {
			line += "  (grants kept)"
		}
		fmt.Fprintln(io.Out, line)
	}
	return 0
}
