// Command aleph-sandbox runs commands inside the strongest OS sandbox this
// host offers. See docs/ and the command-line contract in the README.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	goio "io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/aleph-sandbox/aleph-sandbox/conformance"
)

// cliVersion is the CLI's version (`aleph-sandbox --version`).
const cliVersion = "0.2.0"

// Exit statuses shared by the subcommands.
const (
	exitSandboxError = 125 // the sandbox refused or failed to run the command
	exitTimedOut     = 124
	// exitBrokenPipe is what a shell reports for a command killed by
	// SIGPIPE (128+13): exec's stdout was closed by its reader.
	exitBrokenPipe = 141
)

// stdio is the process's standard streams, passed down so subcommands can be
// tested without touching os.Std*.
type stdio struct {
	In       io.Reader
	Out, Err io.Writer
	// InIsTerminal reports whether In is an interactive terminal.
	InIsTerminal bool
	// InIsPipe reports whether In is a pipe or a regular file: input
	// someone meant for a program (`echo x | aleph-sandbox exec -- cat`),
	// which exec passes only when asked (--stdin, -i) and otherwise says
	// it did not.
	InIsPipe bool
	// forwardSignals, when set, diverts the CLI's SIGINT, SIGTERM and
	// SIGHUP to ch until the returned function is called (signalRouter).
	forwardSignals func(ch chan<- os.Signal) (restore func())
	// OutIsTerminal and ErrIsTerminal report whether Out and Err are
	// terminals: the child's output written there is filtered
	// (internal/termsafe) unless --raw-output.
	OutIsTerminal, ErrIsTerminal bool
}

type subcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, io stdio) int
}

func subcommands() []subcommand {
	return []subcommand{
		{"exec", "run a command in the sandbox", runExec},
		{"bench", "measure the warm pipeline against direct execution", runBench},
		{"doctor", "what this host can enforce, and how to fix what it cannot", runDoctor},
		{"drivers", "drivers found, with their capability reports", runDrivers},
		{"config", "print the effective configuration", runConfig},
		{"policy", "check a command string against the command policy", runPolicy},
		{"conformance", "run the driver conformance suite against a driver binary", runConformance},
		{"mcp", "serve the sandbox to MCP clients on stdio (tool run_command)", runMCP},
		{"session", "list the sessions kept on disk; show or forget the grants a session keeps across invocations", runSession},
		{"version", "the CLI's version and protocol; with --json, each driver found", runVersion},
		{"serve", "serve the warm pipeline to local clients over a unix socket", runServe},
	}
}

func main() {
	// `conformance` runs this binary as the suite's probe (no separate
	// probe binary to ship): started so, it is the probe and nothing else.
	conformance.ServeProbe(os.Args)
	ctx, cancel := context.WithCancel(context.Background())
	router := newSignalRouter(cancel)
	// Asking for SIGPIPE makes a write to a closed stdout fail with EPIPE
	// instead of killing the CLI on the spot: exec then ends the command
	// and cleans up before it exits 141 (exitBrokenPipe). Notify rather
	// than Ignore: an ignored signal stays ignored in the driver and the
	// sandboxed command (exec keeps SIG_IGN), which would change how the
	// command's own pipes behave; a caught one is reset at exec.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	code := dispatch(ctx, os.Args[1:], stdio{
		In: os.Stdin, Out: os.Stdout, Err: os.Stderr,
		InIsTerminal: isTerminal(os.Stdin), InIsPipe: isPipeOrFile(os.Stdin), OutIsTerminal: isTerminal(os.Stdout), ErrIsTerminal: isTerminal(os.Stderr),
		forwardSignals: router.forward,
	})
	signal.Stop(sigpipe)
	router.stop()
	cancel()
	os.Exit(code)
}

func dispatch(ctx context.Context, args []string, io stdio) int {
	if len(args) >= 2 && args[0] == "help" {
		// `help exec` is `exec --help`.
		for _, sc := range subcommands() {
			if sc.name == args[1] {
				return sc.run(ctx, []string{"--help"}, io)
			}
		}
	}
	if len(args) >= 2 && args[0] == "help" {
		if near := nearestCommand(args[1]); near != "" {
			fmt.Fprintf(io.Err, "aleph-sandbox: no command %q; did you mean %q?\n\n", args[1], near)
		} else {
			fmt.Fprintf(io.Err, "aleph-sandbox: no command %q\n\n", args[1])
		}
		usage(io.Err)
		return 2
	}
	// Help asked for goes to stdout (`aleph-sandbox help | less`); the
	// usage shown for a missing command is an error, on stderr.
	if len(args) == 0 {
		usage(io.Err)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(io.Out)
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		return runVersion(ctx, args[1:], io)
	}
	for _, sc := range subcommands() {
		if sc.name == args[0] {
			return sc.run(ctx, args[1:], io)
		}
	}
	if near := nearestCommand(args[0]); near != "" {
		fmt.Fprintf(io.Err, "aleph-sandbox: unknown command %q; did you mean %q? (run aleph-sandbox help)\n", args[0], near)
		return 2
	}
	fmt.Fprintf(io.Err, "aleph-sandbox: unknown command %q (run aleph-sandbox help)\n", args[0])
	return 2
}

// nearestCommand is the subcommand closest to a mistyped one (`exce`,
// `serv`, `confromance`), or "" when none is close: at most two edits
// away (a swap of neighbours counts as one), or a prefix of at least two
// letters that names exactly one command.
func nearestCommand(typed string) string {
	best, bestDist, prefixed := "", 3, []string{}
	for _, sc := range subcommands() {
		if d := editDistance(typed, sc.name); d < bestDist {
			best, bestDist = sc.name, d
		}
		if len(typed) >= 2 && strings.HasPrefix(sc.name, typed) {
			prefixed = append(prefixed, sc.name)
		}
	}
	if best == "" && len(prefixed) == 1 {
		return prefixed[0]
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of neighbours cost one.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

func isPipeOrFile(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && (st.Mode()&os.ModeNamedPipe != 0 || st.Mode().IsRegular())
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// fail prints the one-line refusal the CLI contract promises and returns 125.
func fail(w io.Writer, format string, a ...any) int {
	fmt.Fprintf(w, "aleph-sandbox: "+format+"\n", a...)
	return exitSandboxError
}

// parseFlags parses args into fs. A flag error becomes the one-line
// refusal of the contract (exit 125) instead of Go's usage dump; -h prints
// the usage line and the flags to stderr (exit 0). done reports whether the
// caller should return code now.
func parseFlags(fs *flag.FlagSet, args []string, io stdio, usageLine string) (done bool, code int) {
	help, err := parseFlagsQuiet(fs, args, io, usageLine)
	switch {
	case help:
		return true, 0
	case err != nil:
		return true, fail(io.Err, "%s: %v (usage: %s)", fs.Name(), err, usageLine)
	}
	return false, 0
}

// parseFlagsQuiet is parseFlags leaving the report of a flag error to the
// caller.
func parseFlagsQuiet(fs *flag.FlagSet, args []string, io stdio, usageLine string) (help bool, err error) {
	fs.SetOutput(goio.Discard)
	fs.Usage = func() {}
	err = fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		printHelp(io.Out, fs, usageLine)
		return true, nil
	}
	if err != nil {
		return false, errors.New(flagErrorText(err.Error()))
	}
	return false, nil
}

// flagErrorText words the flag package's errors with the flags spelled as
// the help spells them (--name): "flag provided but not defined: -x"
// becomes "unknown flag --x", "invalid value "v" for flag -x: why" becomes
// "invalid value "v" for --x: why", "flag needs an argument: -x" becomes
// "--x needs a value".
func flagErrorText(msg string) string {
	for _, r := range []struct{ prefix, repl string }{
		{"flag provided but not defined: -", "unknown flag --"},
		{"flag needs an argument: -", "--"},
	} {
		if rest, ok := strings.CutPrefix(msg, r.prefix); ok {
			rest = strings.TrimPrefix(rest, "-")
			if r.prefix == "flag needs an argument: -" {
				return r.repl + rest + " needs a value"
			}
			return r.repl + rest
		}
	}
	for _, sep := range []string{" for flag -", " for -"} {
		if before, after, ok := strings.Cut(msg, sep); ok && strings.HasPrefix(before, "invalid ") {
			after = strings.TrimSuffix(after, ": parse error") // strconv.ParseBool's
			if strings.HasPrefix(before, "invalid boolean value") && !strings.Contains(after, ":") {
				after += ": want true or false"
			}
			return before + " for --" + strings.TrimPrefix(after, "-")
		}
	}
	return msg
}
