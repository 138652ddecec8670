package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// helpSections splits a command's help into its flag lines and example
// lines.
func helpSections(help string) (flags, examples []string) {
	var in string
	for _, l := range strings.Split(help, "\n") {
		switch {
		case l == "flags:" || l == "examples:":
			in = l
		case l == "":
			in = ""
		case in == "flags:":
			flags = append(flags, l)
		case in == "examples:":
			examples = append(examples, l)
		}
	}
	return flags, examples
}

// `help COMMAND` shows every flag of the command spelled --name, each with
// its meaning on the same line, and examples of the command; every example
// is one of docs/cli.md's, which TestDocExamplesRunAsWritten runs.
func TestHelpListsFlagsAndExamples(t *testing.T) {
	cliEnv(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	docLines := map[string]bool{}
	for _, l := range strings.Split(string(doc)+"\n"+string(readme), "\n") {
		docLines[strings.TrimSpace(withoutComment(l))] = true
	}
	flagLine := regexp.MustCompile(`^  (-[a-z], )?--[a-z][a-z0-9-]*( \S+)?\s{2,}\S`)
	for _, sc := range subcommands() {
		r := cli(t, "", false, "help", sc.name)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "usage: aleph-sandbox "+sc.name) {
			t.Errorf("help %s: exit %d, %q", sc.name, r.code, r.stdout)
			continue
		}
		flags, examples := helpSections(r.stdout)
		if len(flags) == 0 {
			t.Errorf("help %s lists no flags:\n%s", sc.name, r.stdout)
		}
		for _, l := range flags {
			if !flagLine.MatchString(l) {
				t.Errorf("help %s: flag line %q is not `--name [ARG]  meaning`", sc.name, l)
			}
		}
		if len(examples) == 0 {
			t.Errorf("help %s has no examples:\n%s", sc.name, r.stdout)
		}
		for _, e := range examples {
			line := strings.TrimSpace(withoutComment(e))
			if !strings.HasPrefix(line, "aleph-sandbox "+sc.name) {
				t.Errorf("help %s: example %q is not of the command", sc.name, e)
			}
			if !docLines["bin/"+line] {
				t.Errorf("help %s: example %q is not among docs/cli.md's (or README.md's) examples as bin/%s", sc.name, e, line)
			}
		}
	}
	// exec's help names every exec flag, as --name.
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f runFlags
	f.register(fs)
	r := cli(t, "", false, "help", "exec")
	fs.VisitAll(func(fl *flag.Flag) {
		if len(fl.Name) == 1 {
			// A short spelling, on its long flag's line.
			if !regexp.MustCompile(`\n  -` + fl.Name + `, --[a-z-]+ `).MatchString(r.stdout) {
				t.Errorf("help exec does not list -%s beside its long flag:\n%s", fl.Name, r.stdout)
			}
			return
		}
		if !regexp.MustCompile(`\n  (-[a-z], )?--` + fl.Name + ` `).MatchString(r.stdout) {
			t.Errorf("help exec does not list --%s:\n%s", fl.Name, r.stdout)
		}
	})
	if strings.Contains(r.stdout, "--i ") || strings.Contains(r.stdout, "--t ") {
		t.Errorf("help exec spells a short flag with two dashes:\n%s", r.stdout)
	}
	for _, want := range []string{"--raw-output", "--host unix:PATH", "--timeout DURATION", "(default 10s)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("help exec lacks %q", want)
		}
	}
	if regexp.MustCompile(`(?m)^\s+-[a-z](?:[^,]|$)`).MatchString(r.stdout) {
		t.Errorf("help exec spells a flag with one dash:\n%s", r.stdout)
	}
	// The top-level help says where the flags are.
	top := cli(t, "", false, "help")
	if top.code != 0 || !strings.Contains(top.stdout, "help COMMAND") || !strings.Contains(top.stdout, "examples:") {
		t.Errorf("help: exit %d\n%s", top.code, top.stdout)
	}
}

// bench -h says what bench prints: the rows, the columns and their unit,
// the ratio column and the throughput line.
func TestBenchHelpSaysWhatItPrints(t *testing.T) {
	cliEnv(t)
	r := cli(t, "", false, "bench", "-h")
	for _, want := range []string{"direct exec", "raw bwrap", "warm pipeline", "cold CLI", "milliseconds", "p50", "90th", "99th", "1.50x", "runs per second", "--json", "exits 125"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("bench -h does not say %q:\n%s", want, r.stdout)
		}
	}
}

// Flag errors spell the flag as the help does.
func TestFlagErrorsSpellFlagsWithTwoDashes(t *testing.T) {
	cliEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "--no-such", "--", "x"}, "unknown flag --no-such"},
		{[]string{"exec", "--timeout", "soon", "--", "x"}, `invalid value "soon" for --timeout: not a duration`},
		{[]string{"exec", "--spawn=maybe", "--", "x"}, `invalid boolean value "maybe" for --spawn: want true or false`},
		{[]string{"exec", "--timeout"}, "--timeout needs a value"},
		{[]string{"policy", "check", "--nope", "--", "x"}, "unknown flag --nope"},
	} {
		r := cli(t, "", false, c.args...)
		if r.code != 125 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, " -"+strings.TrimLeft(c.args[len(c.args)-1], "-")+":") {
			t.Errorf("%q: exit %d, %q; want %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

// goIdentifier matches what a Go API name looks like in a message: a
// qualified name (Command.SessionID, core.Config) or a mixed-case word
// (SessionID, WithSession, MaxOutputBytes).
// pathToken is a path in a message (a temporary directory's random name
// looks like an identifier).
var pathToken = regexp.MustCompile(`[^\s"\\]*/[^\s"\\]*`)

var goIdentifier = regexp.MustCompile(`\b[A-Za-z]+\.[A-Z][A-Za-z]+\b|\b[A-Z][a-z]+[A-Z][A-Za-z]*\b|\b[a-z]+[A-Z][A-Za-z]*\b`)

// The CLI's refusals of common mistakes name the flag, never a Go API
// name (the core's errors carry those for Go callers, in a Hint the CLI
// leaves out).
func TestMessagesNameFlagsNotGoIdentifiers(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the cases' paths (/, relative/dir) are POSIX paths")
	}
	drv := cliEnv(t)
	missing := filepath.Join(t.TempDir(), "missing")
	ws := t.TempDir()
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"--session="}, "--session"},
		{[]string{"--workspace", missing}, "--workspace"},
		{[]string{"--workspace", "relative/dir"}, "--workspace"},
		{[]string{"--workspace", ws, "--cwd", "nowhere"}, "--cwd"},
		{[]string{"--read", "/", "--yes"}, "--read"},
		{[]string{"--write", "/", "--yes"}, "--write"},
		{[]string{"--net", "bad/host"}, "--net"},
		{[]string{"--env", "=x"}, "--env"},
		{[]string{"--timeout", "-1s"}, "--timeout"},
		{[]string{"--max-output", "0"}, "--max-output"},
	} {
		for _, asJSON := range []bool{false, true} {
			args := append([]string{"exec", "--driver", drv}, c.args...)
			if asJSON {
				args = append(args, "--json")
			}
			r := cli(t, "", false, append(args, "--", "echo", "x")...)
			msg := r.stderr + r.stdout
			if r.code != 125 || !strings.Contains(msg, c.flag) {
				t.Errorf("%q: exit %d, %q; want 125 naming %s", args, r.code, msg, c.flag)
			}
			// Paths and JSON keys are not identifiers; the message is.
			text := pathToken.ReplaceAllString(strings.NewReplacer(missing, "", ws, "").Replace(msg), "")
			if m := goIdentifier.FindString(text); m != "" {
				t.Errorf("%q: the message names %q, a Go identifier: %q", args, m, msg)
			}
		}
	}
	// The positive control: the same driver and session run a command.
	if r := cli(t, "", false, "exec", "--driver", drv, "--", "echo", "x"); r.code != 0 {
		t.Fatalf("control: exit %d %q", r.code, r.stderr)
	}
}

// The regular expression catches the names this test is about.
func TestGoIdentifierPattern(t *testing.T) {
	for _, s := range []string{"set Command.SessionID", "with WithSession", "MaxOutputBytes", "sessionID"} {
		if !goIdentifier.MatchString(s) {
			t.Errorf("%q not caught", s)
		}
	}
	for _, s := range []string{"--session: empty", `--workspace: "/x" does not exist`, "aleph-sandbox: denied (approval_denied)"} {
		if m := goIdentifier.FindString(s); m != "" {
			t.Errorf("%q caught %q", s, m)
		}
	}
}

// drivers names a driver of this project built for another system in one
// line, as such, without launching it (it could only fail to start); the
// driver for this system beside it is launched and reported (the control).
func TestDriversNamesOtherSystemsInOneLine(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in drivers for other systems are shell scripts")
	}
	drv := cliEnv(t)
	dir := t.TempDir()
	t.Setenv("ALEPH_SANDBOX_PLUGIN_DIR", dir)
	t.Setenv("PATH", t.TempDir())
	launched := filepath.Join(t.TempDir(), "launched")
	others := map[string]string{"darwin": "seatbelt", "windows": "appcontainer", "linux": "bwrap"}
	own := others[goos()]
	for sys, name := range others {
		p := filepath.Join(dir, "aleph-driver-"+name)
		if sys == goos() {
			if err := os.Symlink(drv, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho "+name+" >> "+launched+"\nexit 3\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := cli(t, "", false, "drivers")
	if r.code != 0 {
		t.Fatalf("drivers: exit %d %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	for sys, name := range others {
		if sys == goos() {
			continue
		}
		var mine []string
		for i, l := range lines {
			if strings.HasPrefix(l, name+" ") {
				mine = append(mine, l)
				if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "  ") {
					t.Errorf("%s: more than one line: %q", name, lines[i+1])
				}
			}
		}
		if len(mine) != 1 || !strings.Contains(mine[0], "for "+osLabel(sys)+", not this system") || strings.Contains(r.stdout, "error") {
			t.Errorf("drivers: %s is not one line saying it is for %s:\n%s", name, osLabel(sys), r.stdout)
		}
	}
	if _, err := os.Stat(launched); err == nil {
		b, _ := os.ReadFile(launched)
		t.Errorf("drivers launched a driver for another system: %s", b)
	}
	if own != "" && !strings.Contains(r.stdout, own+" (default)") || !strings.Contains(r.stdout, "backend "+"fake") {
		t.Errorf("drivers: this system's driver is not reported:\n%s", r.stdout)
	}
	// The protocol with its minor version (-i and -t need 1.2), as the
	// driver reports it (the test driver, served by this driverapi).
	if want := fmt.Sprintf(", protocol %d.%d, ", driverapi.ProtocolVersion, driverapi.ProtocolMinor); !strings.Contains(r.stdout, want) {
		t.Errorf("drivers: no %q:\n%s", want, r.stdout)
	}
	j := cli(t, "", false, "drivers", "--json")
	for sys, name := range others {
		if sys != goos() && !strings.Contains(j.stdout, `"name":"`+name+`","path":"`+filepath.Join(dir, "aleph-driver-"+name)+`","default":false,"for_os":"`+sys+`"}`) {
			t.Errorf("drivers --json: %s not marked for_os %s: %s", name, sys, j.stdout)
		}
	}
}

// withoutComment drops a trailing shell comment (" # ...").
func withoutComment(line string) string {
	if i := strings.Index(line, " #"); i >= 0 {
		return strings.TrimSpace(line[:i])
	}
	return line
}

// A mistyped command gets the nearest one named (and a command nothing is
// near gets none); `help` of a mistyped command likewise.
func TestMistypedCommandSuggestsNearest(t *testing.T) {
	cliEnv(t)
	for typed, want := range map[string]string{
		"exce": "exec", "exex": "exec", "serv": "serve", "confromance": "conformance",
		"doctr": "doctor", "polcy": "policy", "conf": "config",
	} {
		r := cli(t, "", false, typed)
		if r.code != 2 || !strings.Contains(r.stderr, fmt.Sprintf("did you mean %q?", want)) {
			t.Errorf("%s: exit %d, stderr %q, want a suggestion of %q", typed, r.code, r.stderr, want)
		}
		r = cli(t, "", false, "help", typed)
		if r.code != 2 || !strings.Contains(r.stderr, fmt.Sprintf("did you mean %q?", want)) {
			t.Errorf("help %s: exit %d, stderr %q, want a suggestion of %q", typed, r.code, r.stderr, want)
		}
	}
	r := cli(t, "", false, "frobnicate")
	if r.code != 2 || strings.Contains(r.stderr, "did you mean") || !strings.Contains(r.stderr, `unknown command "frobnicate"`) {
		t.Errorf("frobnicate: exit %d, stderr %q, want no suggestion", r.code, r.stderr)
	}
}

// exec's --help says what a newcomer otherwise learns by surprise: the
// output budget is one for stdout and stderr together, and a command has
// a 60 s timeout unless told otherwise. mcp's --allow-spawn takes no value.
func TestHelpSaysBudgetAndDefaultTimeout(t *testing.T) {
	cliEnv(t)
	r := cli(t, "", false, "exec", "--help")
	flags, _ := helpSections(r.stdout)
	var budget, timeout string
	for _, l := range flags {
		if strings.Contains(l, "--max-output") {
			budget = l
		}
		if strings.Contains(l, "--timeout") {
			timeout = l
		}
	}
	if !strings.Contains(budget, "shared by stdout and stderr") || !strings.Contains(budget, "1 MiB") {
		t.Errorf("exec --help, --max-output: %q, want it to say the budget is shared by stdout and stderr, 1 MiB by default", budget)
	}
	if !strings.Contains(timeout, "60 s") {
		t.Errorf("exec --help, --timeout: %q, want the 60 s default", timeout)
	}
	r = cli(t, "", false, "mcp", "--help")
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.Contains(l, "--allow-spawn") && strings.HasPrefix(strings.TrimSpace(l), "--allow-spawn ") &&
			!regexp.MustCompile(`^\s*--allow-spawn\s{2,}`).MatchString(l) {
			t.Errorf("mcp --help shows --allow-spawn with a value: %q", l)
		}
	}
}
