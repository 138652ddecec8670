package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// commandHelp is what `aleph-sandbox help COMMAND` (or COMMAND -h) says
// beyond the usage line and the flags: what the command does and prints,
// and examples that run as written after `make build` (every one is also
// in docs/cli.md's examples, which a test runs).
type commandHelp struct {
	about    []string
	examples []helpExample
}

type helpExample struct{ line, note string }

// helpFor is the help text of the command named by a FlagSet's first word.
func helpFor(command string) commandHelp {
	switch command {
	case "exec":
		return commandHelp{
			about: []string{
				"Runs PROGRAM in the sandbox: the session's workspace is its working directory and the",
				"only place it may write; no network and no subprocesses unless the flags ask (each such",
				"elevation is asked for on a terminal, granted by --yes, else denied). Exit status: the",
				"child's own; 128+N for a signal; 124 timed out; 125 refused or failed (one line on stderr).",
			},
			examples: []helpExample{
				{"aleph-sandbox exec -- /bin/echo hello", "the child's output and status"},
				{"aleph-sandbox exec --spawn --yes -- /bin/sh -c 'echo a | tr a b'", "a shell pipeline needs --spawn"},
				{"aleph-sandbox exec --json -- /bin/sh -c 'echo out; echo err >&2'", "one JSON object"},
				{"aleph-sandbox exec --timeout 200ms -- /bin/sleep 5", "exit 124: timed out"},
				{"aleph-sandbox exec --net all -- /bin/true", "exit 125: an elevation, denied without --yes or a terminal"},
			},
		}
	case "bench":
		return commandHelp{
			about: []string{
				"Runs the command N times each way, interleaved, and prints one row per way: direct exec",
				"(no sandbox), raw bwrap with the driver's own flags (Linux with the bwrap driver only: no",
				"sandbox-init, cgroup, plugin or core), the warm pipeline (the driver launched once, as an",
				"embedding host runs it), the cold CLI (a fresh `aleph-sandbox exec` per run), raw minimal",
				"bwrap (the smallest bwrap sandbox: every namespace, the system directories, /proc, /dev,",
				"the workspace), the CLI's own start (--version), a command through a private `serve` in an",
				"existing session (its first command not counted), the first command of a new session",
				"there, and `exec --host` from a fresh CLI (the serve rows left out, with a note, when serve",
				"cannot start). Columns: the 50th, 90th and 99th percentile latency in milliseconds, and the",
				"row's p50 over raw bwrap's and over raw minimal bwrap's (1.50x: half again as slow; -",
				"when there is no such row). The lines after it give the warm pipeline's throughput in",
				"runs per second, serve's at concurrency 4 with a session per worker beside raw bwrap's",
				"at concurrency 4, and the one-shot CLI over raw minimal bwrap. --json prints the same figures",
				"(p50_ms, raw_p50_ms, warm_vs_raw, ...; docs/cli.md). Every run must succeed (exit 0)",
				"or bench exits 125 naming the first failure. The exec flags shape the command.",
				"--warm-only measures the warm pipeline alone (long soaks without the baselines).",
				"After each warm, serve and exec --host run a round pauses 40 ms, untimed: a driver with prepared",
				"sandboxes tears the used one down and builds the next in the background, and that work",
				"must not land on the next row.",
			},
			examples: []helpExample{
				{"aleph-sandbox bench --n 3 -- /bin/true", "the rows side by side"},
				{"aleph-sandbox bench --warm-only --n 20 -- /bin/true", "the warm pipeline alone"},
				{"aleph-sandbox bench --json --n 3 --concurrency 2 -- /bin/true", ""},
			},
		}
	case "doctor":
		return commandHelp{
			about: []string{
				"Launches the driver and says what it enforces on this host, what it cannot and how to fix",
				"that (a missing bwrap, no user namespaces, no cgroup delegation, ...).",
			},
			examples: []helpExample{{"aleph-sandbox doctor", ""}, {"aleph-sandbox doctor --json", ""}},
		}
	case "drivers":
		return commandHelp{
			about: []string{
				"Lists the driver binaries found where exec looks (beside aleph-sandbox,",
				"$ALEPH_SANDBOX_PLUGIN_DIR, $PATH) with each one's capability report; a driver built for",
				"another system (seatbelt: macOS, appcontainer: Windows) is named as such, not launched.",
			},
			examples: []helpExample{{"aleph-sandbox drivers", ""}, {"aleph-sandbox drivers --json", ""}},
		}
	case "config":
		return commandHelp{
			about:    []string{"Prints the effective configuration: defaults, the file and ALEPH_SANDBOX_* overrides, merged and checked."},
			examples: []helpExample{{"aleph-sandbox config", ""}, {"aleph-sandbox config --json", ""}},
		}
	case "policy":
		return commandHelp{
			about: []string{
				"Runs the command-policy hook alone on COMMAND-STRING, as `sh -c COMMAND-STRING` would be",
				"scanned, and prints block RULE, warn RULE or allow. Exit 0 allow, 1 warn, 2 block, 125 error.",
			},
			examples: []helpExample{
				{"aleph-sandbox policy check -- 'rm -rf /'", "exit 2: the command policy blocks it"},
				{"aleph-sandbox policy check --json -- 'curl https://example.com | sh'", "exit 1: a warning"},
			},
		}
	case "conformance":
		return commandHelp{
			about: []string{
				"Runs the shared driver conformance suite against a driver binary: one line per case",
				"(PASS, FAIL, SKIP with the reason), then the counts. Exit 0 only when nothing failed,",
				"1 when a case failed, 125 when the run could not be made: a bad flag, a --run that",
				"matches no case, a driver that does not start. --json prints one object even then.",
			},
			examples: []helpExample{
				{"aleph-sandbox conformance --list", "the cases, without running them"},
				{"aleph-sandbox conformance --driver bwrap --run '^protocol/handshake$'", ""},
			},
		}
	case "mcp":
		return commandHelp{
			about: []string{
				"Serves the sandbox to an MCP client on stdin and stdout (run_command, and process tools",
				"start_process ... list_processes); the client starts it. Every call runs in the one",
				"session given, on a pipeline of its own or on a running serve (--host; docs/mcp.md).",
				"A layered session's changes are listed by changes and diff; apply runs only when the",
				"user accepts it (elicitation), else it names the command to run: aleph-sandbox session apply S.",
			},
			examples: []helpExample{{"aleph-sandbox mcp --allow-spawn < /dev/null", "ends when the client closes stdin"},
				{"aleph-sandbox mcp --workspace . < /dev/null", "every call in this directory as its workspace"}},
		}
	case "session":
		return commandHelp{
			about: []string{
				"Shows or forgets the grants a session keeps across CLI calls (approved elevations);",
				"forgetting clears them and keeps the session's workspace. list names the sessions kept",
				"on disk: their workspace (with the record naming it) or their grants.",
			},
			examples: []helpExample{{"aleph-sandbox session list", ""}, {"aleph-sandbox session show demo", ""}, {"aleph-sandbox session forget demo", ""}},
		}
	case "version":
		return commandHelp{
			about:    []string{"Prints the CLI's version and driver protocol; with --json, also each driver found."},
			examples: []helpExample{{"aleph-sandbox version", ""}, {"aleph-sandbox version --json", ""}},
		}
	case "serve":
		return commandHelp{
			about: []string{
				"Keeps one warm pipeline running and serves it to local clients on a unix socket",
				"(docs/serve.md); `exec --host` and the Python and TypeScript clients talk to it.",
				"`serve drain` makes the running server drain without a signal (a pod's preStop hook):",
				"not ready, new sessions refused, the sessions it holds still served.",
			},
			examples: []helpExample{{"aleph-sandbox serve &", "on $XDG_RUNTIME_DIR/aleph-sandbox/aleph.sock"}},
		}
	}
	return commandHelp{}
}

// printHelp writes a command's help to w: the usage line, what the command
// does, each flag as --NAME ARG with its meaning and default, and examples.
func printHelp(w io.Writer, fs *flag.FlagSet, usageLine string) {
	command, _, _ := strings.Cut(fs.Name(), " ")
	h := helpFor(command)
	fmt.Fprintln(w, "usage: "+usageLine)
	if len(h.about) > 0 {
		fmt.Fprintln(w)
		for _, l := range h.about {
			fmt.Fprintln(w, l)
		}
	}
	var flags [][2]string
	width := 0
	// A one-letter flag with the same meaning as a long one is its short
	// spelling (-i of --interactive): shown on the long flag's line.
	short := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) == 1 {
			short[f.Usage] = f.Name
		}
	})
	aliased := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		if s, ok := short[f.Usage]; ok && len(f.Name) > 1 {
			aliased[s] = true
		}
	})
	fs.VisitAll(func(f *flag.Flag) {
		if aliased[f.Name] {
			return
		}
		arg, usage := flag.UnquoteUsage(f)
		switch arg {
		case "string", "value":
			arg = "VALUE"
		case "duration":
			arg = "DURATION"
		case "int", "uint", "int64", "uint64", "float":
			arg = "N"
		}
		name := "--" + f.Name
		if s, ok := short[f.Usage]; ok && len(f.Name) > 1 {
			name = "-" + s + ", " + name
		}
		if arg != "" {
			name += " " + arg
		}
		if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "0s" && d != "[]" {
			usage += fmt.Sprintf(" (default %s)", d)
		}
		flags = append(flags, [2]string{name, usage})
		width = max(width, len(name))
	})
	if len(flags) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "flags:")
		for _, f := range flags {
			fmt.Fprintf(w, "  %-*s  %s\n", width, f[0], f[1])
		}
	}
	if len(h.examples) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "examples:")
		for _, e := range h.examples {
			if e.note != "" {
				fmt.Fprintf(w, "  %s   # %s\n", e.line, e.note)
			} else {
				fmt.Fprintf(w, "  %s\n", e.line)
			}
		}
	}
}

// usage is the top-level help: every command with its summary, where each
// one's flags and examples are, and a few examples.
func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: aleph-sandbox COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, sc := range subcommands() {
		fmt.Fprintf(w, "  %-12s %s\n", sc.name, sc.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "aleph-sandbox help COMMAND (or COMMAND --help) lists the command's --flags with examples;")
	fmt.Fprintln(w, "aleph-sandbox --version prints the version.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "examples:")
	for _, e := range []string{
		"aleph-sandbox exec -- /bin/echo hello",
		"aleph-sandbox exec --spawn --yes -- /bin/sh -c 'echo a | tr a b'",
		"aleph-sandbox help exec",
		"aleph-sandbox doctor",
	} {
		fmt.Fprintln(w, "  "+e)
	}
}
